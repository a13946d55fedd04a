"""Checkpoint sweep (paper §4.2, Figure 5): fine-tune every saved checkpoint of several
pre-training runs (e.g. TACO and MLM), plot the GLUE average against pre-training updates, and
measure the speedup.

Checkpoints are fairseq's ``checkpoint_<epoch>_<updates>.pt`` (``--save-interval-updates``);
the one of run ``LABEL`` at ``U`` updates is reported as ``LABEL@U``. The speedup of a run
over the baseline (the paper: TACO over MLM) is :mod:`.speedup`'s, the one ``taco-compare``
reports: the baseline's updates at its best GLUE average over the updates at which the run
first reaches that average, interpolated between checkpoints.
"""

import csv
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from ..analysis.checkpoints import interval_checkpoints
from .pretrained import PretrainedCheckpoint
from .speedup import curve_speedup
from .summary import Cell, glue_averages

_LABEL = re.compile(r"^[A-Za-z0-9_.+-]+$")


@dataclass(frozen=True)
class SweepPoint:
    """The GLUE averages (points) of one checkpoint: ``paper`` metrics and the standard
    ``glue`` choice, over ``columns`` dev-set columns."""

    label: str
    updates: int
    paper: float
    glue: float
    columns: int


def sweep_checkpoints(runs: Dict[str, Path]) -> List[PretrainedCheckpoint]:
    """The ``checkpoint_<epoch>_<updates>.pt`` of every run, named ``LABEL@UPDATES``.

    Raises:
        ValueError: a label is empty or has characters other than letters, digits, ``_.+-``.
        FileNotFoundError: a run directory has no such checkpoint.
    """
    checkpoints = []
    for label, run_dir in runs.items():
        if not _LABEL.match(label):
            raise ValueError(f"run label {label!r}: use letters, digits and _.+- only")
        found = interval_checkpoints(run_dir)
        if not found:
            raise FileNotFoundError(
                f"no checkpoint_<epoch>_<updates>.pt in {run_dir}; pre-train with "
                "--save-interval-updates N --keep-interval-updates -1"
            )
        checkpoints += [PretrainedCheckpoint(f"{label}@{updates}", path)
                        for updates, path in found]
    return checkpoints


def sweep_curves(cells: Sequence[Cell]) -> Dict[str, List[SweepPoint]]:
    """label → its points by updates, from summary cells of ``LABEL@UPDATES`` checkpoints
    (others are ignored).

    Raises:
        ValueError: checkpoints have results on different numbers of dev sets (averages would
            not be comparable; finish the missing runs).
    """
    curves: Dict[str, List[SweepPoint]] = {}
    for name, avg in glue_averages(cells).items():
        label, at, updates = name.rpartition("@")
        if not at or not updates.isdigit():
            continue
        curves.setdefault(label, []).append(
            SweepPoint(label, int(updates), avg["paper"], avg["glue"], avg["columns"]))
    columns = {p.columns for points in curves.values() for p in points}
    if len(columns) > 1:
        raise ValueError(f"checkpoints have results on {sorted(columns)} dev sets; averages "
                         "are only comparable over the same tasks")
    return {label: sorted(points, key=lambda p: p.updates) for label, points in curves.items()}


def speedup(baseline: Sequence[SweepPoint], candidate: Sequence[SweepPoint],
            metric: str = "paper") -> Dict[str, Optional[float]]:
    """The speedup of ``candidate`` over ``baseline`` on the ``metric`` average (``"paper"``
    or ``"glue"``, points): :func:`.speedup.curve_speedup` of their curves (each run on its
    own checkpoints, ascending as :func:`sweep_curves` gives them).

    Returns:
        ``baseline_best`` (score), ``baseline_updates`` (the first updates with it),
        ``candidate_updates`` (the updates at which ``candidate`` first reaches it,
        interpolated between its checkpoints; None if never) and ``speedup`` (their ratio;
        None if never reached).

    Raises:
        ValueError: ``baseline`` has no point.
    """
    return curve_speedup([p.updates for p in baseline], [getattr(p, metric) for p in baseline],
                         [p.updates for p in candidate], [getattr(p, metric) for p in candidate])


def write_sweep_csv(curves: Dict[str, List[SweepPoint]], path: Path) -> None:
    """One row per checkpoint: label, updates, both GLUE averages, columns."""
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["run", "updates", "glue_avg_paper", "glue_avg_mcc_for_cola", "columns"])
        for points in curves.values():
            for p in points:
                writer.writerow([p.label, p.updates, f"{p.paper:.4f}", f"{p.glue:.4f}",
                                 p.columns])


def plot_sweep(curves: Dict[str, List[SweepPoint]], path: Path, title: str = "") -> None:
    """GLUE average (paper's metrics, and with MCC for CoLA) vs pre-training updates, one line
    per run, side by side in two panels; saved as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharex=True)
    for ax, metric, name in zip(axes, ("paper", "glue"),
                                ("GLUE avg (paper's metrics)", "GLUE avg (MCC for CoLA)")):
        for label, points in curves.items():
            ax.plot([p.updates for p in points], [getattr(p, metric) for p in points],
                    marker="o", label=label)
        ax.set_xlabel("pre-training updates")
        ax.set_ylabel(f"{name}, points")
        ax.grid(alpha=0.3)
        ax.legend()
    columns = next(iter(curves.values()))[0].columns if curves else 0
    fig.suptitle(title or f"GLUE dev average over {columns} dev sets vs pre-training updates")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def format_speedup(label: str, baseline: str, result: Dict[str, Optional[float]]) -> str:
    """A sentence stating the speedup and the numbers behind it."""
    head = (f"{baseline} is best at {result['baseline_updates']} updates "
            f"({result['baseline_best']:.2f})")
    if result["speedup"] is None or math.isnan(result["speedup"]):
        return f"{head}; {label} does not reach that score: no speedup measurable"
    return (f"{head}; {label} first reaches it at {result['candidate_updates']:.0f} updates "
            f"(interpolated): speedup {result['speedup']:.2f}x")
