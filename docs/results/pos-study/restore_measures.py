"""Resume the study after its run directory was lost: the committed initializations back into
``OUT/pos-study/measures``, and a comparison of the rerun pre-trainings with the lost ones.

A lost run is rerun from update 0 by ``run.sh``. Its initialization (update 0) is the same
parameters (drawn from the seeded generators; on 2026-12-05 seed 1's was re-measured equal to
every committed digit), so ``restore`` writes each committed initialization row as
taco-compare's cached measure (``OUT/pos-study/measures/<objective>-seed<S>@0.json``, which
phase 2 reads instead of measuring; ``--remeasure`` leaves named ones to be measured again).
The training itself is not bit-identical on another machine (on 2026-12-05 the rerun's
validation loss left the lost run's at 2,000 updates, 9.230 against 9.228), so every other
checkpoint of a rerun is measured again and its row replaces the lost run's.
``check`` compares a committed CSV (default: the lost runs' rows,
``checkpoints-lost-runs.csv``) with the rerun: the validation masked-LM loss of fairseq's log at
each committed checkpoint, and every measure of the checkpoints measured again; it prints the
differences beyond the CSV's rounding and exits 1 if there is any.

    python docs/results/pos-study/restore_measures.py restore OUT/pos-study
    python docs/results/pos-study/restore_measures.py check OUT/pos-study
"""
import argparse
import csv
import json
import sys
from pathlib import Path

from taco_fairseq.comparison.pretraining import validation_losses

HERE = Path(__file__).parent
COMMITTED = HERE / "checkpoints.csv"
LOST_RUNS = HERE / "checkpoints-lost-runs.csv"
TEXT_COLUMNS = {"objective"}
INTEGER_COLUMNS = {"pretrain_seed", "updates"}


def committed_rows(path: Path = COMMITTED) -> dict:
    """name (``<objective>-seed<S>@<updates>``) → the committed row, typed as phase 2 writes
    it (None for an empty cell)."""
    rows = {}
    with open(path, newline="", encoding="utf-8") as f:
        for raw in csv.DictReader(f):
            row = {k: (None if v == "" else v if k in TEXT_COLUMNS
                       else int(v) if k in INTEGER_COLUMNS else float(v))
                   for k, v in raw.items()}
            rows[f"{row['objective']}-seed{row['pretrain_seed']}@{row['updates']}"] = row
    return rows


def restore(out: Path, remeasure) -> None:
    directory = out / "measures"
    directory.mkdir(parents=True, exist_ok=True)
    rows = committed_rows()
    unknown = set(remeasure) - set(rows)
    if unknown:
        sys.exit(f"--remeasure: no committed row named {sorted(unknown)}")
    written = 0
    for name, row in rows.items():
        path = directory / f"{name}.json"
        if row["updates"] != 0 or name in remeasure or path.exists():
            continue
        path.write_text(json.dumps(row, indent=2) + "\n")
        written += 1
    print(f"{written} committed initializations restored to {directory}; "
          f"to be measured again: {', '.join(sorted(remeasure)) or 'none'}")


def check(out: Path, committed: Path = LOST_RUNS) -> int:
    differences, compared = [], 0
    for name, row in committed_rows(committed).items():
        run, updates = name.split("@")
        if row["valid_mlm_loss"] is not None:
            logged = validation_losses(out / "pretrain" / run).get(int(updates))
            if logged is not None:
                compared += 1
                if abs(logged - row["valid_mlm_loss"]) > 5e-4:
                    differences.append(f"{name} valid_mlm_loss: log {logged}, "
                                       f"committed {row['valid_mlm_loss']}")
        measured = out / "measures" / f"{name}.json"
        again = json.loads(measured.read_text()) if measured.is_file() else {}
        if again and again != row:  # measured again (a restored row equals the committed one)
            compared += 1
            for key, value in row.items():
                new = again.get(key)
                if isinstance(value, float) and isinstance(new, float):
                    same = abs(new - value) <= 5e-5 + 1e-9 * abs(value)
                else:
                    same = new == value
                if not same:
                    differences.append(f"{name} {key}: now {new}, committed {value}")
    print(f"{compared} committed values or rows compared with the rerun; "
          f"{len(differences)} differ")
    for line in differences:
        print("  " + line)
    return 1 if differences else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["restore", "check"])
    parser.add_argument("out", type=Path, help="the study's directory (OUT/pos-study)")
    parser.add_argument("--remeasure", nargs="*", default=[],
                        help="initializations (<objective>-seed<S>@0) to measure again")
    parser.add_argument("--committed", type=Path, default=LOST_RUNS,
                        help="check: the rows to compare the rerun with (default: %(default)s)")
    args = parser.parse_args()
    if args.action == "restore":
        restore(args.out, args.remeasure)
    else:
        sys.exit(check(args.out, args.committed))


if __name__ == "__main__":
    main()
