"""The declared decision of the promise study (issue 42 §2; PLAN.md beside this file is the plan,
this script its executable half), computed from the study's ``checkpoints.csv``:

    .venv/bin/python docs/results/promise-study/analysis.py              # checkpoints.csv here
    .venv/bin/python docs/results/promise-study/analysis.py --csv PATH   # another file
    .venv/bin/python docs/results/promise-study/analysis.py power --sd-pos 1.01 --sd-loss 0.106
    .venv/bin/python docs/results/promise-study/analysis.py curves       # curves.png here

It prints a markdown report (to paste into docs/results.md): PLAN.md §1 Gate A (the baseline
learns), §2 Gate B (the measure sees MLM's training), §3 Q1 (TACO from scratch) and Q2 (TACO
branched from MLM after the plateau) with their verdicts, §5 the speed-up and the curves at
equal updates (described, no test); ``power`` gives §4's number of pre-training seeds;
``curves`` draws §5's curves, every seed's and their mean (``curves.png``). Every rule below
names its section of PLAN.md.

Input: one row per (objective, pretrain_seed, updates), ``objective`` one of ``mlm``, ``taco``,
``taco-branch``; the columns read are :data:`POS` (points, last layer), :data:`LOSS` and
:data:`VALID` (bits per masked token), :data:`SHARE` and :data:`UNIFORM` (the first layer's
neighbour share at validation and its uniform value); an empty cell is a missing measure. The
seeds that finished all three runs (every value of :data:`NEEDED`) are analysed; a seed still
being measured is left out and listed with what it lacks (:class:`Study`).

Exit status: 0 whatever the verdict (a gate that fails is a result); 1 when the CSV cannot be
read or no seed has finished, or ``power`` gets impossible values (the message on
stderr); 2 for wrong arguments (argparse).

Reused, not rewritten: the paired t-test, the t-interval and Holm's adjusted p-values of
:mod:`taco_fairseq.comparison.statistics`, the CSV reader of
:mod:`taco_fairseq.comparison.tables` and the interpolated reach of
:func:`taco_fairseq.glue.speedup.first_reach`.
"""

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
from scipy import stats

from taco_fairseq.comparison.statistics import (INITIALIZATION, MeasureTable, PairedTest,
                                                better, holm, paired_test, t_interval)
from taco_fairseq.comparison.tables import read_checkpoints_csv
from taco_fairseq.glue.speedup import first_reach


# ------------------------------------------------------------------------------------------
# Fixed by PLAN.md: every number of the decision, here and nowhere else (B from the pilot,
# past its every exit).
# ------------------------------------------------------------------------------------------
#: MLM's last update: the baseline MLM(N) of Q1, Q2 and the speed-up (PLAN.md §3, §5).
N = 10500
#: TACO from scratch stops here, on MLM's schedule (about N / 3; PLAN.md §3 Q1).
TACO_END = 3500
#: The branch point: the MLM checkpoint the branch continues from (PLAN.md §1, §3 Q2).
B = 4500
#: The branch's last update, B + (N − B) / 3 (PLAN.md §3 Q2).
BRANCH_END = B + (N - B) // 3
#: Gate B's early MLM checkpoint (PLAN.md §2).
GATE_B_EARLY = 1000
#: Gate A: a run has left the plateau when its first layer's neighbour share is at least this
#: many times its uniform value (PLAN.md §1; the value of taco_fairseq.neighbour_attention's
#: EXIT_RATIO, which fairseq-train's exit line uses: tests/test_promise_study_analysis.py checks
#: that they agree).
EXIT_RATIO = 1.5
#: Gate A: ... and its validation masked-LM loss is below this (bits per masked token; the
#: plateau is about 9 bits on this data-bin; PLAN.md §1).
PLATEAU_EXIT_LOSS = 8.5
#: Non-inferiority margins of Q1 and Q2 (PLAN.md §3): points of POS, bits of LOSS.
POS_MARGIN = 1.0
LOSS_MARGIN = 0.15
#: Gate B's two-sided level; the speed-up's intervals are (1 − ALPHA) = 95% (PLAN.md §2, §5).
ALPHA = 0.05
#: The one-sided family-wise level of Q1 and Q2 together, Holm (PLAN.md §3).
Q_ALPHA = ALPHA / 2
#: The power n is chosen for (PLAN.md §4).
POWER = 0.8
# ------------------------------------------------------------------------------------------

#: The measures (columns of checkpoints.csv).
POS = "pos_accuracy_ambiguous"     # the POS probe on ambiguous words, last layer, points
LOSS = "mlm_loss_wikitext2"        # masked-LM loss on WikiText-2 test, bits (MLM's objective)
VALID = "valid_mlm_loss"           # fairseq's validation masked-LM loss, bits
SHARE = "neighbour_share"          # first layer's attention on the neighbours, at validation
UNIFORM = "neighbour_share_uniform"  # the same under uniform attention
#: The objectives (arms).
MLM, TACO, BRANCH = "mlm", "taco", "taco-branch"
#: Q1 and Q2: the candidate arm and its update count, each against MLM(N) (PLAN.md §3).
QUESTIONS = {"Q1": (TACO, TACO_END), "Q2": (BRANCH, BRANCH_END)}
#: Q's measures and their margins, both required (PLAN.md §3).
MARGINS = {POS: POS_MARGIN, LOSS: LOSS_MARGIN}
#: The measures of the described speed-up and curves (PLAN.md §5).
SPEEDUP_MEASURES = (POS, LOSS, VALID)
#: What every analysed seed must have: (objective, updates) → measures. MLM(B) is Gate A's
#: and the branch's starting point (§1, §5), MLM(GATE_B_EARLY) Gate B's (§2), MLM(N) and the
#: candidates' ends the questions' (§3, §5).
NEEDED = {(MLM, B): (SHARE, UNIFORM, VALID, POS, LOSS), (MLM, GATE_B_EARLY): (POS,),
          (MLM, N): (POS, LOSS, VALID), (TACO, TACO_END): (POS, LOSS),
          (BRANCH, BRANCH_END): (POS, LOSS)}
#: Units and decimals of the report.
FORMATS = {POS: ("points", 2), LOSS: ("bits", 3), VALID: ("bits", 3)}

#: The declared pre-training seeds (PLAN.md, set-up and §4): fewer analysed makes the report
#: interim (PLAN.md, "How it is run": no verdict is called final).
DECLARED_SEEDS = tuple(range(6, 19))

CSV = Path(__file__).with_name("checkpoints.csv")


class Study:
    """The rows of ``checkpoints.csv`` (:func:`read_checkpoints_csv`) of the seeds that
    finished all three runs, checked: values per measure, arm, update count and seed
    (:class:`MeasureTable`).

    PLAN.md, "How it is run": the decision is made on the seeds that finished all three runs.
    A seed has finished when it has every row and value of :data:`NEEDED` (its arms' last
    checkpoints among them); a seed with rows that has not (a seed still being measured, or
    a run that failed) is left out of every analysis and listed in :attr:`unfinished` with
    what it lacks, which the report prints.

    Attributes:
        seeds: the analysed pre-training seeds, ascending.
        unfinished: seed → what it lacks (``"<objective> at <updates> updates: no row"`` or
            ``": no <measure>"``), for each seed with rows that has not finished.

    Raises (constructor):
        ValueError: one message listing every problem: an objective other than mlm, taco,
            taco-branch; a checkpoint with two rows; no seed that finished (with what each
            seed lacks). With one seed the report describes it and tests nothing
            (:func:`report`).
    """

    def __init__(self, rows: Sequence[Mapping]):
        """``rows``: :func:`read_checkpoints_csv` 's (or dicts alike); raises as the class
        says."""
        problems = [f"objective {o!r} (not {MLM}, {TACO} or {BRANCH})"
                    for o in sorted({r["objective"] for r in rows} - {MLM, TACO, BRANCH})]
        ids = [(r["objective"], r["pretrain_seed"], r["updates"]) for r in rows]
        problems += [f"{o} seed {s} at {u:,} updates: {ids.count((o, s, u))} rows"
                     for o, s, u in sorted(set(i for i in ids if ids.count(i) > 1))]
        every = MeasureTable(rows)
        self.unfinished: Dict[int, List[str]] = {}
        for seed in sorted({r["pretrain_seed"] for r in rows}):
            for (objective, updates), keys in NEEDED.items():
                where = f"{objective} at {updates:,} updates"
                if (objective, seed, updates) not in ids:
                    self.unfinished.setdefault(seed, []).append(f"{where}: no row")
                    continue
                lacking = [k for k in keys
                           if every.values(k, objective, updates).get(seed) is None]
                if lacking:
                    self.unfinished.setdefault(seed, []).append(
                        f"{where}: no {', '.join(lacking)}")
        self.seeds = sorted({r["pretrain_seed"] for r in rows} - set(self.unfinished))
        if not self.seeds:
            problems.append("no seed finished all three runs"
                            + "".join(f"; seed {s} lacks {', '.join(gaps)}"
                                      for s, gaps in self.unfinished.items()))
        if problems:
            raise ValueError("checkpoints.csv cannot be analysed as PLAN.md declares (the "
                             "seeds that finished all three runs, each checkpoint once): "
                             + "; ".join(problems))
        self.table = MeasureTable([r for r in rows if r["pretrain_seed"] in self.seeds])

    def value(self, key: str, objective: str, updates: int, seed: int) -> Optional[float]:
        """One measured value (None: no row or an empty cell)."""
        return self.table.values(key, objective, updates).get(seed)

    def values(self, key: str, objective: str, updates: int) -> Dict[int, float]:
        """``{seed: value}`` of one checkpoint of every seed that has it."""
        return self.table.values(key, objective, updates)

    def differences(self, key: str, objective: str, updates: int) -> np.ndarray:
        """``[seeds]``: per seed, ``objective(updates) − MLM(N)`` on ``key`` (every seed has
        both: the constructor checked)."""
        return np.array([self.value(key, objective, updates, s) - self.value(key, MLM, N, s)
                         for s in self.seeds])

    def curve(self, key: str, objective: str, seed: int, last: int
              ) -> Tuple[List[int], List[float]]:
        """One run's measured checkpoints up to ``last``: (updates ascending, values)."""
        points = [(u, self.value(key, objective, u, seed)) for u in self.table.updates
                  if u <= last]
        points = [(u, v) for u, v in points if v is not None]
        return [u for u, _ in points], [v for _, v in points]


# ---------------------------------------------------------------------------- the gates --

@dataclass(frozen=True)
class Exit:
    """Gate A for one seed: MLM(B)'s neighbour share and its uniform value, their ratio, the
    validation loss (bits), and whether the seed has left the plateau (PLAN.md §1)."""

    seed: int
    share: float
    uniform: float
    ratio: float
    loss: float
    passed: bool


def gate_a(study: Study) -> Tuple[List[Exit], bool]:
    """PLAN.md §1, the baseline learns: every seed's MLM(B) has neighbour share / uniform ≥
    :data:`EXIT_RATIO` and validation loss < :data:`PLATEAU_EXIT_LOSS` bits. Returns the
    per-seed :class:`Exit` s and whether every seed passed (the gate)."""
    exits = []
    for seed in study.seeds:
        share, uniform, loss = (study.value(k, MLM, B, seed) for k in (SHARE, UNIFORM, VALID))
        ratio = share / uniform
        exits.append(Exit(seed, share, uniform, ratio, loss,
                          ratio >= EXIT_RATIO and loss < PLATEAU_EXIT_LOSS))
    return exits, all(e.passed for e in exits)


def gate_b(study: Study) -> Tuple[PairedTest, bool]:
    """PLAN.md §2, the measure sees MLM's training: POS MLM(N) − MLM(GATE_B_EARLY) paired over
    the seeds, two-sided t-test; passes if the mean difference is > 0 with p < :data:`ALPHA`.
    Returns the test (points, 95% interval) and whether it passed."""
    test = paired_test(study.values(POS, MLM, N), study.values(POS, MLM, GATE_B_EARLY))
    return test, test.difference > 0 and test.p < ALPHA


# ------------------------------------------------------------------------ Q1 and Q2 (§3) --

def p_above(values: Sequence[float], bound: float) -> float:
    """The one-sided p-value of H0: mean ≤ ``bound`` against mean > ``bound`` (one-sample t,
    n − 1 degrees of freedom; ``scipy.stats.ttest_1samp(..., alternative="greater")``).
    Values without spread (t is ±∞ or 0/0) give t's limit: 0 if their mean is above the
    bound, else 1.

    Raises:
        ValueError: fewer than 2 values.
    """
    x = np.asarray(values, float)
    if x.size < 2:
        raise ValueError(f"a t-test needs at least 2 values, got {x.tolist()}")
    if float(x.std(ddof=1)) == 0:
        return 0.0 if float(x.mean()) > bound else 1.0
    return float(stats.ttest_1samp(x, bound, alternative="greater").pvalue)


def holm_levels(p_values: Sequence[float], alpha: float = Q_ALPHA
                ) -> Tuple[List[float], List[bool]]:
    """Holm's step-down test of a family (PLAN.md §3: Q1 and Q2 at one-sided ``alpha``).

    Returns, in the order given: each hypothesis's level, ``alpha / (m − rank)`` with rank 0
    for the smallest p (ties in the order given: for two, 0.0125 and 0.025), and whether it is
    rejected: its Holm-adjusted p (:func:`holm`) < ``alpha``, i.e. its p and every smaller
    one below their levels (a larger p is not rejected once a smaller one is not).
    """
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    levels = [0.0] * len(p_values)
    for rank, i in enumerate(order):
        levels[i] = alpha / (len(p_values) - rank)
    return levels, [a < alpha for a in holm(p_values)]


@dataclass(frozen=True)
class MeasureTest:
    """One measure of a question (PLAN.md §3): D = candidate − MLM(N) per seed.

    Attributes:
        measure: :data:`POS` (points) or :data:`LOSS` (bits).
        n: seeds; difference: mean D; low, high: D's two-sided ``confidence`` t-interval,
            confidence = 1 − 2 × the question's Holm level.
        p_noninferior: one-sided p of H0 "worse by the margin or more" (POS: D ≤ −margin;
            LOSS: D ≥ +margin).
        p_worse: one-sided p of H0 "not worse by more than the margin" (POS: D ≥ −margin;
            LOSS: D ≤ +margin): rejected, TACO is worse than the margin.
    """

    measure: str
    n: int
    difference: float
    low: float
    high: float
    confidence: float
    p_noninferior: float
    p_worse: float


@dataclass(frozen=True)
class Question:
    """Q1 or Q2 (PLAN.md §3): ``objective(updates) − MLM(N)`` on both measures.

    Attributes:
        p: the intersection–union p-value, the larger of the measures' ``p_noninferior``.
        holm_p: its Holm-adjusted p over Q1 and Q2; level: its Holm level.
        verdict: "supported" (Holm rejects: non-inferior on both measures), "refuted" (on a
            measure ``p_worse`` < level), or "inconclusive". The refutation uses the
            question's Holm level by its rank (0.0125 or 0.025) whether or not the step-down
            reached it.
    """

    name: str
    objective: str
    updates: int
    tests: Tuple[MeasureTest, ...]
    p: float
    holm_p: float
    level: float
    verdict: str


def questions(study: Study) -> List[Question]:
    """PLAN.md §3: Q1 and Q2, each non-inferior on :data:`POS` and :data:`LOSS` (both
    required: intersection–union), Holm over the two at one-sided :data:`Q_ALPHA`; the
    verdict rule of :class:`Question`. Called only when both gates pass."""
    p_values: Dict[str, Tuple[float, float]] = {}
    for name, (objective, updates) in QUESTIONS.items():
        for key, margin in MARGINS.items():
            gain = better(key) * study.differences(key, objective, updates)  # + is TACO better
            p_values[name, key] = (p_above(gain, -margin), p_above(-gain, margin))
    p_question = [max(p_values[name, key][0] for key in MARGINS) for name in QUESTIONS]
    levels, rejected = holm_levels(p_question)
    adjusted = holm(p_question)
    result = []
    for i, (name, (objective, updates)) in enumerate(QUESTIONS.items()):
        tests = []
        for key in MARGINS:
            d = study.differences(key, objective, updates)
            low, high, _ = t_interval(d, 1 - 2 * levels[i])
            tests.append(MeasureTest(key, d.size, float(d.mean()), low, high,
                                     1 - 2 * levels[i], *p_values[name, key]))
        verdict = ("supported" if rejected[i] else
                   "refuted" if any(t.p_worse < levels[i] for t in tests) else "inconclusive")
        result.append(Question(name, objective, updates, tuple(tests), p_question[i],
                               adjusted[i], levels[i], verdict))
    return result


# ------------------------------------------------------------ the speed-up, described (§5) --

@dataclass(frozen=True)
class Reach:
    """One seed and measure (PLAN.md §5): the target MLM(N), and the updates at which TACO and
    the branch first reach it (interpolated; None: not by TACO_END / BRANCH_END), the branch's
    counted from 0 (total updates)."""

    seed: int
    target: float
    taco: Optional[float]
    branch: Optional[float]

    @property
    def taco_ratio(self) -> Optional[float]:
        """N / TACO's updates (None: not reached; ∞: reached at its start)."""
        return _ratio(N, self.taco, 0)

    @property
    def branch_ratio(self) -> Optional[float]:
        """N / the branch's total updates."""
        return _ratio(N, self.branch, 0)

    @property
    def branch_ratio_after(self) -> Optional[float]:
        """(N − B) / the branch's updates after B (∞: MLM(B) was already at the target)."""
        return _ratio(N - B, self.branch, B)


def _ratio(updates: float, reach: Optional[float], start: float) -> Optional[float]:
    """``updates / (reach − start)``; None when not reached, ∞ when reached at the start."""
    if reach is None:
        return None
    return math.inf if reach <= start else updates / (reach - start)


def reaches(study: Study, key: str) -> List[Reach]:
    """PLAN.md §5: per seed, when TACO (its checkpoints up to TACO_END) and the branch (MLM(B),
    its starting point, then its checkpoints up to BRANCH_END) first reach the seed's MLM(N)
    value on ``key``, by linear interpolation between checkpoints (:func:`first_reach`; a
    measure where lower is better, a loss, is negated first)."""
    sign = better(key)
    result = []
    for seed in study.seeds:
        target = study.value(key, MLM, N, seed)
        reach = {}
        for arm, first, last in ((TACO, 0, TACO_END), (BRANCH, B, BRANCH_END)):
            updates, values = study.curve(key, arm, seed, last)
            if arm == BRANCH and B not in updates:
                updates, values = [B, *updates], [study.value(key, MLM, B, seed), *values]
            kept = [(u, v) for u, v in zip(updates, values) if u >= first]
            reach[arm] = first_reach([u for u, _ in kept], [sign * v for _, v in kept],
                                     sign * target)
        result.append(Reach(seed, target, reach[TACO], reach[BRANCH]))
    return result


@dataclass(frozen=True)
class RatioSummary:
    """Speed-up ratios over seeds (PLAN.md §5): the geometric mean of the finite ones and its
    95% t-interval on their logs (None below 2 finite ratios; ``low == high`` without spread);
    ``censored``: seeds that did not reach; ``at_start``: seeds already at the target where
    the arm started (an infinite ratio, left out)."""

    reached: int
    censored: int
    at_start: int
    mean: Optional[float]
    low: Optional[float]
    high: Optional[float]


def summarize(ratios: Sequence[Optional[float]]) -> RatioSummary:
    """:class:`RatioSummary` of per-seed ratios (None: not reached; ∞: at the start)."""
    finite = [r for r in ratios if r is not None and math.isfinite(r)]
    logs = np.log(finite)
    mean = float(np.exp(logs.mean())) if finite else None
    low = high = None
    if len(finite) >= 2:
        low, high, _ = t_interval(logs, 1 - ALPHA)
        low, high = math.exp(low), math.exp(high)
    return RatioSummary(len(finite), sum(r is None for r in ratios),
                        sum(r is not None and math.isinf(r) for r in ratios), mean, low, high)


def equal_updates(study: Study, key: str) -> List[Tuple[int, Optional[Tuple[int, float]],
                                                       Optional[Tuple[int, float]]]]:
    """PLAN.md §5, the curves at equal updates: per update count (but the initialization)
    where MLM and an arm both have values, (n, mean over the n seeds with both of arm − MLM)
    for TACO and for the branch (None: that arm has none there). A description: no test."""
    rows = []
    for u in study.table.updates:
        mlm = study.values(key, MLM, u)
        if u == INITIALIZATION or not mlm:
            continue
        arms = []
        for arm in (TACO, BRANCH):
            values = study.values(key, arm, u)
            seeds = sorted(set(values) & set(mlm))
            arms.append((len(seeds), float(np.mean([values[s] - mlm[s] for s in seeds])))
                        if seeds else None)
        if any(arms):
            rows.append((u, *arms))
    return rows


# ----------------------------------------------------------------- the curves' figure --

#: The figure's panels: (measure, or (share, uniform) for their ratio, y-axis label).
CURVE_PANELS = ((POS, "POS probe, ambiguous words (points)"),
                (LOSS, "masked-LM loss, WikiText-2 test (bits)"),
                (VALID, "masked-LM loss, validation (bits)"),
                ((SHARE, UNIFORM), "layer-1 neighbour share / uniform"))
#: Each arm's colour and the update count it stops at.
CURVE_ARMS = ((MLM, "C0", N), (TACO, "C1", TACO_END), (BRANCH, "C2", BRANCH_END))
FIGURE = Path(__file__).with_name("curves.png")


def curve_points(study: Study, key, arm: str, seed: int) -> Tuple[List[int], List[float]]:
    """One run's curve as the figure draws it: (updates ascending, values) of ``key`` (a
    measure, or (share, uniform): their ratio) up to the arm's stop, a branch's starting
    from MLM(B), the checkpoint it continues (PLAN.md §5: described, no test)."""
    stop = dict((a, end) for a, _, end in CURVE_ARMS)[arm]
    if isinstance(key, tuple):
        shares, uniform = (dict(zip(*study.curve(k, arm, seed, stop))) for k in key)
        updates = sorted(set(shares) & set(uniform))
        values = [shares[u] / uniform[u] for u in updates]
    else:
        updates, values = study.curve(key, arm, seed, stop)
    if arm == BRANCH:
        start_updates, start_values = curve_points(study, key, MLM, seed)
        start = dict(zip(start_updates, start_values)).get(B)
        if start is not None:
            updates, values = [B, *updates], [start, *values]
    return updates, values


def plot_curves(study: Study, path: Path) -> Path:
    """``path`` (a PNG): a panel per :data:`CURVE_PANELS` measure against updates, each
    arm's run per seed as a thin line and, where every analysed seed has a value, their mean
    as a thick one; a dotted line at B, where the branch leaves MLM, and a dashed one at Gate
    A's ratio :data:`EXIT_RATIO`. Returns ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(CURVE_PANELS), figsize=(4.4 * len(CURVE_PANELS), 3.8))
    for ax, (key, label) in zip(axes, CURVE_PANELS):
        for arm, colour, _ in CURVE_ARMS:
            runs = [dict(zip(*curve_points(study, key, arm, s))) for s in study.seeds]
            for run in runs:
                ax.plot(sorted(run), [run[u] for u in sorted(run)], color=colour, lw=0.8,
                        alpha=0.35)
            shared = sorted(set.intersection(*(set(r) for r in runs)))
            ax.plot(shared, [np.mean([r[u] for r in runs]) for u in shared], color=colour,
                    lw=2.2, marker="o", ms=3, label=arm)
        ax.axvline(B, color="grey", ls=":", lw=1)
        ax.set_xlabel("updates")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        if isinstance(key, tuple):  # Gate A's threshold (PLAN.md §1)
            ax.axhline(EXIT_RATIO, color="grey", ls="--", lw=1)
    axes[0].legend(fontsize=8)
    n = len(study.seeds)
    fig.suptitle(f"Promise study, seed{'s' * (n > 1)} {', '.join(map(str, study.seeds))} "
                 f"(n = {n} of the "
                 f"{len(DECLARED_SEEDS)} declared): thin lines one seed each, thick the mean; "
                 f"dotted: B = {B:,}, where the branch continues MLM; dashed: Gate A's "
                 f"ratio {EXIT_RATIO}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# -------------------------------------------------------------------------- power (§4) --

def measure_power(n: int, key: str, sd: float, true: float = 0.0,
                  level: float = Q_ALPHA / 2) -> float:
    """The power of one measure's one-sided non-inferiority test (PLAN.md §3, §4) with ``n``
    seeds: P(noncentral t with n − 1 degrees of freedom and noncentrality
    (±true + margin) · √n / sd > t's 1 − ``level`` quantile), ``true`` the true mean D and
    ``sd`` the SD of the paired differences (the measure's unit: points or bits; + for POS,
    − for LOSS, where lower is better)."""
    df = n - 1
    noncentrality = (better(key) * true + MARGINS[key]) * math.sqrt(n) / sd
    return float(stats.nct.sf(stats.t.ppf(1 - level, df), df, noncentrality))


def q_power(n: int, sd_pos: float, sd_loss: float, true_pos: float = 0.0,
            true_loss: float = 0.0, level: float = Q_ALPHA / 2) -> float:
    """The power of a question's test (PLAN.md §4): both measures required, so the product of
    :func:`measure_power` of :data:`POS` and :data:`LOSS` (as if independent), at Holm's first
    level (0.0125, the conservative one)."""
    return (measure_power(n, POS, sd_pos, true_pos, level)
            * measure_power(n, LOSS, sd_loss, true_loss, level))


def seeds_for_power(sd_pos: float, sd_loss: float, true_pos: float = 0.0,
                    true_loss: float = 0.0, power: float = POWER,
                    level: float = Q_ALPHA / 2) -> int:
    """PLAN.md §4: the smallest n ≥ 2 of seeds whose :func:`q_power` is ≥ ``power`` (the SDs of
    the paired differences: points, bits; the true differences likewise).

    Raises:
        ValueError: an SD ≤ 0, ``power`` outside (0, 1), a true difference at or beyond its
            margin (the power never exceeds ``level``), or n above 10⁷.
    """
    if sd_pos <= 0 or sd_loss <= 0 or not 0 < power < 1:
        raise ValueError(f"SDs must be > 0 and power in (0, 1): {sd_pos}, {sd_loss}, {power}")
    for key, true in ((POS, true_pos), (LOSS, true_loss)):
        if better(key) * true + MARGINS[key] <= 0:
            raise ValueError(f"a true {key} difference of {true} is at or beyond the margin "
                             f"{MARGINS[key]}: no n gives power {power}")
    def enough(n: int) -> bool:
        """Whether n seeds give the power asked."""
        return q_power(n, sd_pos, sd_loss, true_pos, true_loss, level) >= power
    low, high = 1, 2  # enough(high), not enough(low): the power grows with n
    while not enough(high):
        low, high = high, high * 2
        if high > 10 ** 7:
            raise ValueError("more than 10^7 seeds needed")
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if enough(middle) else (middle, high)
    return high


# ------------------------------------------------------------------------------ report --

def _number(key: str, value: Optional[float], sign: bool = False) -> str:
    """``value`` in ``key``'s decimals (empty for None)."""
    return "" if value is None else f"{value:{'+' if sign else ''}.{FORMATS[key][1]}f}"


def _updates(reach: Optional[float], last: int) -> str:
    """A reach in updates, or that it was not reached by ``last``."""
    return f"not reached by {last:,}" if reach is None else f"{reach:,.0f}"


def _times(ratio: Optional[float]) -> str:
    """A speed-up ratio as ``3.08×`` (∞: reached at the start; empty: not reached)."""
    return "" if ratio is None else "∞" if math.isinf(ratio) else f"{ratio:.2f}×"


def _summary_line(label: str, s: RatioSummary) -> str:
    """One arm's :class:`RatioSummary` as a markdown list item."""
    if s.mean is None:
        mean = "no seed reached"
    else:
        mean = f"geometric mean {s.mean:.2f}×" + (
            f" [{s.low:.2f}, {s.high:.2f}] (95% t-interval on the logs)" if s.low is not None
            else " (one seed: no interval)")
    return (f"- {label}: {mean}; reached by {s.reached}, censored (not reached) {s.censored}"
            + (f", already there at the start {s.at_start}" if s.at_start else ""))


def _gate_a_section(exits: List[Exit], passed: bool) -> List[str]:
    """Gate A's per-seed table and verdict (PLAN.md §1), markdown lines."""
    lines = [f"## Gate A: the baseline learns (PLAN.md §1; MLM at {B:,} updates)", "",
             "| seed | neighbour share | uniform | ratio | validation loss (bits) | left the "
             "plateau |", "|---|---|---|---|---|---|"]
    lines += [f"| {e.seed} | {e.share:.3f} | {e.uniform:.3f} | {e.ratio:.2f} | {e.loss:.3f} | "
              f"{'yes' if e.passed else 'no'} |" for e in exits]
    failed = ", ".join(str(e.seed) for e in exits if not e.passed)
    verdict = "**passed**" if passed else f"**failed** (seeds {failed})"
    return lines + ["", f"Criterion: ratio ≥ {EXIT_RATIO:g} and loss < {PLATEAU_EXIT_LOSS:g} "
                    f"bits in every seed. Gate A: {verdict}.", ""]


def _gate_b_section(test: PairedTest, passed: bool) -> List[str]:
    """Gate B's test and verdict (PLAN.md §2), markdown lines."""
    return [f"## Gate B: the measure sees MLM's training (PLAN.md §2; {POS}, points)", "",
            "| comparison | n | mean difference | 95% t-interval | p (two-sided) |",
            "|---|---|---|---|---|",
            f"| MLM({N:,}) − MLM({GATE_B_EARLY:,}) | {test.n} | {test.difference:+.2f} | "
            f"[{test.low:+.2f}, {test.high:+.2f}] | {test.p:.3g} |", "",
            f"Criterion: mean > 0 and p < {ALPHA:g}. Gate B: **"
            + ("passed" if passed else "failed") + "**.", ""]


def _questions_section(qs: List[Question]) -> List[str]:
    """Q1 and Q2 per measure, then each verdict (PLAN.md §3), markdown lines."""
    lines = ["## Q1 (from scratch) and Q2 (after the plateau) (PLAN.md §3)", "",
             f"D = arm − MLM({N:,}) per seed. Non-inferiority margins: {POS} −{POS_MARGIN:g} "
             f"points, {LOSS} +{LOSS_MARGIN:g} bits; one-sided paired t-tests, a question's p "
             f"the larger of its two (both required), Holm over Q1 and Q2 at one-sided "
             f"{Q_ALPHA:g}.", "",
             "| question | measure | n | mean D | interval | p non-inferior | p worse than "
             "the margin |", "|---|---|---|---|---|---|---|"]
    for q in qs:
        for t in q.tests:
            d, low, high = (_number(t.measure, x, True) for x in (t.difference, t.low, t.high))
            lines.append(f"| {q.name}: {q.objective}({q.updates:,}) | {t.measure} "
                         f"({FORMATS[t.measure][0]}) | {t.n} | {d} | [{low}, {high}] "
                         f"({100 * t.confidence:.1f}%) | {t.p_noninferior:.3g} | "
                         f"{t.p_worse:.3g} |")
    lines.append("")
    lines += [f"- {q.name}: p = {q.p:.3g}, Holm level {q.level:g}, Holm-adjusted p "
              f"{q.holm_p:.3g}: **{q.verdict}**." for q in qs]
    return lines + [""]


def _speedup_section(study: Study) -> List[str]:
    """The described speed-up per measure and the curves at equal updates (PLAN.md §5),
    markdown lines."""
    lines = ["## The speed-up (PLAN.md §5; described, no test)", "",
             f"Per seed, the updates each arm needs to reach that seed's MLM({N:,}) value "
             f"(interpolated between checkpoints; the branch from MLM({B:,}), counted from 0 "
             f"and after {B:,}), and MLM's updates over them.", ""]
    for key in SPEEDUP_MEASURES:
        found = reaches(study, key)
        lines += [f"### {key} ({FORMATS[key][0]})", "",
                  f"| seed | MLM({N:,}) | TACO | {N:,} / TACO | branch | {N:,} / branch | "
                  f"{N - B:,} / branch after {B:,} |", "|---|---|---|---|---|---|---|"]
        lines += [f"| {r.seed} | {_number(key, r.target)} | {_updates(r.taco, TACO_END)} | "
                  f"{_times(r.taco_ratio)} | {_updates(r.branch, BRANCH_END)} | "
                  f"{_times(r.branch_ratio)} | {_times(r.branch_ratio_after)} |" for r in found]
        lines += ["", _summary_line("TACO", summarize([r.taco_ratio for r in found])),
                  _summary_line("branch (total)", summarize([r.branch_ratio for r in found])),
                  _summary_line(f"branch (after {B:,})",
                                summarize([r.branch_ratio_after for r in found])), ""]
    lines += ["### At equal updates (mean over seeds of arm − MLM; no test)", "",
              "| measure | updates | n | TACO − MLM | n | branch − MLM |",
              "|---|---|---|---|---|---|"]
    for key in SPEEDUP_MEASURES:
        for u, taco, branch in equal_updates(study, key):
            cells = [f"{arm[0]} | {_number(key, arm[1], True)}" if arm else " | "
                     for arm in (taco, branch)]
            lines.append(f"| {key} | {u:,} | {cells[0]} | {cells[1]} |")
    return lines


def report(study: Study) -> str:
    """The markdown report: both gates (Gate B computed and shown even when Gate A fails:
    each is reported apart), then Q1 and Q2 only if both pass (otherwise the line that no
    claim is made: PLAN.md §1, §2), then the described speed-up and curves (§5)."""
    exits, a_passed = gate_a(study)
    n, declared = len(study.seeds), len(DECLARED_SEEDS)
    lines = [f"Seeds analysed: {', '.join(map(str, study.seeds))} (n = {n} of the {declared} "
             f"declared, {DECLARED_SEEDS[0]}–{DECLARED_SEEDS[-1]})"
             + ("." if n >= declared else ": **interim**, no verdict below is final (PLAN.md, "
                "\"How it is run\").")]
    if study.unfinished:
        lines += ["", "Not analysed, their runs not finished (PLAN.md, \"How it is run\"):",
                  *(f"- seed {seed}: {'; '.join(gaps)}"
                    for seed, gaps in study.unfinished.items())]
    lines += ["", *_gate_a_section(exits, a_passed)]
    if n < 2:
        lines += ["## Gate B, Q1 and Q2 (PLAN.md §2, §3)", "",
                  f"Not tested: a paired test needs 2 seeds, {n} analysed.", ""]
        return "\n".join(lines + _per_seed_section(study) + _speedup_section(study)) + "\n"
    b_test, b_passed = gate_b(study)
    lines += _gate_b_section(b_test, b_passed)
    if a_passed and b_passed:
        lines += _questions_section(questions(study))
    else:
        failed = " and ".join(g for g, ok in (("Gate A", a_passed), ("Gate B", b_passed))
                              if not ok)
        lines += ["## Q1 and Q2 (PLAN.md §3)", "",
                  f"{failed} failed: **no claim is made** on Q1 or Q2; they are not tested "
                  "(PLAN.md §1, §2).", ""]
    return "\n".join(lines + _per_seed_section(study) + _speedup_section(study)) + "\n"


def _per_seed_section(study: Study) -> List[str]:
    """Q1's and Q2's values per seed (described): each measure at MLM(N), TACO(TACO_END) and
    the branch's BRANCH_END, and the differences D₁ and D₂, markdown lines."""
    lines = ["## Per seed (PLAN.md §3's values; described)", "",
             f"| seed | measure | MLM({N:,}) | TACO({TACO_END:,}) | D₁ | branch({BRANCH_END:,}) "
             "| D₂ |", "|---|---|---|---|---|---|---|"]
    for seed in study.seeds:
        for key in (POS, LOSS):
            mlm, taco, branch = (study.value(key, o, u, seed)
                                 for o, u in ((MLM, N), (TACO, TACO_END), (BRANCH, BRANCH_END)))
            lines.append(f"| {seed} | {key} | {_number(key, mlm)} | {_number(key, taco)} | "
                         f"{_number(key, taco - mlm, True)} | {_number(key, branch)} | "
                         f"{_number(key, branch - mlm, True)} |")
    return lines + [""]


def power_report(sd_pos: float, sd_loss: float, true_pos: float = 0.0,
                 true_loss: float = 0.0) -> str:
    """PLAN.md §4's answer in words: n and its power, each measure's."""
    n = seeds_for_power(sd_pos, sd_loss, true_pos, true_loss)
    level = Q_ALPHA / 2
    pos, loss = (measure_power(n, k, sd, t, level)
                 for k, sd, t in ((POS, sd_pos, true_pos), (LOSS, sd_loss, true_loss)))
    fewer = (f"; {n - 1} give {q_power(n - 1, sd_pos, sd_loss, true_pos, true_loss):.3f}"
             if n > 2 else "")
    return (f"n = {n} pre-training seeds: power {pos * loss:.3f} = {pos:.3f} ({POS}, SD "
            f"{sd_pos:g} points, true D {true_pos:g}, margin −{POS_MARGIN:g}) × {loss:.3f} "
            f"({LOSS}, SD {sd_loss:g} bits, true D {true_loss:g}, margin +{LOSS_MARGIN:g}) at "
            f"one-sided level {level:g} (Holm's first), target {POWER:g}{fewer}")


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The command line (module doc). Returns the exit status: 0 whatever the verdict, 1 when
    the CSV cannot be read or analysed or ``power`` gets impossible values."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--csv", type=Path, default=CSV,
                        help="the study's rows (default: checkpoints.csv beside this script)")
    commands = parser.add_subparsers(dest="command")
    power = commands.add_parser("power", help="the seeds for 80%% power of Q's test (§4)")
    power.add_argument("--sd-pos", type=float, required=True,
                       help=f"SD over seeds of the paired differences of {POS} (points)")
    power.add_argument("--sd-loss", type=float, required=True,
                       help=f"SD over seeds of the paired differences of {LOSS} (bits)")
    power.add_argument("--true-pos", type=float, default=0.0, help="true mean D (points)")
    power.add_argument("--true-loss", type=float, default=0.0, help="true mean D (bits)")
    curves = commands.add_parser("curves", help="the figure of the arms' curves (§5)")
    curves.add_argument("--figure", type=Path, default=FIGURE,
                        help="the PNG to write (default: curves.png beside this script)")
    args = parser.parse_args(argv)
    try:
        if args.command == "power":
            print(power_report(args.sd_pos, args.sd_loss, args.true_pos, args.true_loss))
        elif args.command == "curves":
            print(f"wrote {plot_curves(Study(read_checkpoints_csv(args.csv)), args.figure)}")
        else:
            print(report(Study(read_checkpoints_csv(args.csv))), end="")
    except (OSError, ValueError) as error:
        print(f"analysis.py: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
