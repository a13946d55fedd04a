"""Contextual score of pre-training checkpoints: intra- and inter-context similarity of
last-layer states on raw text (paper §2.2, appendix A.3 and Table 9), as a CSV and a PNG.

Example:
    taco-analyze-context runs/demo/taco runs/demo/mlm \\
        --corpus ../shared/data/corpus/wikipedia-en-2015-wikiextractor/AB.txt.xz \\
        --max-lines 3000 --sentences 2000 --output runs/demo/contextual_score.csv \\
        --plot runs/demo/contextual_score.png
"""

import argparse
from pathlib import Path

from taco_fairseq.cli.analysis_options import (
    add_corpus_arguments,
    add_run_arguments,
    run_command,
    run_contextual_score,
)
from taco_fairseq.analysis.figures import plot_contextual_score, write_csv


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_run_arguments(parser)
    add_corpus_arguments(parser)
    parser.add_argument("--output", type=Path, required=True, help="CSV, one row per checkpoint")
    parser.add_argument("--plot", type=Path, help="PNG of the scores over updates")
    args, rows = run_command(parser, run_contextual_score, argv)
    write_csv(rows, args.output)
    print(f"wrote {args.output} ({len(rows)} checkpoints)")
    if args.plot:
        plot_contextual_score(rows, args.plot)
        print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
