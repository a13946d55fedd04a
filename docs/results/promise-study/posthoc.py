"""The promise study's post hoc description: what docs/results.md says beside the declared
decision, computed from the same ``checkpoints.csv``. Nothing here is in PLAN.md, no
statistical test is made, and no verdict follows from it:

    .venv/bin/python docs/results/promise-study/posthoc.py              # checkpoints.csv here
    .venv/bin/python docs/results/promise-study/posthoc.py --csv PATH   # another file

It prints a markdown report of the seeds that finished all three runs (analysis.py's
:class:`Study`):

- **exits:** per seed, the first checkpoint of MLM and of TACO whose first-layer neighbour share
  is at least analysis.py's ``EXIT_RATIO`` times its uniform value (fairseq-train's exit line
  and Gate A use the same ratio), with the share, the ratio and the validation loss (bits);
- **MLM reaching the arms:** the updates at which MLM first reaches TACO(TACO_END)'s and the
  branch(BRANCH_END)'s values on each of analysis.py's ``SPEEDUP_MEASURES``, by linear
  interpolation between MLM's checkpoints (``first_reach``; a loss negated first), and over
  TACO_END (and BRANCH_END): the other way round from PLAN.md §5's speed-up, which asks when
  the arms reach MLM(N); also without MLM's ``UNREAD`` checkpoints (5,000 and 6,000:
  measured because they are on the branch's list, read by no rule of PLAN.md, its addendum);
- **the branch's end, checkpoint against checkpoint:** per seed, branch(BRANCH_END) −
  MLM(BRANCH_END) on each of the ``SPEEDUP_MEASURES``;
- **MLM's part-of-speech peak:** per seed, the checkpoint where MLM's accuracy on ambiguous
  words is highest, and its values at 8,000 and N updates;
- **the neighbour share after B:** the mean over seeds of share / uniform at each checkpoint
  from B on, MLM's and the branch's.

Exit status: 0, or 1 when the CSV cannot be read or analysed (message on stderr).
"""

import argparse
import sys
from pathlib import Path
from typing import Optional, Sequence, Tuple

import numpy as np

from analysis import (B, BRANCH, BRANCH_END, CSV, EXIT_RATIO, FORMATS, MLM, N, POS, SHARE,
                      SPEEDUP_MEASURES, TACO, TACO_END, UNIFORM, VALID, Study)
from taco_fairseq.comparison.statistics import better
from taco_fairseq.comparison.tables import read_checkpoints_csv
from taco_fairseq.glue.speedup import first_reach

#: MLM's checkpoint before N where its part-of-speech accuracy is also reported.
POS_ALSO_AT = 8000
#: MLM's checkpoints that no rule of PLAN.md reads (its addendum: taco-compare measures them
#: because they are on the branch's list); MLM's reach is also given without them.
UNREAD = (5000, 6000)


def share_ratio(study: Study, objective: str, updates: int, seed: int) -> Optional[float]:
    """The first layer's neighbour share over its uniform value at one checkpoint (None: not
    measured)."""
    share, uniform = (study.value(k, objective, updates, seed) for k in (SHARE, UNIFORM))
    return None if share is None or not uniform else share / uniform


def first_exit(study: Study, objective: str, seed: int
               ) -> Optional[Tuple[int, float, float, Optional[float]]]:
    """The first checkpoint of one run whose share is ≥ EXIT_RATIO × uniform: (updates, share,
    ratio, validation loss in bits), or None if no checkpoint is."""
    for updates in study.table.updates:
        ratio = share_ratio(study, objective, updates, seed)
        if ratio is not None and ratio >= EXIT_RATIO:
            return (updates, study.value(SHARE, objective, updates, seed), ratio,
                    study.value(VALID, objective, updates, seed))
    return None


def mlm_reach(study: Study, key: str, seed: int, target: float,
              without: Sequence[int] = ()) -> Optional[float]:
    """Updates at which MLM first reaches ``target`` on ``key`` (interpolated between its
    checkpoints up to N, leaving out those in ``without``; None: not by N)."""
    updates, values = study.curve(key, MLM, seed, N)
    kept = [(u, v) for u, v in zip(updates, values) if u not in without]
    updates, values = [u for u, _ in kept], [v for _, v in kept]
    sign = better(key)
    return first_reach(updates, [sign * v for v in values], sign * target)


def _fmt(value: Optional[float], decimals: int) -> str:
    return "—" if value is None else f"{value:,.{decimals}f}"


def report(study: Study) -> str:
    """The markdown report (module doc)."""
    seeds = study.seeds
    lines = ["# The promise study, post hoc (posthoc.py; described, not declared, no statistical test)", "",
             f"Seeds: {', '.join(map(str, seeds))}.", "",
             f"## First checkpoint with neighbour share ≥ {EXIT_RATIO:g} × uniform", "",
             "| seed | arm | updates | share | share / uniform | validation loss (bits) |",
             "|---|---|---|---|---|---|"]
    for seed in seeds:
        for arm in (MLM, TACO):
            found = first_exit(study, arm, seed)
            cells = ("not by its end", "", "", "") if found is None else (
                f"{found[0]:,}", f"{found[1]:.3f}", f"{found[2]:.2f}", _fmt(found[3], 2))
            lines.append(f"| {seed} | {arm} | " + " | ".join(cells) + " |")

    lines += ["", "## MLM's updates to reach the arms' last values (interpolated)", "",
              f"Over TACO_END = {TACO_END:,} and BRANCH_END = {BRANCH_END:,}: MLM's updates per "
              "update of the arm, the other way round from PLAN.md §5's speed-up.", "",
              f"Without: MLM's checkpoints at {' and '.join(f'{u:,}' for u in UNREAD)} left "
              "out (no rule reads them).", "",
              f"| seed | measure | TACO({TACO_END:,}) | MLM reaches it at | / {TACO_END:,} "
              "| without | / without "
              f"| branch({BRANCH_END:,}) | MLM reaches it at | / {BRANCH_END:,} "
              "| without | / without |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for key in SPEEDUP_MEASURES:
        decimals = FORMATS[key][1]
        for seed in seeds:
            cells = []
            for arm, end in ((TACO, TACO_END), (BRANCH, BRANCH_END)):
                target = study.value(key, arm, end, seed)
                cells.append(_fmt(target, decimals))
                for without in ((), UNREAD):
                    reach = mlm_reach(study, key, seed, target, without)
                    cells += [_fmt(reach, 0),
                              "not by N" if reach is None else f"{reach / end:.2f}"]
            lines.append(f"| {seed} | {key} | " + " | ".join(cells) + " |")

    lines += ["", f"## At {BRANCH_END:,} updates: branch − MLM, checkpoint against checkpoint",
              "", "| seed | " + " | ".join(SPEEDUP_MEASURES) + " |",
              "|---|" + "---|" * len(SPEEDUP_MEASURES)]
    for seed in seeds:
        cells = []
        for key in SPEEDUP_MEASURES:
            branch, mlm = (study.value(key, arm, BRANCH_END, seed) for arm in (BRANCH, MLM))
            cells.append("—" if branch is None or mlm is None
                         else f"{branch - mlm:+.{FORMATS[key][1]}f}")
        lines.append(f"| {seed} | " + " | ".join(cells) + " |")

    lines += ["", "## MLM's part-of-speech accuracy on ambiguous words (points)", "",
              f"| seed | highest | at updates | at {POS_ALSO_AT:,} | at {N:,} |",
              "|---|---|---|---|---|"]
    for seed in seeds:
        updates, values = study.curve(POS, MLM, seed, N)
        best = int(np.argmax(values))
        lines.append(f"| {seed} | {values[best]:.2f} | {updates[best]:,} | "
                     f"{_fmt(study.value(POS, MLM, POS_ALSO_AT, seed), 2)} | "
                     f"{_fmt(study.value(POS, MLM, N, seed), 2)} |")

    lines += ["", "## First-layer neighbour share / uniform from B on (mean over seeds)", "",
              "| updates | MLM | n | branch | n |", "|---|---|---|---|---|"]
    for updates in (u for u in study.table.updates if u >= B):
        cells = []
        for arm in (MLM, BRANCH):
            ratios = [r for r in (share_ratio(study, arm, updates, s) for s in seeds)
                      if r is not None]
            cells += [f"{np.mean(ratios):.2f}" if ratios else "", str(len(ratios) or "")]
        lines.append(f"| {updates:,} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The command line (module doc); returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--csv", type=Path, default=CSV,
                        help="the study's rows (default: checkpoints.csv beside analysis.py)")
    csv = parser.parse_args(argv).csv
    try:
        study = Study(read_checkpoints_csv(csv))
    except (OSError, ValueError) as error:
        sys.exit(f"posthoc.py: {error}")
    print(report(study), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
