"""The paper's learning-dynamics figures for a set of pre-training runs: embedding similarity
and contextual score over updates, intra- vs inter-context similarity per run, and the online
diagnostics of the training logs.

Writes into --output-dir: contextual_score.csv/.png, intra_inter.png,
embedding_similarity.csv/.png, embedding_similarity_pairs.csv and, for runs with a json
training log (RUN/train.log, or --logs), online_context_similarity.png.

Example:
    taco-analyze-dynamics runs/demo/mlm runs/demo/taco \\
        --corpus ../shared/data/corpus/wikipedia-en-2015-wikiextractor/AB.txt.xz \\
        --max-lines 3000 --wordsim ../shared/data/wordsim353/combined.tsv \\
        --output-dir runs/demo/figures
"""

from pathlib import Path

from taco_fairseq.analysis.training_log import parse_json_log
from taco_fairseq.cli import analysis_options as options

#: sentencex splits the corpus of the contextual score; matplotlib draws the figures.
EXTRAS = ("analysis", "plot")


def main(argv=None):
    parser = options.analysis_parser(
        __doc__, options.add_corpus_arguments, options.add_pair_arguments)
    parser.add_argument(
        "--logs", nargs="+", type=Path, metavar="LOG",
        help="fairseq --log-format json logs, one per RUN in order (default: RUN/train.log "
        "where it exists)",
    )
    parser.add_argument("--output-dir", type=Path, required=True)
    args, (logs, scores, similarity) = options.run_command(parser, _analyses, argv,
                                                           extras=EXTRAS)
    from taco_fairseq.analysis import figures

    out = args.output_dir
    writes = [
        (figures.write_csv, scores, "contextual_score.csv"),
        (figures.plot_contextual_score, scores, "contextual_score.png"),
        (figures.plot_intra_inter, scores, "intra_inter.png"),
        (figures.write_csv, similarity.summary, "embedding_similarity.csv"),
        (figures.write_csv, similarity.pairs, "embedding_similarity_pairs.csv"),
        (figures.plot_embedding_similarity, similarity.summary, "embedding_similarity.png"),
    ]
    if logs:
        writes.append((figures.plot_online_diagnostics, logs, "online_context_similarity.png"))
    else:
        print("no training log (RUN/train.log, or --logs; under fairseq-hydra-train "
              "hydra_train.log): online_context_similarity.png is not drawn")
    for write, data, name in writes:
        options.write_output(write, data, out / name)


def _analyses(args):
    logs = _read_logs(args.runs, args.logs)
    # first: a missing --wordsim is named before the contextual score runs
    similarity = options.run_embedding_similarity(args)
    return logs, options.run_contextual_score(args), similarity


def _read_logs(runs, logs):
    """run name -> parsed json records, for the runs that have a log.

    Raises:
        ValueError: if --logs does not give one log per run.
        FileNotFoundError: for a missing --logs file.
    """
    from taco_fairseq.analysis.checkpoints import run_name

    if logs is None:
        pairs = [(run, Path(run) / "train.log") for run in runs]
        pairs = [(run, log) for run, log in pairs if log.is_file()]
    elif len(logs) != len(runs):
        raise ValueError(f"--logs: give one log per run ({len(runs)}), got {len(logs)}")
    else:
        pairs = list(zip(runs, logs))
    records = {}
    for run, log in pairs:
        if not log.is_file():
            raise FileNotFoundError(f"--logs: no such file: {log}")
        with log.open(encoding="utf-8") as lines:
            records[run_name(run)] = parse_json_log(lines)
    return records


if __name__ == "__main__":
    main()
