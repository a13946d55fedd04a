"""Scores of a comparison and what follows from them: GLUE averages over updates, the paired
difference between two objectives with a bootstrap interval, and the speed-up (paper §4.2:
"TACO reaches MLM's 250k-update GLUE average with 1/5 of the updates").

A *score* is the dev score (points, 0-100) of one fine-tuning: objective × pre-training seed
× pre-training updates × GLUE dev set × fine-tuning seed. A correlation that is undefined
(constant predictions, scipy's NaN) counts as 0 in averages, as GLUE's scorer does.

Bootstrap (percentile, 95%): each resample draws the pre-training seeds with replacement and,
per task, the fine-tuning seeds with replacement; the same draw serves every objective and
update count, so the differences are paired (runs of one seed share data order, masks and
initialization).
"""

import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

#: Resamples of the bootstrap.
BOOTSTRAP_SAMPLES = 2000


@dataclass(frozen=True)
class Score:
    """One fine-tuning's dev score. ``metric``/``score``: the standard GLUE metric (MCC for
    CoLA); ``paper_metric``/``paper_score``: the paper's (accuracy for CoLA)."""

    objective: str
    pretrain_seed: int
    updates: int
    task: str
    seed: int
    metric: str
    score: float
    paper_metric: str
    paper_score: float


class ScoreTable:
    """Scores arranged as ``[pretrain seed, fine-tuning seed]`` arrays per objective, update
    count and task, over the seeds that every cell has.

    Raises (constructor):
        ValueError: no scores.
    """

    def __init__(self, scores: Sequence[Score], paper: bool = False):
        if not scores:
            raise ValueError("no fine-tuning results to summarize")
        self.objectives = list(dict.fromkeys(s.objective for s in scores))
        self.updates = sorted({s.updates for s in scores})
        self.tasks = list(dict.fromkeys(s.task for s in scores))
        self.pretrain_seeds = sorted({s.pretrain_seed for s in scores})
        self.seeds = sorted({s.seed for s in scores})
        cells: Dict[Tuple[str, int, str], Dict[Tuple[int, int], float]] = {}
        for s in scores:
            value = s.paper_score if paper else s.score
            cells.setdefault((s.objective, s.updates, s.task), {})[
                (s.pretrain_seed, s.seed)] = 0.0 if math.isnan(value) else value
        self._cells = {
            key: np.array([[runs[(p, f)] for f in self.seeds] for p in self.pretrain_seeds])
            for key, runs in cells.items()
            if all((p, f) in runs for p in self.pretrain_seeds for f in self.seeds)
        }

    def cell(self, objective: str, updates: int, task: str) -> Optional[np.ndarray]:
        """``[pretrain seeds, seeds]`` scores, or None when a run is missing."""
        return self._cells.get((objective, updates, task))

    def curve_tasks(self) -> List[str]:
        """Tasks with complete results at every update count of every objective: those a
        GLUE-average curve can be drawn over."""
        return [t for t in self.tasks
                if all(self.cell(o, u, t) is not None
                       for o in self.objectives for u in self.updates)]

    def complete_tasks(self, updates: int) -> List[str]:
        """Tasks with complete results for every objective at ``updates``."""
        return [t for t in self.tasks
                if all(self.cell(o, updates, t) is not None for o in self.objectives)]

    def average(self, objective: str, updates: int, tasks: Sequence[str],
                pretrain: Optional[np.ndarray] = None,
                seeds: Optional[Dict[str, np.ndarray]] = None) -> float:
        """GLUE average (points): the mean over ``tasks`` of each task's mean over runs;
        ``pretrain``/``seeds`` select (resampled) seed indices."""
        means = []
        for t in tasks:
            cell = self.cell(objective, updates, t)
            if pretrain is not None:
                cell = cell[pretrain][:, seeds[t]]
            means.append(cell.mean())
        return float(np.mean(means))

    def seed_averages(self, objective: str, updates: int, tasks: Sequence[str]) -> np.ndarray:
        """The GLUE average of each (pre-training seed, fine-tuning seed) pair, flattened:
        the spread over seeds."""
        return np.mean([self.cell(objective, updates, t) for t in tasks], axis=0).ravel()

    def resamples(self, tasks: Sequence[str], samples: int = BOOTSTRAP_SAMPLES, seed: int = 0):
        """``samples`` bootstrap draws ``(pretrain indices, {task: seed indices})``."""
        rng = np.random.default_rng(seed)
        n_p, n_f = len(self.pretrain_seeds), len(self.seeds)
        for _ in range(samples):
            yield (rng.integers(0, n_p, n_p),
                   {t: rng.integers(0, n_f, n_f) for t in tasks})


def interval(values: Sequence[float]) -> Tuple[float, float]:
    """The 95% percentile interval of bootstrap ``values``."""
    low, high = np.percentile(np.asarray(values, float), [2.5, 97.5])
    return float(low), float(high)


def bootstrap(table: ScoreTable, tasks: Sequence[str], statistic,
              samples: int = BOOTSTRAP_SAMPLES) -> Dict[str, float]:
    """``statistic(pretrain indices, {task: seed indices})`` (``None, None``: all runs) and
    its bootstrap interval: ``{"difference", "low", "high"}``."""
    low, high = interval([statistic(p, s) for p, s in table.resamples(tasks, samples)])
    return {"difference": statistic(None, None), "low": low, "high": high}


def paired_difference(table: ScoreTable, candidate: str, baseline: str, updates: int,
                      tasks: Sequence[str], samples: int = BOOTSTRAP_SAMPLES) -> Dict[str, float]:
    """``candidate − baseline`` GLUE average over ``tasks`` at ``updates`` (points), with its
    bootstrap interval (``low``, ``high``)."""
    return bootstrap(table, tasks, lambda p, s: table.average(candidate, updates, tasks, p, s)
                     - table.average(baseline, updates, tasks, p, s), samples)


def improvement(table: ScoreTable, objective: str, first: int, last: int,
                tasks: Sequence[str], samples: int = BOOTSTRAP_SAMPLES) -> Dict[str, float]:
    """How much ``objective``'s GLUE average over ``tasks`` rises from ``first`` to ``last``
    updates (points), with its bootstrap interval: whether the runs are long enough for GLUE
    to move at all."""
    return bootstrap(table, tasks, lambda p, s: table.average(objective, last, tasks, p, s)
                     - table.average(objective, first, tasks, p, s), samples)


def first_reach(updates: Sequence[int], curve: Sequence[float], target: float) -> Optional[float]:
    """The first update count at which ``curve`` reaches ``target``, interpolated linearly
    between checkpoints; the first checkpoint's count when it starts above; None if never."""
    for i, value in enumerate(curve):
        if value >= target:
            if i == 0:
                return float(updates[0])
            before = curve[i - 1]
            share = (target - before) / (value - before)
            return updates[i - 1] + share * (updates[i] - updates[i - 1])
    return None


def speedup_at(updates: Sequence[int], baseline: Sequence[float],
               candidate: Sequence[float]) -> Dict[str, Optional[float]]:
    """The baseline's best average, the first update count with it, the (interpolated) update
    count at which the candidate reaches it and their ratio, the speed-up (None: not
    reached)."""
    best = max(baseline)
    at = updates[int(np.argmax(baseline))]
    reach = first_reach(updates, candidate, best)
    return {"baseline_best": best, "baseline_updates": at, "candidate_updates": reach,
            "speedup": at / reach if reach else None}


def speedup(table: ScoreTable, candidate: str, baseline: str, tasks: Sequence[str],
            samples: int = BOOTSTRAP_SAMPLES) -> Dict[str, object]:
    """:func:`speedup_at` on the GLUE-average curves, with the bootstrap interval of the
    speed-up (a resample where the candidate never reaches the baseline counts as speed-up 0)
    and the share of resamples where it is not reached."""
    updates = table.updates

    def curves(p=None, s=None):
        return ([table.average(baseline, u, tasks, p, s) for u in updates],
                [table.average(candidate, u, tasks, p, s) for u in updates])

    point = speedup_at(updates, *curves())
    draws = [speedup_at(updates, *curves(p, s))["speedup"]
             for p, s in table.resamples(tasks, samples)]
    values = [d or 0.0 for d in draws]
    low, high = interval(values)
    return dict(point, low=low, high=high,
                not_reached=sum(d is None for d in draws) / len(draws))
