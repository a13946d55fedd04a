"""The speed-up of one pre-training run over another (paper §4.2: "TACO reaches MLM's
250k-update GLUE average with 1/5 of the updates"; Figure 5): the one definition that both
``taco-glue-sweep`` (:func:`taco_fairseq.glue.sweep.speedup`) and ``taco-compare``
(:func:`taco_fairseq.comparison.statistics.speedup`) report.

Each run gives a curve: a score (e.g. a GLUE dev average, points, higher is better) at the
update counts of its saved checkpoints. The speed-up of a *candidate* over a *baseline* is

    (updates of the baseline's first checkpoint with its best score)
    / (updates at which the candidate's curve first reaches that score),

where the candidate's reach is interpolated linearly between the checkpoint below the score and
the first one at or above it (:func:`first_reach`), e.g. the paper's 5× for BERT-small: MLM's
best at 250k updates, reached by TACO at 50k.

Why interpolated, not "the first checkpoint at or above" (what ``taco-glue-sweep`` reported
before; both read the same checkpoints):

- The first checkpoint at or above puts the reach on the save grid, so the speed-up depends on
  ``--save-interval-updates``: it can only be ``baseline_updates / (k · interval)`` and is
  biased low (the candidate passed the score somewhere in the interval before that checkpoint,
  not at its end). With the comparison's few checkpoints (e.g. 5) the grid is coarse and the
  bias large.
- The interpolation reads the curve as Figure 5 draws it, straight lines between measured
  checkpoints: its reach lies in the same interval (so it is never farther from the truth than
  one interval either), it is exact where the curve is linear there, it moves continuously with
  the scores (a score 0.01 points lower does not move the reach by a whole interval), and two
  runs saved at different intervals can be compared.

The baseline's best is a measured checkpoint, not interpolated: the score the candidate has to
reach is one the baseline was seen to have.
"""

from typing import Dict, Optional, Sequence

import numpy as np


def first_reach(updates: Sequence[int], curve: Sequence[float], target: float) -> Optional[float]:
    """When a curve first reaches a target.

    Args:
        updates: ``[k]`` update counts of the checkpoints, ascending.
        curve: ``[k]`` the values at them (e.g. a GLUE average, points).
        target: the value to reach, in the curve's unit.

    Returns:
        The first update count at which ``curve`` ≥ ``target``, interpolated linearly between
        the checkpoint below the target and the first one at or above it (module doc); the
        first checkpoint's count when it starts at or above; None if the curve never reaches
        it (a NaN value never does, an empty curve neither). Raises nothing.
    """
    for i, value in enumerate(curve):
        if value >= target:
            if i == 0:
                return float(updates[0])
            before = curve[i - 1]
            share = (target - before) / (value - before)
            return updates[i - 1] + share * (updates[i] - updates[i - 1])
    return None


def curve_speedup(baseline_updates: Sequence[int], baseline: Sequence[float],
                  candidate_updates: Sequence[int],
                  candidate: Sequence[float]) -> Dict[str, Optional[float]]:
    """The speed-up (module doc) of the ``candidate`` curve over the ``baseline`` curve.

    Args:
        baseline_updates, baseline: ``[k]`` the baseline's update counts (ascending, k ≥ 1)
            and its values at them (one unit, higher is better, e.g. GLUE average points).
        candidate_updates, candidate: ``[m]`` the same of the candidate (its own checkpoints,
            which need not be the baseline's; m = 0: not reached).

    Returns:
        ``baseline_best`` (the baseline's best value), ``baseline_updates`` (the first update
        count with it), ``candidate_updates`` (:func:`first_reach` of the candidate to that
        value, a float; None: not reached) and ``speedup`` = baseline_updates /
        candidate_updates (None: not reached, or reached at update 0, where there is no
        ratio).

    Raises:
        ValueError: an empty baseline.
    """
    best = max(baseline)
    at = baseline_updates[int(np.argmax(baseline))]
    reach = first_reach(candidate_updates, candidate, best)
    return {"baseline_best": best, "baseline_updates": at, "candidate_updates": reach,
            "speedup": at / reach if reach else None}
