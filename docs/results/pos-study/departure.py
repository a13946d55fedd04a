"""When each run leaves the plateau: a description made after the results, not part of PLAN.md.

    .venv/bin/python docs/results/pos-study/departure.py docs/results/pos-study/checkpoints.csv

The declared gate compares MLM(20,000) with MLM(1,000); whether it passes turned out to depend
on whether a seed's MLM has left its plateau by 20,000 updates. This prints, run by run, the
first checkpoint at which the first layer's share of attention on the neighbouring positions
(``neighbour_attention_layer1``; uniform attention gives about 0.054 on these sentences)
reaches 0.09, the level from which every TACO checkpoint of the 5-seed study had opened its
masked-LM loss gap (issue 33, written before this study ran), with the part-of-speech accuracy
(ambiguous words, last layer) and the validation masked-LM loss at the run's checkpoints.
Post hoc: a description, no test.
"""

import argparse
import sys
from pathlib import Path
from typing import Dict, List, Optional

from taco_fairseq.comparison.tables import read_checkpoints_csv

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


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoints", type=Path, help="the study's checkpoints.csv")
    print(report(read_checkpoints_csv(parser.parse_args(argv).checkpoints)))


if __name__ == "__main__":
    sys.exit(main())
