"""Command-line options shared by the analysis commands (``taco-analyze-context``,
``taco-analyze-wordsim``, ``taco-analyze-dynamics``, ``taco-analyze-probes``): their parser, its
option groups, the parse-and-run step and the analyses they run from parsed options. The
analyses (torch, fairseq) are imported when they run, not for ``--help``."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from taco_fairseq.cli.argtypes import positive_int
from taco_fairseq.cli.constants import tool_constant
from taco_fairseq.cli.extras import require_extras
from taco_fairseq.logs import configure_logging

if TYPE_CHECKING:
    from taco_fairseq.analysis.wordsim import EmbeddingSimilarity

logger = logging.getLogger(__name__)

#: Pairs measured when none of --pairs/--top/--sample is given: the paper's 20 sampled pairs.
DEFAULT_SAMPLE = 20


def analysis_parser(description: str, *option_groups) -> argparse.ArgumentParser:
    """The parser of an analysis command: ``description`` (its module docstring, shown as
    written), the runs, ``--data-bin`` and ``--device`` (:func:`add_run_arguments`), then the
    options each of ``option_groups`` adds (e.g. :func:`add_corpus_arguments`)."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(parser)
    for add_options in option_groups:
        add_options(parser)
    return parser


def output_arguments(output_help: str, plot_help: str):
    """An option group for :func:`analysis_parser`: ``--output`` (a CSV, required) and
    ``--plot`` (a PNG, optional), with these helps."""
    def add_output_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--output", type=Path, required=True, help=output_help)
        parser.add_argument("--plot", type=Path, help=plot_help)
    return add_output_arguments


def write_output(write, data, path) -> None:
    """``write(data, path)`` and print ``wrote PATH``; nothing where ``path`` is None (an
    output that was not asked for)."""
    if path is not None:
        write(data, path)
        print(f"wrote {path}")


def run_command(parser: argparse.ArgumentParser, analysis, argv=None, *, extras):
    """Parse ``argv``, check that the command's ``extras`` are installed (exits naming them:
    :func:`~taco_fairseq.cli.extras.require_extras`), set up logging, fill in the default
    ``--device`` and return ``analysis(args)``; a missing file or bad input
    (``FileNotFoundError``, ``ValueError``) exits with the usage and the message."""
    args = parser.parse_args(argv)
    require_extras(parser.prog, *extras)
    configure_logging()
    if args.device is None:
        from taco_fairseq.analysis.checkpoints import default_device

        args.device = default_device()
    try:
        return args, analysis(args)
    except (FileNotFoundError, ValueError) as e:
        parser.error(str(e))


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """Positional runs, ``--data-bin``, ``--device``."""
    parser.add_argument(
        "runs", nargs="+", type=Path, metavar="RUN",
        help="a fairseq --save-dir, its parent (RUN/checkpoints) or a checkpoint file; every "
        "checkpoint*.pt is measured, one per update count",
    )
    parser.add_argument(
        "--data-bin", type=Path,
        help="the data-bin the runs were trained on (dict.txt, sentencepiece.bpe.model); "
        "default: the one in each checkpoint's config",
    )
    parser.add_argument("--device", help="default: cuda when a GPU is visible, else cpu")


def add_corpus_arguments(parser: argparse.ArgumentParser) -> None:
    """The text and sampling options of the contextual score."""
    group = parser.add_argument_group("contextual score")
    group.add_argument(
        "--corpus", nargs="+", type=Path, required=True, metavar="FILE",
        help="raw text (plain, .xz, .gz; WikiExtractor and Gutenberg files are cleaned), "
        "ideally not seen in pre-training",
    )
    group.add_argument(
        "--sentences", type=positive_int, default=2000,
        help="sentences sampled from the corpus (default: %(default)s)",
    )
    group.add_argument(
        "--sentence-mode", choices=tool_constant("taco_fairseq.analysis.sentences",
                                                 "SENTENCE_MODES"), default="split",
        help="split: documents cut into sentences by sentencex (lines are paragraphs or "
        "wrapped text); line: one sentence per line (default: %(default)s)",
    )
    group.add_argument("--language", default="en", help="sentencex language (default: en)")
    group.add_argument(
        "--max-lines", type=positive_int, help="read at most N non-empty lines per file"
    )
    group.add_argument(
        "--batch-size", type=int, default=64,
        help="sentences per forward pass; inter-context partners come from the other "
        "sentences of the batch (default: %(default)s)",
    )
    group.add_argument("--seed", type=int, default=1, help="sentence sample and pairs")


def add_pair_arguments(parser: argparse.ArgumentParser) -> None:
    """The WordSim353 file and the pair selection of the embedding similarity."""
    group = parser.add_argument_group("embedding similarity")
    group.add_argument(
        "--wordsim", type=Path,
        help="WordSim353 file (word1<TAB>word2<TAB>score, a header line), e.g. "
        "../shared/data/wordsim353/combined.tsv; the pairs to choose from, needed unless "
        "--pairs is given (then optional: it only fills in the human scores)",
    )
    choice = group.add_mutually_exclusive_group()
    choice.add_argument("--pairs", type=Path, help="a file of 'word1 word2' lines to measure")
    choice.add_argument(
        "--top", type=positive_int,
        help="the N pairs of highest human score (all, with a warning, if there are fewer)",
    )
    choice.add_argument(
        "--sample", type=positive_int,
        help=f"a seeded sample of N pairs (the default, N={DEFAULT_SAMPLE}, as the paper; all, "
        "with a warning, if there are fewer)",
    )
    choice.add_argument("--all-pairs", action="store_true", help="every pair of the file")
    group.add_argument("--pair-seed", type=int, default=1, help="seed of --sample (default 1)")


def run_contextual_score(args):
    """:func:`~.contextual_score.score_checkpoints` of every checkpoint of ``args.runs`` on
    sentences sampled from ``args.corpus``."""
    from taco_fairseq.analysis.checkpoints import iter_run_checkpoints
    from taco_fairseq.analysis.contextual_score import score_checkpoints
    from taco_fairseq.analysis.sentences import sample_sentences

    sentences = sample_sentences(
        args.corpus, args.sentences, args.seed, args.sentence_mode, args.language,
        args.max_lines,
    )
    logger.info("contextual score on %d sentences of %s", len(sentences),
                " ".join(map(str, args.corpus)))
    checkpoints = iter_run_checkpoints(args.runs, args.data_bin, args.device)
    return score_checkpoints(checkpoints, sentences, args.batch_size, args.seed, progress=True)


def run_embedding_similarity(args) -> EmbeddingSimilarity:
    """:func:`~.wordsim.embedding_similarity` of every checkpoint of ``args.runs``; logs the
    skipped pairs, and warns when ``--top``/``--sample`` asks for more pairs than are available
    (all of them are measured then).

    Raises:
        ValueError: if neither ``--wordsim`` nor ``--pairs`` is given (``--wordsim`` is only
            needed to choose pairs; with ``--pairs`` it just fills in the human scores).
    """
    from taco_fairseq.analysis.checkpoints import iter_run_checkpoints
    from taco_fairseq.analysis.wordsim import (
        distinct_pairs,
        embedding_similarity,
        load_wordsim353,
        read_pair_list,
    )

    if args.pairs:
        rated = distinct_pairs(load_wordsim353(args.wordsim)) if args.wordsim else ()
        pairs, top, sample = read_pair_list(args.pairs, rated), None, None
    elif args.wordsim is None:
        raise ValueError(
            "--wordsim FILE is needed: the pairs of --sample (the default), --top and "
            "--all-pairs are chosen from it; give it, or your own pairs with --pairs FILE"
        )
    else:
        pairs, top = distinct_pairs(load_wordsim353(args.wordsim)), args.top
        sample = None if args.top or args.all_pairs else args.sample or DEFAULT_SAMPLE
    checkpoints = iter_run_checkpoints(args.runs, args.data_bin, args.device)
    result = embedding_similarity(checkpoints, pairs, top, sample, args.pair_seed)
    for pair in result.skipped:
        logger.warning("skipped %s / %s: a word has <unk> pieces", pair.word1, pair.word2)
    measured = result.summary[0]["pairs"]
    if measured < (top or sample or 0):
        option = f"--top {top}" if top else f"--sample {sample}" + (
            "" if args.sample else " (the default)")
        logger.warning(
            "%s: only %d word pairs are available (%d distinct pairs in %s, %d of them skipped "
            "for unknown words); all %d are measured", option, measured, len(pairs),
            args.wordsim, len(result.skipped), measured,
        )
    logger.info("%d pairs measured, %d skipped for unknown words",
                measured, len(result.skipped))
    return result
