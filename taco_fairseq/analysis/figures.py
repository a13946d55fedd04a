"""CSV tables and matplotlib figures of the analyses over pre-training updates.

Rows are dicts with at least ``run`` and ``updates`` (one row per checkpoint); every figure
draws one line per run against the update count, runs side by side (the paper's Figures 3, 4
and 6 and appendix Table 9).
"""

import csv
import logging
import math
from collections import defaultdict
from pathlib import Path
from typing import Dict, Iterable, List, Mapping, Sequence, Union

# fairseq's wav2vec2_classification module sets the root logger to DEBUG when fairseq is
# imported; keep matplotlib's start-up messages out of the commands' output.
logging.getLogger("matplotlib").setLevel(logging.WARNING)
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)

from .training_log import latest_per_update, update_count  # noqa: E402

PathLike = Union[str, Path]

#: Online diagnostics in a fairseq json log: (metric, label); valid records carry ``valid_``.
ONLINE_METRICS = (
    ("intra_context_cos", "intra-context"),
    ("inter_context_cos", "inter-context"),
    ("contextual_score", "contextual score"),
)


def write_csv(rows: Sequence[Mapping], path: PathLike) -> None:
    """Write ``rows`` (dicts with the same keys, in order) as a CSV file with a header.

    Raises:
        ValueError: if there are no rows.
    """
    if not rows:
        raise ValueError(f"nothing to write to {path}: no rows")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def by_run(rows: Iterable[Mapping]) -> Dict[str, List[Mapping]]:
    """Rows grouped by ``run`` (in order of first appearance), each sorted by ``updates``."""
    groups = defaultdict(list)
    for row in rows:
        groups[row["run"]].append(row)
    return {run: sorted(group, key=lambda r: r["updates"]) for run, group in groups.items()}


def _series(rows: Sequence[Mapping], key: str):
    return [r["updates"] for r in rows], [r[key] for r in rows]


def _finish(fig, axes, path: PathLike) -> None:
    for ax in axes:
        ax.set_xlabel("updates")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="small")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_contextual_score(rows: Sequence[Mapping], path: PathLike) -> None:
    """Three panels over updates, one line per run: the contextual score (cosine intra − inter,
    §2.2), intra- (solid) and inter-context (dashed) cosine similarity, and the intra/inter
    ratios of the L1, L2 and L10 distances (appendix Table 9)."""
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for index, (run, group) in enumerate(by_run(rows).items()):
        color = f"C{index}"
        axes[0].plot(*_series(group, "cosine_gap"), "o-", color=color, label=run)
        axes[1].plot(*_series(group, "cosine_intra"), "o-", color=color, label=f"{run} intra")
        axes[1].plot(*_series(group, "cosine_inter"), "s--", color=color, label=f"{run} inter")
        for style, measure in zip(("o-", "s--", "^:"), ("l1", "l2", "l10")):
            key = f"{measure}_ratio"
            if key in group[0]:
                axes[2].plot(*_series(group, key), style, color=color,
                             label=f"{run} {measure.upper()}")
    axes[0].set_title("contextual score (cosine, intra − inter)")
    axes[1].set_title("cosine similarity of last-layer states")
    axes[2].set_title("distance ratio intra / inter")
    _finish(fig, axes, path)


def plot_intra_inter(rows: Sequence[Mapping], path: PathLike) -> None:
    """One panel per run (shared y axis): intra- and inter-context cosine similarity over
    updates (the paper's Figure 6, MLM and TACO side by side)."""
    groups = by_run(rows)
    fig, axes = plt.subplots(1, len(groups), figsize=(5 * len(groups), 4), sharey=True,
                             squeeze=False)
    for ax, (run, group) in zip(axes[0], groups.items()):
        ax.plot(*_series(group, "cosine_intra"), "o-", label="intra-context")
        ax.plot(*_series(group, "cosine_inter"), "s--", label="inter-context")
        ax.set_title(run)
    axes[0][0].set_ylabel("cosine similarity")
    _finish(fig, axes[0], path)


def plot_embedding_similarity(rows: Sequence[Mapping], path: PathLike) -> None:
    """Mean cosine similarity of the selected word pairs' static embeddings over updates, one
    line per run (the paper's Figure 3(a))."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for run, group in by_run(rows).items():
        ax.plot(*_series(group, "mean_cosine"), "o-", label=f"{run} ({group[0]['pairs']} pairs)")
    ax.set_title("embedding similarity of WordSim353 pairs")
    ax.set_ylabel("mean cosine similarity")
    _finish(fig, [ax], path)


def plot_online_diagnostics(logs: Mapping[str, Sequence[Mapping]], path: PathLike) -> None:
    """The online diagnostics of training logs: one panel per metric of
    :data:`ONLINE_METRICS`, a line per run for training records (``train_inner``) and markers
    for validation (``valid``); an update logged twice is drawn once, with its later record.

    Args:
        logs: run -> records of :func:`taco_fairseq.analysis.training_log.parse_json_log`.

    Raises:
        ValueError: if no log has the metrics (trained with ``--no-context-similarity``, or
            not with the ``taco``/``mlm`` criterion).
    """
    fig, axes = plt.subplots(1, len(ONLINE_METRICS), figsize=(5 * len(ONLINE_METRICS), 4))
    drawn = False
    for index, (run, records) in enumerate(logs.items()):
        for ax, (metric, label) in zip(axes, ONLINE_METRICS):
            for kind, prefix, style in (("train_inner", "", "-"), ("valid", "valid_", "o")):
                points = [(update_count(r), r[prefix + metric])
                          for r in latest_per_update(records, kind)
                          if _finite(r.get(prefix + metric))]
                if points:
                    drawn = True
                    ax.plot(*zip(*points), style, color=f"C{index}",
                            label=f"{run}{' valid' if prefix else ''}")
            ax.set_title(f"{label} (online, masked input)")
    if not drawn:
        plt.close(fig)
        raise ValueError(
            f"no {ONLINE_METRICS[0][0]} in the logs of {list(logs)}: train with the taco or "
            "mlm criterion, without --no-context-similarity, and --log-format json"
        )
    _finish(fig, axes, path)


def _finite(value) -> bool:
    return isinstance(value, float) and math.isfinite(value)
