"""Summarize all finished GLUE runs under a runner output directory: writes summary.csv and
summary.md there (mean +- std over seeds, best run, GLUE averages) and prints the table.

Example:
    taco-glue-summary runs/glue
"""

import argparse
import sys
from pathlib import Path


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("out", type=Path, help="the runner's --out directory")
    parser.add_argument("--pooled", action="store_true",
                        help="all grid points of a task together instead of the best one")
    args = parser.parse_args(argv)
    from taco_fairseq.glue.summary import collect_results, write_summary

    try:
        results = collect_results(args.out)
    except FileNotFoundError as e:
        sys.exit(f"error: {e}")
    print(write_summary(results, args.out, pooled=args.pooled))


if __name__ == "__main__":
    main()
