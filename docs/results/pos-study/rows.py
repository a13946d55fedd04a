"""The study's rows across working sessions, whose run directories do not survive.

The study is run in parts (PLAN.md, amendment of 2026-12-05): each part a ``taco-compare``
of ``run.sh`` over some of the runs, in its own directory, and ``checkpoints.csv`` here the
union of the parts' rows. A run's rows all come from one part: a run rerun from update 0
(its directory lost before it finished) is not bit-identical to the lost one (the training's
floating point differs between machines: on 2026-12-05 the validation loss of MLM seed 1
left the lost run's at 2,000 updates, 9.230 against 9.228 bits), so its rows replace all of
the earlier part's. Initializations (update 0) are the same parameters whatever the machine
(drawn from the seeded generators; seed 1's re-measured equal to every committed digit).

    python rows.py missing                  # the runs that have not reached their last checkpoint
    python rows.py restore PART             # the committed initializations, as PART's measures
    python rows.py merge PART [PART ...]    # PARTS' rows into checkpoints.csv
    python rows.py check PART [--committed CSV]   # a rerun against committed rows

``restore`` writes each committed initialization as the part's cached measure
(``PART/measures/<objective>-seed<S>@0.json``, which phase 2 reads instead of measuring).
``merge`` reads each part's measures (``PART/measures/*.json``: every checkpoint it measured,
whether or not its ``checkpoints.csv`` was rewritten since) and, run by run, replaces the
committed rows of a run the part measured after update 0. ``check`` compares committed rows
(default: the lost runs', ``checkpoints-lost-runs.csv``) with a part's rerun: the validation
loss of fairseq's log and every measure of the checkpoints measured again; it prints the
differences beyond the CSV's rounding and exits 1 if there is any.
"""
import argparse
import json
import sys
from pathlib import Path
from typing import List, Sequence

from taco_fairseq.comparison.pretraining import validation_losses
from taco_fairseq.comparison.tables import checkpoint_name as name_of
from taco_fairseq.comparison.tables import measured_rows as part_rows
from taco_fairseq.comparison.tables import merge_runs as merged
from taco_fairseq.comparison.tables import read_checkpoints_csv, write_checkpoints_csv

HERE = Path(__file__).parent
COMMITTED = HERE / "checkpoints.csv"
LOST_RUNS = HERE / "checkpoints-lost-runs.csv"
#: PLAN.md's runs and each objective's last checkpoint.
LAST_UPDATES = {"mlm": 20000, "taco": 7000}
SEEDS = (1, 2, 3, 4, 5)


def missing(committed: Sequence[dict]) -> List[str]:
    """The runs of PLAN.md whose last checkpoint has no committed row."""
    have = {(r["objective"], r["pretrain_seed"], r["updates"]) for r in committed}
    return [f"{o}-seed{s}" for s in SEEDS for o, last in LAST_UPDATES.items()
            if (o, s, last) not in have]


def restore(part: Path, committed: Sequence[dict]) -> int:
    """Write ``committed``'s initializations that ``part`` lacks as its measures; their count."""
    directory = Path(part) / "measures"
    directory.mkdir(parents=True, exist_ok=True)
    written = 0
    for row in committed:
        path = directory / f"{name_of(row)}.json"
        if row["updates"] == 0 and not path.exists():
            path.write_text(json.dumps(row, indent=2) + "\n")
            written += 1
    return written


def check(part: Path, committed: Sequence[dict]) -> List[str]:
    """The differences between ``committed`` rows and ``part``'s rerun of them (module doc)."""
    differences = []
    measured = {name_of(r): r for r in part_rows(part)}
    for row in committed:
        name = name_of(row)
        if row.get("valid_mlm_loss") is not None:
            run = name.split("@")[0]
            logged = validation_losses(Path(part) / "pretrain" / run).get(row["updates"])
            if logged is not None and abs(logged - row["valid_mlm_loss"]) > 5e-4:
                differences.append(f"{name} valid_mlm_loss: log {logged}, "
                                   f"committed {row['valid_mlm_loss']}")
        again = measured.get(name)
        if again is None or again == row:  # not measured again, or restored as it was
            continue
        for key, value in row.items():
            new = again.get(key)
            if isinstance(value, float) and isinstance(new, float):
                same = abs(new - value) <= 5e-5 + 1e-9 * abs(value)
            else:
                same = new == value
            if not same:
                differences.append(f"{name} {key}: now {new}, committed {value}")
    return differences


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["missing", "restore", "merge", "check"])
    parser.add_argument("parts", nargs="*", type=Path, help="taco-compare --out directories")
    parser.add_argument("--committed", type=Path, default=None,
                        help="the committed rows (default: checkpoints.csv; for check: "
                             "checkpoints-lost-runs.csv)")
    args = parser.parse_args(argv)
    if args.action != "missing" and not args.parts:
        parser.error(f"{args.action} needs a taco-compare --out directory")
    committed_path = args.committed or (LOST_RUNS if args.action == "check" else COMMITTED)
    committed = read_checkpoints_csv(committed_path)
    if args.action == "missing":
        print(" ".join(missing(committed)) or "none")
    elif args.action == "restore":
        for part in args.parts:
            print(f"{part}: {restore(part, committed)} initializations restored")
    elif args.action == "merge":
        rows = merged(committed, {p: part_rows(p) for p in args.parts})
        write_checkpoints_csv(rows, committed_path)
        print(f"{committed_path}: {len(rows)} rows")
    else:
        differences = [d for p in args.parts for d in check(p, committed)]
        print(f"{len(differences)} differences from {committed_path}")
        for line in differences:
            print("  " + line)
        return 1 if differences else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
