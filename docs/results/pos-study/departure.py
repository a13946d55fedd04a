"""When each run leaves the plateau: a description made after the results, not part of PLAN.md.

    .venv/bin/python docs/results/pos-study/departure.py docs/results/pos-study/checkpoints.csv

The declared gate compares MLM(20,000) with MLM(1,000); whether it passes turned out to depend
on whether a seed's MLM has left its plateau by 20,000 updates. This prints, run by run, the
first checkpoint at which the first layer's share of attention on the neighbouring positions
(``neighbour_attention_layer1``; uniform attention gives about 0.054 on these sentences)
reaches 0.09, the level from which every TACO checkpoint of the 5-seed study had opened its
masked-LM loss gap (issue 33, written before this study ran), with the part-of-speech accuracy
(ambiguous words, last layer) and the validation masked-LM loss at the run's checkpoints.
Post hoc: a description, no test. ``--figure FILE`` also draws every run's curves (PNG).
"""

import argparse
import sys
from pathlib import Path
from typing import Dict, List, Optional

from taco_fairseq.comparison.tables import read_checkpoints_csv
from taco_fairseq.logs import configure_logging

#: The first layer's neighbour share from which a run counts as off the plateau (issue 33).
DEPARTED = 0.09
SHARE = "neighbour_attention_layer1"
POS = "pos_accuracy_ambiguous"


def curves(rows: List[dict]) -> Dict[tuple, List[dict]]:
    """``(objective, seed) → its rows by update``."""
    runs: Dict[tuple, List[dict]] = {}
    for row in rows:
        runs.setdefault((row["objective"], row["pretrain_seed"]), []).append(row)
    return {run: sorted(found, key=lambda r: r["updates"]) for run, found in sorted(runs.items())}


def departure(run: List[dict]) -> Optional[int]:
    """The first checkpoint (updates) whose first-layer neighbour share is ≥ ``DEPARTED``;
    None if the run has none.

    Raises:
        KeyError: a row without ``neighbour_attention_layer1`` (not a taco-compare row).
    """
    return next((r["updates"] for r in run if r[SHARE] is not None and r[SHARE] >= DEPARTED),
                None)


def report(rows: List[dict]) -> str:
    """A markdown table, a line per run: where it leaves the plateau (updates), its first-layer
    neighbour share at its last checkpoint, its part-of-speech accuracy (ambiguous words, last
    layer, points) at its first and last checkpoints, and its validation masked-LM loss at the
    last (bits per masked token; empty where the row has none).

    Raises:
        KeyError: a row without the columns above (not a taco-compare row).
    """
    lines = [f"| run | off the plateau at (first-layer neighbour share ≥ {DEPARTED}) | "
             "share at the last checkpoint | POS ambiguous, first → last (points) | "
             "validation loss at the last (bits) |", "|---|---|---|---|---|"]
    for (objective, seed), run in curves(rows).items():
        left, first, last = departure(run), run[0], run[-1]
        loss = last.get("valid_mlm_loss")
        lines.append(
            f"| {objective} seed {seed} | "
            + (f"{left:,}" if left is not None else f"not by {last['updates']:,}")
            + f" | {last[SHARE]:.3f} | {first[POS]:.2f} → {last[POS]:.2f} at {last['updates']:,}"
            + f" | {'' if loss is None else f'{loss:.2f}'} |")
    return "\n".join(lines)


def plot(rows: List[dict], path: Path) -> None:
    """Every run's part-of-speech accuracy (ambiguous words, last layer, points) and first-layer
    neighbour share against updates, one line per run (objectives by colour), as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharex=True)
    colours = {"mlm": "tab:blue", "taco": "tab:orange"}
    for (objective, seed), run in curves(rows).items():
        updates = [r["updates"] for r in run]
        for ax, key in zip(axes, (POS, SHARE)):
            ax.plot(updates, [r[key] for r in run], marker=".", color=colours.get(objective),
                    alpha=0.8, label=objective.upper() if seed == 1 else None)
            ax.text(updates[-1], run[-1][key], f" {seed}", fontsize=7, va="center")
    axes[0].set_ylabel("part of speech, ambiguous words (%)")
    axes[1].set_ylabel("first layer's attention share on i ± 1")
    axes[1].axhline(DEPARTED, color="grey", linestyle=":", linewidth=1)
    for ax in axes:
        ax.set_xlabel("updates")
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle("Each pre-training seed's run (the seed at the end of its line)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoints", type=Path, help="the study's checkpoints.csv")
    parser.add_argument("--figure", type=Path, help="also draw every run's curves here (PNG)")
    args = parser.parse_args(argv)
    configure_logging()  # INFO: importing fairseq set the root logger to DEBUG
    rows = read_checkpoints_csv(args.checkpoints)
    print(report(rows))
    if args.figure:
        plot(rows, args.figure)


if __name__ == "__main__":
    sys.exit(main())
