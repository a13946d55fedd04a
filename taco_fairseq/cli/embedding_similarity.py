"""Embedding similarity of WordSim353 word pairs across pre-training checkpoints: cosine
similarity of the static (token) embeddings, multi-piece words averaged (paper §2.2, Figure
3(a)), as CSVs (per checkpoint; per checkpoint and pair) and a PNG.

Example:
    taco-analyze-wordsim runs/demo/taco runs/demo/mlm \\
        --wordsim ../shared/data/wordsim353/combined.tsv --sample 20 \\
        --output runs/demo/embedding_similarity.csv --plot runs/demo/embedding_similarity.png
"""

from taco_fairseq.cli import analysis_options as options

#: matplotlib writes the CSVs and the figure (analysis.figures).
EXTRAS = ("plot",)


def main(argv=None):
    parser = options.analysis_parser(
        __doc__, options.add_pair_arguments,
        options.output_arguments(
            "CSV, one row per checkpoint; the per-pair rows go to OUTPUT with _pairs added",
            "PNG of the mean similarity over updates"))
    args, result = options.run_command(parser, options.run_embedding_similarity, argv,
                                       extras=EXTRAS)
    from taco_fairseq.analysis.figures import plot_embedding_similarity, write_csv

    pairs_csv = args.output.with_name(f"{args.output.stem}_pairs{args.output.suffix}")
    write_csv(result.summary, args.output)
    write_csv(result.pairs, pairs_csv)
    print(f"wrote {args.output} and {pairs_csv} ({len(result.summary)} checkpoints, "
          f"{result.summary[0]['pairs']} pairs, {len(result.skipped)} skipped)")
    options.write_output(plot_embedding_similarity, result.summary, args.plot)


if __name__ == "__main__":
    main()
