"""Embedding similarity of WordSim353 word pairs across pre-training checkpoints: cosine
similarity of the static (token) embeddings, multi-piece words averaged (paper §2.2, Figure
3(a)), as CSVs (per checkpoint; per checkpoint and pair) and a PNG.

Example:
    taco-analyze-wordsim runs/demo/taco runs/demo/mlm \\
        --wordsim ../shared/data/wordsim353/combined.tsv --sample 20 \\
        --output runs/demo/embedding_similarity.csv --plot runs/demo/embedding_similarity.png
"""

import argparse
from pathlib import Path

from taco_fairseq.cli.analysis_options import (
    add_pair_arguments,
    add_run_arguments,
    run_command,
    run_embedding_similarity,
)
from taco_fairseq.analysis.figures import plot_embedding_similarity, write_csv


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_run_arguments(parser)
    add_pair_arguments(parser)
    parser.add_argument(
        "--output", type=Path, required=True,
        help="CSV, one row per checkpoint; the per-pair rows go to OUTPUT with _pairs added",
    )
    parser.add_argument("--plot", type=Path, help="PNG of the mean similarity over updates")
    args, result = run_command(parser, run_embedding_similarity, argv)
    pairs_csv = args.output.with_name(f"{args.output.stem}_pairs{args.output.suffix}")
    write_csv(result.summary, args.output)
    write_csv(result.pairs, pairs_csv)
    print(f"wrote {args.output} and {pairs_csv} ({len(result.summary)} checkpoints, "
          f"{result.summary[0]['pairs']} pairs, {len(result.skipped)} skipped)")
    if args.plot:
        plot_embedding_similarity(result.summary, args.plot)
        print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
