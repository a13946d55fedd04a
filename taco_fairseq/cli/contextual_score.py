"""Contextual score of pre-training checkpoints: intra- and inter-context similarity of
last-layer states on raw text (paper §2.2, appendix A.3 and Table 9), as a CSV and a PNG.

Example:
    taco-analyze-context runs/demo/taco runs/demo/mlm \\
        --corpus ../shared/data/corpus/wikipedia-en-2015-wikiextractor/AB.txt.xz \\
        --max-lines 3000 --sentences 2000 --output runs/demo/contextual_score.csv \\
        --plot runs/demo/contextual_score.png
"""

from taco_fairseq.cli import analysis_options as options

#: sentencex splits the corpus; matplotlib writes the CSV and the figure (analysis.figures).
EXTRAS = ("analysis", "plot")


def main(argv=None):
    parser = options.analysis_parser(
        __doc__, options.add_corpus_arguments,
        options.output_arguments("CSV, one row per checkpoint", "PNG of the scores over updates"))
    args, rows = options.run_command(parser, options.run_contextual_score, argv,
                                     extras=EXTRAS)
    from taco_fairseq.analysis.figures import plot_contextual_score, write_csv

    write_csv(rows, args.output)
    print(f"wrote {args.output} ({len(rows)} checkpoints)")
    options.write_output(plot_contextual_score, rows, args.plot)


if __name__ == "__main__":
    main()
