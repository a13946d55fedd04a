"""Frozen-encoder probes of pre-training checkpoints: linear probes on prepared GLUE tasks (mean
of the last layer, logistic/ridge regression with cross-validated regularization, the official
dev metric), the unsupervised STS-B (cosine of mean-pooled states), with --conllu-train and
--conllu-test a part-of-speech probe of every layer (a word's first piece, gold UPOS tags of a
CoNLL-U treebank) and, with --corpus, the attention the model puts on neighbouring tokens; one
CSV row per checkpoint (docs/analysis.md).

Example:
    taco-analyze-probes runs/demo/taco runs/demo/mlm --glue-data data-bin/glue \\
        --conllu-train ../shared/data/ud-english-ewt/en_ewt-ud-dev.conllu \\
        --conllu-test ../shared/data/ud-english-ewt/en_ewt-ud-test.conllu \\
        --corpus ../shared/data/corpus/wikipedia-en-2015-wikiextractor/AB.txt.xz \\
        --max-lines 3000 --output runs/demo/probes.csv
"""

import argparse
import logging
import time
from pathlib import Path

from taco_fairseq.cli.analysis_options import analysis_parser, run_command
from taco_fairseq.cli.argtypes import positive_int
from taco_fairseq.cli.constants import tool_constant

logger = logging.getLogger(__name__)

#: sentencex splits the --corpus text; matplotlib writes the CSV (analysis.figures).
EXTRAS = ("analysis", "plot")


def build_parser() -> argparse.ArgumentParser:
    parser = analysis_parser(__doc__)
    parser.add_argument("--glue-data", type=Path, required=True,
                        help="GLUE tasks prepared with the runs' data-bin (taco-prepare-glue)")
    parser.add_argument("--tasks", nargs="+", metavar="TASK",
                        default=list(tool_constant("taco_fairseq.glue.probes", "PROBE_TASKS")),
                        help="tasks probed; with STS-B also the unsupervised STS-B (default: "
                        "%(default)s)")
    parser.add_argument("--probe-max-train", type=positive_int, metavar="N",
                        help="at most N training examples per task, a seeded uniform "
                        "subsample (default: all)")
    parser.add_argument("--conllu-train", type=Path, metavar="CONLLU",
                        help="a CoNLL-U treebank the part-of-speech probe is trained on, with "
                        "--conllu-test (default: no part-of-speech probe)")
    parser.add_argument("--conllu-test", type=Path, metavar="CONLLU",
                        help="the CoNLL-U treebank it is scored on")
    parser.add_argument("--pos-window", type=positive_int, metavar="N",
                        help="positions per sequence the part-of-speech probe encodes, <s> and "
                        "</s> included (>= 3): a sentence longer than N - 2 pieces is encoded "
                        "in overlapping windows; give the block length the runs were trained "
                        "on (--tokens-per-sample) when it is below the model's positions "
                        "(default: the model's --max-positions)")
    parser.add_argument("--corpus", nargs="+", type=Path, default=[], metavar="FILE",
                        help="held-out raw text for the neighbour attention (default: not "
                        "measured)")
    parser.add_argument("--sentences", type=positive_int, default=2000,
                        help="sentences sampled from --corpus (default: %(default)s)")
    parser.add_argument("--max-lines", type=positive_int, help="lines read per --corpus file")
    parser.add_argument("--output", type=Path, required=True,
                        help="CSV, one row per checkpoint")
    return parser


def run_probes(args) -> list:
    """The probes (and the neighbour attention with ``--corpus``) of every checkpoint of
    ``args.runs``: one row each, ``run``, ``checkpoint``, ``updates``, the measures and
    ``seconds`` (wall time of the checkpoint)."""
    from taco_fairseq.analysis.checkpoints import iter_run_checkpoints
    from taco_fairseq.analysis.contextual_score import encode_sentences
    from taco_fairseq.analysis.pos_probe import PosProbeData, check_window, pos_probe
    from taco_fairseq.analysis.sentences import sample_sentences
    from taco_fairseq.glue.probes import ProbeOptions, neighbour_attention, probe_tasks
    from taco_fairseq.glue.tasks import get_tasks

    tasks = tuple(t.name for t in get_tasks(args.tasks))
    options = ProbeOptions(tasks=tasks, max_train=args.probe_max_train)
    if (args.conllu_train is None) != (args.conllu_test is None):
        raise ValueError("--conllu-train and --conllu-test go together: the part-of-speech "
                         "probe is trained on one treebank and scored on the other")
    if args.pos_window is not None:
        if args.conllu_train is None:
            raise ValueError("--pos-window without --conllu-train/--conllu-test: there is no "
                             "part-of-speech probe to window")
        check_window(args.pos_window)
    treebank = (None if args.conllu_train is None
                else PosProbeData.read(args.conllu_train, args.conllu_test))
    sentences = (sample_sentences(args.corpus, args.sentences, seed=1, max_lines=args.max_lines)
                 if args.corpus else None)
    rows = []
    for checkpoint in iter_run_checkpoints(args.runs, args.data_bin, args.device):
        started = time.perf_counter()
        model, dictionary = checkpoint.hub.model, checkpoint.hub.task.source_dictionary
        row = {"run": checkpoint.run, "checkpoint": str(checkpoint.path),
               "updates": checkpoint.updates}
        row.update(probe_tasks(checkpoint, args.glue_data, options))
        if treebank is not None:
            row.update(pos_probe(checkpoint.hub, treebank, window=args.pos_window))
        if sentences is not None:
            row.update(neighbour_attention(
                model, encode_sentences(checkpoint.hub, sentences).tokens, dictionary))
        row["seconds"] = round(time.perf_counter() - started, 1)
        logger.info("%s (%d updates): probe average %.2f in %.0f s", checkpoint.run,
                    checkpoint.updates, row.get("probe_average", float("nan")), row["seconds"])
        rows.append(row)
    return rows


def main(argv=None):
    args, rows = run_command(build_parser(), run_probes, argv, extras=EXTRAS)
    from taco_fairseq.analysis.figures import write_csv

    write_csv(rows, args.output)
    print(f"wrote {args.output} ({len(rows)} checkpoints)")


if __name__ == "__main__":
    main()
