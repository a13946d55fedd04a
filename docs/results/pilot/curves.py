"""The pilot's curves (issue 42, docs/results.md "The pilot"): one row per run and validation,
read from the runs' fairseq json logs (``run.sh``), and when each run left the plateau.

    .venv/bin/python docs/results/pilot/curves.py OUT/blocks32-seed1/train.log ... \
        [--csv docs/results/pilot/curves.csv] [--figure docs/results/pilot/curves.png]

A run's directory name is ``RECIPE-seedSEED``. Rows already in ``--csv`` for other runs are
kept; those of the runs given are replaced. Columns: recipe, seed, updates, valid_mlm_loss
(bits per masked token), neighbour_share and neighbour_share_uniform (the first layer's,
fairseq-train's validation metric), their ratio.

The exit of a run: the first validation whose share is at least ``EXIT_RATIO`` times uniform
(taco_fairseq.neighbour_attention, the line fairseq-train logs), and the loss at it.
"""

import argparse
import csv
import re
from pathlib import Path
from typing import Dict, List, Optional

from taco_fairseq.analysis.training_log import parse_json_log
from taco_fairseq.logs import configure_logging
from taco_fairseq.neighbour_attention import EXIT_RATIO

COLUMNS = ("recipe", "seed", "updates", "valid_mlm_loss", "neighbour_share",
           "neighbour_share_uniform", "share_ratio")
RUN_NAME = re.compile(r"^(?P<recipe>[a-z0-9_]+)-seed(?P<seed>\d+)$")


def run_rows(log: Path) -> List[Dict]:
    """The validation rows of one run's log (the last record of each update).

    Raises:
        ValueError: the log's directory is not named RECIPE-seedSEED.
    """
    match = RUN_NAME.match(log.parent.name)
    if match is None:
        raise ValueError(f"{log}: its directory must be named RECIPE-seedSEED")
    by_update = {}
    for record in parse_json_log(log.read_text(encoding="utf-8", errors="replace").splitlines()):
        if record["kind"] == "valid" and "valid_neighbour_share" in record:
            by_update[int(record["valid_num_updates"])] = record
    rows = []
    for updates, record in sorted(by_update.items()):
        share, uniform = record["valid_neighbour_share"], record["valid_neighbour_share_uniform"]
        rows.append({"recipe": match["recipe"], "seed": int(match["seed"]), "updates": updates,
                     "valid_mlm_loss": record["valid_loss"], "neighbour_share": share,
                     "neighbour_share_uniform": uniform,
                     "share_ratio": round(share / uniform, 3)})
    return rows


def exit_row(rows: List[Dict]) -> Optional[Dict]:
    """The first row at or above ``EXIT_RATIO`` × uniform, or None."""
    return next((r for r in rows if r["share_ratio"] >= EXIT_RATIO), None)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("logs", nargs="+", type=Path)
    parser.add_argument("--csv", type=Path, default=Path(__file__).with_name("curves.csv"))
    parser.add_argument("--figure", type=Path, default=None)
    args = parser.parse_args(argv)
    configure_logging()  # INFO: importing fairseq set the root logger to DEBUG
    rows = []
    for log in args.logs:
        rows += run_rows(log)
    runs = {(r["recipe"], r["seed"]) for r in rows}
    if args.csv.is_file():
        with args.csv.open(newline="") as f:
            kept = [r for r in csv.DictReader(f) if (r["recipe"], int(r["seed"])) not in runs]
        rows = [{**r, "seed": int(r["seed"]), "updates": int(r["updates"]),
                 **{k: float(r[k]) for k in COLUMNS[3:]}} for r in kept] + rows
    rows.sort(key=lambda r: (r["recipe"], r["seed"], r["updates"]))
    with args.csv.open("w", newline="") as f:
        writer = csv.DictWriter(f, COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    for recipe, seed in sorted({(r["recipe"], r["seed"]) for r in rows}):
        run = [r for r in rows if (r["recipe"], r["seed"]) == (recipe, seed)]
        left = exit_row(run)
        last = run[-1]
        print(f"{recipe} seed {seed}: to {last['updates']} updates, "
              + (f"left the plateau at {left['updates']} (share {left['neighbour_share']:.3f}, "
                 f"{left['share_ratio']:.2f}× uniform; loss {left['valid_mlm_loss']:.2f} bits)"
                 if left else f"on the plateau (share {last['share_ratio']:.2f}× uniform)")
              + f"; loss at {last['updates']}: {last['valid_mlm_loss']:.2f} bits")
    if args.figure:
        _figure(rows, args.figure)


def _figure(rows: List[Dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (loss_axis, share_axis) = plt.subplots(1, 2, figsize=(10, 4))
    for recipe, seed in sorted({(r["recipe"], r["seed"]) for r in rows}):
        run = [r for r in rows if (r["recipe"], r["seed"]) == (recipe, seed)]
        updates = [r["updates"] for r in run]
        style = "-" if recipe == "blocks32" else "--"
        loss_axis.plot(updates, [r["valid_mlm_loss"] for r in run], style, marker=".",
                       label=f"{recipe} seed {seed}")
        share_axis.plot(updates, [r["share_ratio"] for r in run], style, marker=".")
    share_axis.axhline(EXIT_RATIO, color="grey", linewidth=0.8)
    loss_axis.set(xlabel="updates", ylabel="validation masked-LM loss (bits)")
    share_axis.set(xlabel="updates", ylabel="first-layer neighbour share / uniform",
                   yscale="log")
    loss_axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
