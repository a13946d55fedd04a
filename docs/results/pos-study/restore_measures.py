"""Resume the study after its run directory was lost: the committed checkpoints.csv back into
``OUT/pos-study/measures``, and a check that the rerun pre-trainings are the runs measured.

The runs are deterministic given their pre-training seed (same data order, masks, dropout and
thread count), so a lost run is rerun from update 0 by ``run.sh``, but its checkpoints already
measured need not be measured again: ``restore`` writes each committed row as taco-compare's
cached measure (``OUT/pos-study/measures/<objective>-seed<S>@<updates>.json``, which phase 2
reads instead of measuring), except the checkpoints named with ``--remeasure``, which are
measured again as a check. ``check`` then compares, for every committed row, the rerun's
validation masked-LM loss (fairseq's log, 3 decimals) and every measure of the re-measured
checkpoints with the committed values, and exits 1 on any difference beyond the CSV's
rounding (the rows would then belong to another run of the seed).

    python docs/results/pos-study/restore_measures.py restore OUT/pos-study \
        --remeasure mlm-seed1@0 mlm-seed1@500 taco-seed1@500
    python docs/results/pos-study/restore_measures.py check OUT/pos-study
"""
import argparse
import csv
import json
import sys
from pathlib import Path

from taco_fairseq.comparison.pretraining import validation_losses

COMMITTED = Path(__file__).with_name("checkpoints.csv")
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
        if name in remeasure or path.exists():
            continue
        path.write_text(json.dumps(row, indent=2) + "\n")
        written += 1
    print(f"{written} committed rows restored to {directory}; "
          f"to be measured again: {', '.join(sorted(remeasure)) or 'none'}")


def check(out: Path) -> int:
    differences, compared = [], 0
    for name, row in committed_rows().items():
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
        if again and again != row:  # a re-measured checkpoint (restored ones equal the row)
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
                        help="checkpoints (<objective>-seed<S>@<updates>) to measure again")
    args = parser.parse_args()
    if args.action == "restore":
        restore(args.out, args.remeasure)
    else:
        sys.exit(check(args.out))


if __name__ == "__main__":
    main()
