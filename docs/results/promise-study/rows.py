"""The study's rows, gathered into ``checkpoints.csv`` beside this file as they are measured.

Each seed is one ``taco-compare`` (``run.sh S``: ``OUT/seedS``) that measures each checkpoint
as soon as it is saved. Run directories do not survive between sessions, so the rows are
committed as they come, and a run that is lost before it finishes is rerun from update 0 in a
later session (PLAN.md, "How it is run"): its rows then replace all of the lost run's, which
move to ``checkpoints-lost-runs.csv`` for the record (read by no analysis).

    python rows.py merge OUT/seedS [OUT/seedT ...]   # their rows into checkpoints.csv
    python rows.py follow OUT/seedS [--every 180]    # merge and git-commit as they come
    python rows.py missing                          # the declared runs not finished

``merge`` replaces, run by run, the committed rows of each run that a directory measured after
update 0 (:func:`taco_fairseq.comparison.tables.merge_runs`); the lost run's rows it replaces
are appended to ``checkpoints-lost-runs.csv`` (a checkpoint that file holds already is kept as
it is there: the first lost run's).

``follow`` is ``merge`` every ``--every`` seconds while seed S runs (start it beside
``run.sh S``), each change committed at once (``git commit`` of the two CSVs only), until the
seed's three runs have their last rows committed.
"""
import argparse
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Optional, Sequence

from taco_fairseq.comparison.tables import (
    as_written,
    checkpoint_name,
    measured_rows,
    merge_runs,
    read_checkpoints_csv,
    write_checkpoints_csv,
)

HERE = Path(__file__).parent
COMMITTED = HERE / "checkpoints.csv"
LOST_RUNS = HERE / "checkpoints-lost-runs.csv"
#: PLAN.md's seeds and each arm's last checkpoint.
SEEDS = range(6, 19)
LAST_UPDATES = {"mlm": 10500, "taco": 3500, "taco-branch": 6500}


def missing(committed: Sequence[dict]) -> List[str]:
    """The runs of PLAN.md whose last checkpoint has no committed row."""
    have = {(r["objective"], r["pretrain_seed"], r["updates"]) for r in committed}
    return [f"{o}-seed{s}" for s in SEEDS for o, last in LAST_UPDATES.items()
            if (o, s, last) not in have]


def replaced(committed: Sequence[dict], merged: Sequence[dict]) -> List[dict]:
    """The rows of ``committed`` (after update 0) that ``merged`` no longer holds as the CSV
    wrote them (4 decimals): those of a lost run that a rerun replaced."""
    kept = {checkpoint_name(r): r for r in merged}

    def same(old: dict, new: Optional[dict]) -> bool:
        return new is not None and all(
            _written(new.get(k)) == _written(v) for k, v in old.items() if v is not None)

    return [r for r in committed if r["updates"] != 0 and not same(r, kept.get(checkpoint_name(r)))]


def _written(value):
    return as_written(value) if isinstance(value, float) else value


def merge(outs: Sequence[Path], committed_path: Path = COMMITTED,
          lost_path: Path = LOST_RUNS) -> int:
    """Merge the rows measured in ``outs`` into ``committed_path`` (created if need be) and the
    replaced rows into ``lost_path``; the number of rows written to ``committed_path``."""
    committed = read_checkpoints_csv(committed_path) if committed_path.is_file() else []
    rows = merge_runs(committed, {out: measured_rows(out) for out in outs})
    lost = replaced(committed, rows)
    if lost:
        earlier = read_checkpoints_csv(lost_path) if lost_path.is_file() else []
        recorded = {checkpoint_name(r) for r in earlier}
        write_checkpoints_csv([*earlier, *(r for r in lost if checkpoint_name(r) not in recorded)],
                              lost_path)
    write_checkpoints_csv(rows, committed_path)
    return len(rows)


def commit_rows(paths: Sequence[Path], message: str) -> bool:
    """``git commit`` of ``paths`` (those that exist) alone, when they changed; True when a
    commit was made. A commit git refuses (another commit holds the index) is printed and
    left to the next call."""
    paths = [str(p) for p in paths if p.is_file()]
    if not paths:  # a commit without paths would take whatever else is staged
        return False
    cwd = Path(paths[0]).parent
    status = subprocess.run(["git", "status", "--porcelain", "--", *paths], cwd=cwd,
                            capture_output=True, text=True, check=True).stdout
    if not status.strip():
        return False
    for command in (["git", "add", "--", *paths],
                    ["git", "commit", "-q", "-m", message, "--", *paths]):
        result = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
        if result.returncode != 0:
            print(f"rows.py: {' '.join(command[:2])} failed ({result.stderr.strip()}); tried "
                  "again next time", file=sys.stderr, flush=True)
            return False
    return True


def follow(out: Path, seed: int, every: float = 180.0, committed_path: Path = COMMITTED,
           lost_path: Path = LOST_RUNS, sleep=time.sleep) -> int:
    """Merge ``out``'s rows (:func:`merge`) every ``every`` seconds and commit the CSVs each
    time they change (:func:`commit_rows`), until seed ``seed``'s three runs have their last
    rows committed (:func:`missing`). Returns the number of commits made."""
    commits = 0
    while True:
        if (Path(out) / "measures").is_dir():  # taco-compare makes it once it has begun
            n = merge([out], committed_path, lost_path)
            if commit_rows([committed_path, lost_path],
                           f"promise-study: seed {seed}'s rows as measured ({n} rows)"):
                commits += 1
                print(f"{time.strftime('%H:%M:%S')} committed {n} rows", flush=True)
            left = [run for run in missing(read_checkpoints_csv(committed_path))
                    if run.endswith(f"-seed{seed}")]
            if not left:
                return commits
        sleep(every)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["merge", "follow", "missing"])
    parser.add_argument("outs", nargs="*", type=Path, help="taco-compare --out directories")
    parser.add_argument("--every", type=float, default=180.0,
                        help="follow: seconds between merges (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.action == "follow":
        seed = re.fullmatch(r"seed(\d+)", args.outs[0].name) if len(args.outs) == 1 else None
        if seed is None:
            parser.error("follow needs one run.sh directory, OUT/seedS")
        print(f"rows.py: seed {seed[1]}: {follow(args.outs[0], int(seed[1]), args.every)} "
              "commits; its three runs are committed", flush=True)
        return 0
    if args.action == "missing":
        committed = read_checkpoints_csv(COMMITTED) if COMMITTED.is_file() else []
        print(" ".join(missing(committed)) or "none")
        return 0
    if not args.outs:
        parser.error("merge needs a taco-compare --out directory (OUT/seedS)")
    print(f"{COMMITTED}: {merge(args.outs)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
