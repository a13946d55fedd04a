"""The figures of a comparison (``taco-compare``; matplotlib, PNG): ``glue_average.png`` (the
paper's Figure 5), ``difference.png``, ``tasks.png`` and ``checkpoints.png``
(:func:`plot_figures`), and what their points and error bars are in words
(:func:`error_bars`)."""

import math
import textwrap
from pathlib import Path
from typing import List, Mapping, Optional, Sequence

import numpy as np

from .statistics import MeasureTable, ScoreTable, compared_updates, paired_difference, t_interval

#: Every GLUE axis spans at least this many points (scores or differences): a gap of a point
#: looks like one, not like the whole range of the figure.
GLUE_AXIS_SPAN = 10.0

#: Axis labels of the known per-checkpoint measures (others: the key).
MEASURE_LABELS = {"valid_mlm_loss": "validation MLM loss, bits",
                  "contextual_score": "contextual score (held-out text)"}


def plot_figures(table: Optional[ScoreTable], measures: Sequence[Mapping], baseline: str,
                 out: Path) -> List[Path]:
    """``glue_average.png`` (the paper's Figure 5: GLUE average over the curve tasks against
    updates), ``tasks.png`` (per task), ``difference.png`` (each objective − baseline at equal
    updates) and ``checkpoints.png`` (every per-checkpoint measure); ``table`` None (no
    fine-tuning has finished): ``checkpoints.png`` only. Returns the files written.

    Each point is the mean over pre-training seeds of the per-seed means over fine-tuning
    seeds; the error bars are the 95% t-interval over pre-training seeds (:func:`error_bars`;
    with one pre-training seed, ± the SD over fine-tuning seeds on the GLUE figures, none on
    the measures); each title says which. A GLUE axis spans at least :data:`GLUE_AXIS_SPAN`
    points, so that a small gap does not fill the figure."""
    import matplotlib

    matplotlib.use("Agg")
    written = []
    if table is not None:  # no fine-tuning finished yet: no GLUE figure
        tasks = table.curve_tasks()
        if tasks:
            written += [_plot_glue_average(table, tasks, out / "glue_average.png"),
                        _plot_difference(table, tasks, baseline, out / "difference.png")]
        written.append(_plot_tasks(table, out / "tasks.png"))
    measured = MeasureTable(measures)
    if measured.keys:
        written.append(_plot_measures(measured, len({r["pretrain_seed"] for r in measures}),
                                      out / "checkpoints.png"))
    return written


def _plot_glue_average(table: ScoreTable, tasks: Sequence[str], path: Path) -> Path:
    """:func:`plot_figures`' ``glue_average.png``: each objective's GLUE average over
    ``tasks`` (points) against updates."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.2))
    for i, o in enumerate(table.objectives):
        _errorbar(ax, table.updates, [_glue_bar(table, o, u, tasks) for u in table.updates], o,
                  _dodge(i, len(table.objectives), table.updates))
    _axes(ax, f"GLUE average ({', '.join(tasks)}), points", GLUE_AXIS_SPAN)
    bars = error_bars(len(table.pretrain_seeds), len(table.seeds))
    ax.set_title(textwrap.fill(f"GLUE dev average vs pre-training updates: {bars}", 75),
                 fontsize=8)
    return _save(fig, path)


def _plot_difference(table: ScoreTable, tasks: Sequence[str], baseline: str,
                     path: Path) -> Path:
    """:func:`plot_figures`' ``difference.png``: each other objective's GLUE average over
    ``tasks`` minus ``baseline``'s (points), paired by pre-training seed, at every checkpoint
    but the initialization."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.2))
    others = [o for o in table.objectives if o != baseline]
    for i, o in enumerate(others):
        points = [(u, paired_difference(table, o, baseline, u, tasks))
                  for u in compared_updates(table.updates)]
        _errorbar(ax, [u for u, _ in points], [(d.difference, d.low, d.high) for _, d in points],
                  f"{o} − {baseline}", _dodge(i, len(others), table.updates))
    ax.axhline(0, color="grey", lw=0.8)
    _axes(ax, "difference of GLUE averages, points", GLUE_AXIS_SPAN)
    ax.set_title("Paired difference at equal updates\n("
                 + ("95% t-interval over pre-training seeds, uncorrected"
                    if len(table.pretrain_seeds) > 1 else "one pre-training seed: no interval")
                 + ")", fontsize=9)
    return _save(fig, path)


def _plot_tasks(table: ScoreTable, path: Path) -> Path:
    """:func:`plot_figures`' ``tasks.png``: a panel per task, each objective's dev score
    (points) at the checkpoints whose runs have all finished."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(table.tasks), figsize=(3.4 * len(table.tasks), 3.6),
                             squeeze=False)
    for ax, task in zip(axes[0], table.tasks):
        for i, o in enumerate(table.objectives):
            at = [u for u in table.updates if table.cell(o, u, task) is not None]
            _errorbar(ax, at, [_glue_bar(table, o, u, [task]) for u in at], o,
                      _dodge(i, len(table.objectives), table.updates))
        _axes(ax, "dev score, points", GLUE_AXIS_SPAN)
        ax.set_title(task)
    bars = error_bars(len(table.pretrain_seeds), len(table.seeds))
    fig.suptitle(textwrap.fill(bars, 60 * len(table.tasks)), fontsize=8)
    return _save(fig, path)


def _plot_measures(measured: MeasureTable, pretrain_seeds: int, path: Path) -> Path:
    """:func:`plot_figures`' ``checkpoints.png``: a panel per measure of ``measured`` (at
    least one; four panels a row), each objective's mean over its ``pretrain_seeds``
    (a count) against updates."""
    import matplotlib.pyplot as plt

    columns = min(4, len(measured.keys))
    rows = math.ceil(len(measured.keys) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.4 * rows), squeeze=False)
    for ax, key in zip(axes.ravel(), measured.keys):
        for i, o in enumerate(measured.objectives):
            at = [u for u in measured.updates if measured.values(key, o, u)]
            _errorbar(ax, at, [_bar(list(measured.values(key, o, u).values())) for u in at], o,
                      _dodge(i, len(measured.objectives), measured.updates))
        _axes(ax, MEASURE_LABELS.get(key, key))
    for ax in axes.ravel()[len(measured.keys):]:
        ax.axis("off")
    fig.suptitle("Per-checkpoint measures: mean over pre-training seeds"
                 + (", error bars: 95% t-interval over them" if pretrain_seeds > 1 else
                    " (one pre-training seed: no error bars)"), fontsize=9)
    return _save(fig, path)


def error_bars(pretrain_seeds: int, finetune_seeds: int) -> str:
    """What the points and error bars of the GLUE figures are, in words."""
    points = (f"mean of {pretrain_seeds} pre-training seed(s), each averaged over "
              f"{finetune_seeds} fine-tuning seed(s)")
    if pretrain_seeds > 1:
        return f"{points}; error bars: 95% t-interval over the pre-training seeds"
    if finetune_seeds > 1:
        return f"{points}; error bars: ± SD over the fine-tuning seeds (description only)"
    return f"{points}; no error bars"


def _glue_bar(table: ScoreTable, objective: str, updates: int, tasks: Sequence[str]):
    """(mean, low, high) of a GLUE point: :func:`_bar` over pre-training seeds, or ± the SD
    over fine-tuning seeds with one pre-training seed."""
    means = list(table.seed_means(objective, updates, tasks).values())
    if len(means) > 1:
        return _bar(means)
    sd = table.finetune_sd(objective, updates, tasks) or 0.0
    return means[0], means[0] - sd, means[0] + sd


def _bar(values: Sequence[float]):
    """(mean, low, high): the 95% t-interval of the mean; (mean, None, None) for one value."""
    if len(values) < 2:
        return float(np.mean(values)), None, None
    low, high, _ = t_interval(values)
    return float(np.mean(values)), low, high


def _errorbar(ax, x: Sequence[int], bars: Sequence, label: str, dodge: float = 0.0) -> None:
    """Points ``(mean, low, high)`` (low/high None: no bar) with their error bars, moved
    ``dodge`` along x so that two objectives' bars do not hide each other."""
    if not x:
        return
    mid = np.array([b[0] for b in bars], float)
    err = np.array([[m - (b[1] if b[1] is not None else m) for m, b in zip(mid, bars)],
                    [(b[2] if b[2] is not None else m) - m for m, b in zip(mid, bars)]])
    ax.errorbar(np.asarray(x, float) + dodge, mid, yerr=err, marker="o", capsize=3, label=label)


def _dodge(index: int, count: int, updates: Sequence[int]) -> float:
    """The x shift of the ``index``-th of ``count`` curves: 1.5% of the update range apart."""
    span = (max(updates) - min(updates)) if len(updates) > 1 else 1
    return (index - (count - 1) / 2) * 0.015 * span


def _axes(ax, ylabel: str, span: Optional[float] = None) -> None:
    """Labels, grid, legend; with ``span``, the y-axis widened about its centre to at least
    ``span`` units."""
    ax.set_xlabel("pre-training updates")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if span is not None:
        low, high = ax.get_ylim()
        if high - low < span:
            centre = (low + high) / 2
            ax.set_ylim(centre - span / 2, centre + span / 2)
    if ax.get_legend_handles_labels()[0]:  # a partial report may have no curve here yet
        ax.legend(fontsize=8)


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path
