"""Scores and measures of a comparison and what follows from them: the paired difference between
two objectives over pre-training seeds with its t-interval and test, Holm's correction of the
exploratory verdicts, the primary endpoint, and the speed-up (paper §4.2: "TACO reaches MLM's
250k-update GLUE average with 1/5 of the updates").

A *score* is the dev score (points, 0-100) of one fine-tuning: objective × pre-training seed
× pre-training updates × GLUE dev set × fine-tuning seed. A correlation that is undefined
(constant predictions, scipy's NaN) counts as 0 in averages, as GLUE's scorer does. A
*measure* is a number measured on one pre-training checkpoint (objective × pre-training seed ×
updates), e.g. the validation masked-LM loss, the contextual score or a linear probe's score.

The unit of replication is the pre-training seed: runs of one seed share initialization, data
order and masks, so the two objectives of one seed form a pair; fine-tuning seeds of one
checkpoint only add noise to that checkpoint's score (pairing them buys nothing: the encoders
differ). So, per pre-training seed, a score is first averaged over its fine-tuning seeds (and
over the tasks of an average); the difference candidate − baseline is taken per pre-training
seed; and the n per-seed differences get a one-sample (paired) t-test against 0 with n − 1
degrees of freedom and its 95% t-interval (:func:`t_interval`; Student 1908; e.g. Wasserman,
*All of Statistics*, §10.4). Its assumption is that the per-seed differences are independent and
roughly normal; each is a mean over fine-tuning seeds and tasks, which helps.

Why not a resampling method at the study's sizes (n = 3-5 pre-training seeds):

- A sign-flip permutation test of n = 5 paired differences has 2^5 = 32 sign patterns; the
  most extreme observed pattern has two-sided p = 2/32 = 1/16 > 0.05, so it can never reject
  at 5% (at n = 3: 2/8 = 1/4).
- A percentile bootstrap over 3 values is invalid: a resample that repeats one value has
  probability 1/27 > 2.5%, so the 95% interval is exactly [min, max] of the three and "excludes
  0" means only that the three share a sign (probability 1/4 when nothing differs).

With one pre-training seed there is no replication: no interval, no p and no verdict ("n = 1
pre-training seed: not tested"); the report shows the difference and the spread over
fine-tuning seeds as description only.

Multiplicity: one primary endpoint (:class:`PrimaryEndpoint`, declared with
``taco-compare --primary-endpoint`` before the runs) is tested at α = 0.05. Every other verdict
is exploratory and Holm-corrected (:func:`holm`) within its family: per candidate objective,
the GLUE comparisons (each task and the average at each checkpoint but the primary one), and
each per-checkpoint measure over its checkpoints. With several candidate objectives their
primary tests are Holm-corrected among themselves.

The initialization (updates 0) is the same network for every objective of a seed, so it is
shown but never compared.
"""

import math
from copy import copy as shallow_copy
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
from scipy import stats

from ..glue.speedup import curve_speedup

#: The level of every test; intervals are (1 − ALPHA) = 95%.
ALPHA = 0.05

#: The update count of the initialization: identical for every objective of a seed, not compared.
INITIALIZATION = 0

#: ``taco-compare --primary-endpoint`` choices: the GLUE average fine-tuned at the last
#: checkpoint (over ``--tasks``, or ``--final-tasks`` without them: the paper's claim), or a
#: per-checkpoint measure at each objective's last checkpoint (:data:`ENDPOINT_MEASURES`): the
#: average of the frozen-encoder linear probes, or the part-of-speech probe's accuracy on
#: ambiguous words (:mod:`taco_fairseq.analysis.pos_probe`).
PRIMARY_ENDPOINTS = ("glue-average", "probe-average", "pos-ambiguous")

#: The per-checkpoint measure of ``--primary-endpoint probe-average``.
PROBE_AVERAGE = "probe_average"
#: The per-checkpoint measure of ``--primary-endpoint pos-ambiguous``.
POS_AMBIGUOUS = "pos_accuracy_ambiguous"
#: The per-checkpoint measure of each primary endpoint but ``glue-average``.
ENDPOINT_MEASURES = {"probe-average": PROBE_AVERAGE, "pos-ambiguous": POS_AMBIGUOUS}

#: The keys of a per-checkpoint measure row that say which checkpoint it is; every other key
#: with a number is a measure.
MEASURE_IDS = ("objective", "pretrain_seed", "updates")
#: Keys of a row that record how a measure was made, not measures (the part-of-speech probe's
#: window, :func:`.study.pos_window`).
MEASURE_SETTINGS = ("pos_window",)

#: Measures whose better direction is known: +1 higher is better, −1 lower is better (others,
#: e.g. the cosines behind the contextual score or an attention share, only "higher"/"lower").
#: ``probe_<TASK>`` measures are probe scores: higher is better.
#: ``probe_<TASK>`` and ``pos_accuracy…`` measures are probe scores: higher is better;
#: ``mlm_loss_<TEXT>`` are masked-LM losses: lower is better.
BETTER = {"valid_mlm_loss": -1, "contextual_score": +1, "sts_unsupervised": +1,
          PROBE_AVERAGE: +1}

#: The suffixes of a measure that is a reference, not a property of the checkpoint (e.g.
#: ``neighbour_attention_uniform``: what uniform attention gives on the held-out sentences;
#: ``pos_accuracy_baseline``: the most-frequent-tag baseline; the same for every checkpoint):
#: shown, never compared.
REFERENCE_SUFFIXES = ("_uniform", "_baseline")


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


@dataclass(frozen=True)
class PairedTest:
    """``candidate − baseline`` paired by pre-training seed (module doc).

    Attributes:
        n: pre-training seeds with a value for both.
        candidate, baseline: their means over those seeds (the measure's unit, e.g. points).
        difference: the mean of the per-seed differences.
        low, high: its 95% t-interval (n − 1 degrees of freedom); None when n = 1.
        p: the two-sided p-value of the paired t-test against 0; None when n = 1.
        seeds: those n pre-training seeds, ascending.
    """

    n: int
    candidate: float
    baseline: float
    difference: float
    low: Optional[float]
    high: Optional[float]
    p: Optional[float]
    seeds: Tuple[int, ...] = ()

    @property
    def tested(self) -> bool:
        """Whether there is a test (n ≥ 2 pre-training seeds)."""
        return self.p is not None


@dataclass(frozen=True)
class Comparison:
    """One exploratory comparison: ``test`` at ``updates`` of ``label`` (a task, ``average``
    or a measure), with its Holm-adjusted p-value within its family (None: not tested)."""

    updates: int
    label: str
    test: PairedTest
    adjusted_p: Optional[float]


def t_interval(values: Sequence[float], confidence: float = 1 - ALPHA) -> Tuple[float, float,
                                                                                  float]:
    """The ``confidence`` t-interval of the mean of ``values`` (shape ``[n]``, n ≥ 2, in the
    values' unit) and the two-sided p-value of the one-sample t-test of mean 0: ``(low, high,
    p)``, as ``scipy.stats.ttest_1samp(values, 0)`` and its ``confidence_interval`` give them
    (Student 1908: se = sd / √n with n − 1 in the sd's denominator, t = mean / se, Student's t
    with n − 1 degrees of freedom). Values without spread, where t is 0/0 or ±∞ and scipy
    gives NaN, give the zero-width interval at their mean and p = 1 if that is 0, else 0
    (t's limit).

    Raises:
        ValueError: fewer than 2 values, or one that is not finite.
    """
    x = np.asarray(values, float)
    if x.size < 2 or not np.all(np.isfinite(x)):
        raise ValueError(f"a t-interval needs at least 2 finite values, got {x.tolist()}")
    mean = float(x.mean())
    if float(x.std(ddof=1)) == 0:
        return mean, mean, 1.0 if mean == 0 else 0.0
    result = stats.ttest_1samp(x, 0.0)
    interval = result.confidence_interval(confidence)
    return float(interval.low), float(interval.high), float(result.pvalue)


def paired_test(candidate: Mapping[int, float], baseline: Mapping[int, float]
                ) -> Optional[PairedTest]:
    """The paired difference ``candidate − baseline`` over pre-training seeds (module doc).

    Args:
        candidate, baseline: ``{pretrain seed: value}`` (one unit, e.g. points or bits); a
            seed that one side lacks or has a value of that is not finite is left out (the
            test's ``n`` and ``seeds`` say which seeds remain).

    Returns:
        The means, the mean of the per-seed differences and, with 2 or more shared seeds,
        :func:`t_interval` of those differences (the paired t-test, Student 1908); None when
        they share no seed.
    """
    seeds = sorted(s for s in candidate if s in baseline
                   and is_finite_number(candidate[s]) and is_finite_number(baseline[s]))
    if not seeds:
        return None
    c = np.array([candidate[s] for s in seeds], float)
    b = np.array([baseline[s] for s in seeds], float)
    low = high = p = None
    if len(seeds) > 1:
        low, high, p = t_interval(c - b)
    return PairedTest(len(seeds), float(c.mean()), float(b.mean()), float((c - b).mean()),
                      low, high, p, tuple(seeds))


def holm(p_values: Sequence[float]) -> List[float]:
    """Holm's step-down adjusted p-values (Holm 1979, "A simple sequentially rejective
    multiple test procedure", Scand. J. Statist. 6:65-70).

    Args:
        p_values: ``[m]`` p-values of one family (m ≥ 0), each in [0, 1].

    Returns:
        ``[m]`` adjusted p-values, in the order given: with p₍₁₎ ≤ … ≤ p₍ₘ₎, adjusted
        p₍ᵢ₎ = max over j ≤ i of min(1, (m − j + 1) · p₍ⱼ₎) (ties keep their order). Rejecting
        where the adjusted p ≤ α keeps the family-wise error rate ≤ α under any dependence.
        No errors: a NaN p-value sorts last and stays NaN.
    """
    p = np.asarray(p_values, float)
    order = np.argsort(p, kind="stable")
    steps = (p.size - np.arange(p.size)) * p[order]
    adjusted = np.empty(p.size)
    adjusted[order] = np.minimum(1.0, np.maximum.accumulate(steps))
    return adjusted.tolist()


def with_holm(items: Sequence[Tuple[int, str, PairedTest]]) -> List[Comparison]:
    """``(updates, label, test)`` of one family as :class:`Comparison` s with Holm-adjusted
    p-values over the tested ones."""
    tested = [i for i, (_, _, t) in enumerate(items) if t.tested]
    adjusted = dict(zip(tested, holm([items[i][2].p for i in tested])))
    return [Comparison(u, label, t, adjusted.get(i)) for i, (u, label, t) in enumerate(items)]


def is_reference(key: str) -> bool:
    """Whether the measure ``key`` is a reference (:data:`REFERENCE_SUFFIXES`), shown but not
    compared."""
    return key.endswith(REFERENCE_SUFFIXES)


def better(key: str) -> int:
    """+1 when a higher ``key`` is better, −1 when lower is, 0 when neither (:data:`BETTER`)."""
    if key in BETTER:
        return BETTER[key]
    if key.startswith(("probe_", "pos_accuracy")):
        return +1
    return -1 if key.startswith("mlm_loss_") else 0


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

    def mapped(self, function) -> "ScoreTable":
        """A copy with ``function(score)`` (float → float) for every score, e.g. rounded as a
        CSV stores it."""
        copy = shallow_copy(self)
        copy._cells = {key: np.vectorize(function, otypes=[float])(cell)
                       for key, cell in self._cells.items()}
        return copy

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

    def has(self, objective: str, updates: int, tasks: Sequence[str]) -> bool:
        """Whether every run of ``objective`` at ``updates`` on ``tasks`` (≥ 1) is there."""
        return bool(tasks) and all(self.cell(objective, updates, t) is not None for t in tasks)

    def runs(self, objective: str, updates: int, tasks: Sequence[str]) -> np.ndarray:
        """``[pretrain seeds, fine-tuning seeds]``: the average over ``tasks`` of each run."""
        return np.mean([self.cell(objective, updates, t) for t in tasks], axis=0)

    def average(self, objective: str, updates: int, tasks: Sequence[str]) -> float:
        """GLUE average (points): the mean over ``tasks`` of each task's mean over runs."""
        return float(self.runs(objective, updates, tasks).mean())

    def seed_means(self, objective: str, updates: int, tasks: Sequence[str]) -> Dict[int, float]:
        """``{pretrain seed: GLUE average over tasks of its mean over fine-tuning seeds}``: the
        values that are compared (module doc)."""
        return dict(zip(self.pretrain_seeds,
                        self.runs(objective, updates, tasks).mean(axis=1).tolist()))

    def finetune_sd(self, objective: str, updates: int, tasks: Sequence[str]) -> Optional[float]:
        """The spread over fine-tuning seeds (points): the standard deviation of the GLUE
        average over ``tasks`` across fine-tuning seeds, pooled over pre-training seeds; None
        with one fine-tuning seed. A description of fine-tuning noise, not a test."""
        runs = self.runs(objective, updates, tasks)
        if runs.shape[1] < 2:
            return None
        return float(np.sqrt(runs.var(axis=1, ddof=1).mean()))


class MeasureTable:
    """Per-checkpoint measures (rows of ``OUT/measures``: :data:`MEASURE_IDS` and numbers), as
    ``{pretrain seed: value}`` per measure, objective and update count; not-finite values are
    left out. ``keys``: the measures, in the order they first appear (not
    :data:`MEASURE_SETTINGS`)."""

    def __init__(self, rows: Sequence[Mapping]):
        self.keys = list(dict.fromkeys(
            k for r in rows for k, v in r.items()
            if k not in (*MEASURE_IDS, *MEASURE_SETTINGS) and is_finite_number(v)))
        self.objectives = list(dict.fromkeys(r["objective"] for r in rows))
        self.updates = sorted({r["updates"] for r in rows})
        self._values: Dict[Tuple[str, str, int], Dict[int, float]] = {}
        for r in rows:
            for k in self.keys:
                if is_finite_number(r.get(k)):
                    self._values.setdefault((k, r["objective"], r["updates"]), {})[
                        r["pretrain_seed"]] = float(r[k])

    def mapped(self, function) -> "MeasureTable":
        """A copy with ``function(value)`` (float → float) for every value, e.g. rounded as a
        CSV stores it."""
        copy = shallow_copy(self)
        copy._values = {key: {seed: function(v) for seed, v in values.items()}
                        for key, values in self._values.items()}
        return copy

    def values(self, key: str, objective: str, updates: int) -> Dict[int, float]:
        """``{pretrain seed: value}`` (empty when not measured)."""
        return self._values.get((key, objective, updates), {})


@dataclass(frozen=True)
class PrimaryEndpoint:
    """The one comparison tested without correction, declared before the runs.

    Attributes:
        name: one of :data:`PRIMARY_ENDPOINTS`.
        updates: the checkpoint it is taken at (the last).
        tasks: the tasks of ``glue-average`` (``--tasks``, or ``--final-tasks`` without them).
        seeds: the pre-training seeds declared (``--pretrain-seeds``); a test over fewer gets
            no verdict (:meth:`missing`). Empty: not declared, none is missing.
        updates_of: (objective, checkpoint) of the objectives whose last checkpoint is earlier
            (``--objective-max-update``): a measure's endpoint compares each objective at its
            own (:meth:`at`), e.g. TACO's 7,000 updates with MLM's 20,000.

    Raises (constructor):
        ValueError: ``glue-average`` without tasks (no fine-tuned task to average), or an
            unknown name.
    """

    name: str
    updates: int
    tasks: Tuple[str, ...] = ()
    seeds: Tuple[int, ...] = ()
    updates_of: Tuple[Tuple[str, int], ...] = ()

    def __post_init__(self):
        if self.name not in PRIMARY_ENDPOINTS:
            raise ValueError(f"primary endpoint {self.name!r}: choose one of "
                             f"{', '.join(PRIMARY_ENDPOINTS)}")
        if self.name == "glue-average" and not self.tasks:
            raise ValueError("--primary-endpoint glue-average: no fine-tuned task to average; "
                             "give --final-tasks (or --tasks), or declare --primary-endpoint "
                             "probe-average")
        if self.name == "glue-average" and self.updates_of:
            raise ValueError("--primary-endpoint glue-average with --objective-max-update: "
                             "the fine-tuned average is compared at equal updates; declare a "
                             "measure's endpoint (probe-average, pos-ambiguous)")

    @property
    def measure(self) -> Optional[str]:
        """The per-checkpoint measure it tests (None: ``glue-average``)."""
        return ENDPOINT_MEASURES.get(self.name)

    def at(self, objective: str) -> int:
        """The checkpoint ``objective`` is compared at: its own last one."""
        return dict(self.updates_of).get(objective, self.updates)

    def label(self, candidate: str, baseline: str) -> str:
        """``taco − mlm``, or ``taco@7000 − mlm@20000`` when they are compared at different
        checkpoints."""
        if self.at(candidate) == self.at(baseline):
            return f"{candidate} − {baseline}"
        return f"{candidate}@{self.at(candidate)} − {baseline}@{self.at(baseline)}"

    def excludes(self, key: str, updates: int) -> bool:
        """Whether the exploratory family of measure ``key`` leaves out its comparison at
        ``updates`` (equal updates): it is this endpoint's, tested alone."""
        return key == self.measure and updates == self.updates and not self.updates_of

    def missing(self, test: PairedTest) -> List[int]:
        """The declared pre-training seeds that ``test`` lacks (a run not finished, or a value
        that is not finite on one side), ascending."""
        return sorted(set(self.seeds) - set(test.seeds))

    def describe(self) -> str:
        """What it is, in words."""
        if self.name == "glue-average":
            return (f"the GLUE dev average over {', '.join(self.tasks)} (fine-tuned) at "
                    f"{self.updates} updates, points")
        what = ("the average of the frozen-encoder linear probes" if self.name == "probe-average"
                else "the part-of-speech probe's accuracy on ambiguous words, points")
        at = (f"{self.updates} updates" if not self.updates_of else
              "each objective's last checkpoint (" + ", ".join(
                  f"{o} {u}" for o, u in self.updates_of) + f", the others {self.updates})")
        return f"{what} (`{self.measure}`) at {at}"

    def test(self, scores: Optional[ScoreTable], measures: MeasureTable, candidate: str,
             baseline: str) -> Optional[PairedTest]:
        """Its :func:`paired_test`; None while its runs or measures are not all there
        (``scores`` None: no fine-tuning has finished)."""
        if self.name == "glue-average":
            if scores is None or not all(scores.has(o, self.updates, self.tasks)
                                         for o in (candidate, baseline)):
                return None
            return paired_test(scores.seed_means(candidate, self.updates, self.tasks),
                               scores.seed_means(baseline, self.updates, self.tasks))
        return paired_test(measures.values(self.measure, candidate, self.at(candidate)),
                           measures.values(self.measure, baseline, self.at(baseline)))


def paired_difference(table: ScoreTable, candidate: str, baseline: str, updates: int,
                      tasks: Sequence[str]) -> PairedTest:
    """``candidate − baseline`` GLUE average over ``tasks`` at ``updates`` (points), paired by
    pre-training seed (module doc)."""
    return paired_test(table.seed_means(candidate, updates, tasks),
                       table.seed_means(baseline, updates, tasks))


def improvement(table: ScoreTable, objective: str, first: int, last: int,
                tasks: Sequence[str]) -> PairedTest:
    """How much ``objective``'s GLUE average over ``tasks`` rises from ``first`` to ``last``
    updates (points), paired by pre-training seed (``candidate``: last, ``baseline``: first):
    whether the runs are long enough for GLUE to move at all."""
    return paired_test(table.seed_means(objective, last, tasks),
                       table.seed_means(objective, first, tasks))


def glue_comparisons(table: ScoreTable, candidate: str, baseline: str,
                     primary: Optional[PrimaryEndpoint] = None) -> List[Comparison]:
    """The exploratory GLUE family of ``candidate − baseline``: at every checkpoint but the
    initialization, the average over :meth:`ScoreTable.curve_tasks` and each task that both
    have, Holm-corrected together; the GLUE average at the primary endpoint's checkpoint is
    left out when it is the primary endpoint."""
    average = table.curve_tasks()
    items = []
    for u in table.updates:
        if u == INITIALIZATION:
            continue
        labelled = [] if primary is not None and primary.name == "glue-average" and (
            u == primary.updates) else [("average", average)]
        for label, over in [*labelled, *((t, [t]) for t in table.complete_tasks(u))]:
            if over and all(table.has(o, u, over) for o in (candidate, baseline)):
                items.append((u, label, paired_difference(table, candidate, baseline, u, over)))
    return with_holm(items)


def measure_comparisons(table: MeasureTable, key: str, candidate: str, baseline: str,
                        primary: Optional[PrimaryEndpoint] = None) -> List[Comparison]:
    """The exploratory family of one measure: ``candidate − baseline`` at every checkpoint but
    the initialization (and the primary endpoint's), Holm-corrected together; none for a
    reference (:func:`is_reference`: the same for every checkpoint)."""
    if is_reference(key):
        return []
    items = []
    for u in table.updates:
        if u == INITIALIZATION or (primary is not None and primary.excludes(key, u)):
            continue
        test = paired_test(table.values(key, candidate, u), table.values(key, baseline, u))
        if test is not None:
            items.append((u, key, test))
    return with_holm(items)


def compared_updates(updates: Sequence[int]) -> List[int]:
    """``updates`` but the initialization (:data:`INITIALIZATION`): the checkpoints that are
    compared, in their order."""
    return [u for u in updates if u != INITIALIZATION]


def speedup(table: ScoreTable, candidate: str, baseline: str,
            tasks: Sequence[str]) -> Dict[str, object]:
    """The speed-up of ``candidate`` over ``baseline`` on their GLUE averages over ``tasks``
    (points) at the compared checkpoints (:func:`compared_updates`), as
    :mod:`taco_fairseq.glue.speedup` defines it for ``taco-glue-sweep`` too (the reach
    interpolated): :func:`~taco_fairseq.glue.speedup.curve_speedup`'s keys for the curves of
    the means over all runs (:meth:`ScoreTable.average`), and ``per_seed``: the speed-up of
    each pre-training seed on its own curves (averaged over its fine-tuning seeds; None: not
    reached), in :attr:`ScoreTable.pretrain_seeds` order.

    No interval: a speed-up is a ratio with "not reached" among its values, so a t-interval does
    not fit it, and resampling 3-5 seeds is invalid (module doc). The report gives the range
    of the per-seed values as a description; as a distribution-free interval for the median
    per-seed speed-up, [min, max] of n seeds covers it with probability 1 − 2^(1−n) (75% at
    n = 3, 94% at n = 5: order statistics, e.g. Conover, *Practical Nonparametric Statistics*,
    §3.2), short of 95%, so it is no verdict."""
    updates = compared_updates(table.updates)
    point = curve_speedup(updates, [table.average(baseline, u, tasks) for u in updates],
                          updates, [table.average(candidate, u, tasks) for u in updates])
    curves = {o: [table.seed_means(o, u, tasks) for u in updates] for o in (candidate, baseline)}
    per_seed = [curve_speedup(updates, [c[p] for c in curves[baseline]],
                              updates, [c[p] for c in curves[candidate]])["speedup"]
                for p in table.pretrain_seeds]
    return dict(point, per_seed=per_seed)


def is_finite_number(value) -> bool:
    """Whether ``value`` is a finite real number: an int or float (numpy's float64 is one), not
    a bool, NaN or ±inf, and not a string or None. What counts as a measured value in the
    measure rows (:class:`MeasureTable`, ``checkpoints.csv``, the report's tables) and in a
    paired test."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
