"""Prepare a fairseq data-bin directory for masked-LM (TACO) pre-training from raw text.

Reads plain, .xz or .gz UTF-8 text (WikiExtractor output, WikiText, Project Gutenberg books,
...), trains a SentencePiece model on the training text, encodes all splits with it and writes
their ids as fairseq datasets (what fairseq-preprocess --only-source would write), with
dict.txt, sentencepiece.bpe.model and prep_info.json. Layout: taco_fairseq/prep/pretraining.py;
how input files are read: taco_fairseq/prep/corpus.py.

Example (from the repository root, after `pip install -e .`):

    taco-prepare-data \\
        --train ../shared/data/corpus/wikipedia-en-2015-wikiextractor/AA.txt.xz \\
        --valid-fraction 0.005 --vocab-size 30522 --workers 8 --destdir data-bin/wiki-aa
"""

import argparse
import logging
import os
import sys
from pathlib import Path

from taco_fairseq.cli.argtypes import fraction, int_at_most, positive_int, seed
from taco_fairseq.cli.constants import tool_constant
from taco_fairseq.logs import configure_logging
from taco_fairseq.prep.corpus import check_input_file
from taco_fairseq.prep.destdir import DestdirInUseError

#: The closing hint suggests the largest of the plugin's models with at least this many
#: training tokens per weight of its encoder layers (about the compute-optimal ratio of
#: Hoffmann et al., 2022); a smaller corpus gets the smallest model.
TOKENS_PER_WEIGHT = 20
#: Exit status after a Ctrl-C (128 + SIGINT, as a shell reports it).
INTERRUPTED_STATUS = 130


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser; option names match
    :class:`~taco_fairseq.prep.pretraining.PrepareOptions` fields."""
    share = tool_constant("taco_fairseq.prep.pretraining", "VALID_DOCS_WARN_SHARE")
    parser = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    files = parser.add_argument_group("splits (a document is a file, or a <doc> of WikiExtractor)")
    files.add_argument(
        "--train", nargs="+", type=Path, required=True, metavar="FILE",
        help="training text; here and in --valid/--test each file once",
    )
    valid = files.add_mutually_exclusive_group(required=True)
    valid.add_argument(
        "--valid", nargs="+", type=Path, default=[], metavar="FILE", help="validation text"
    )
    valid.add_argument(
        "--valid-fraction",
        type=fraction(),
        metavar="F",
        help="hold out this share of the training text as the validation split: whole "
        "documents, a seeded sample over all of the input (--seed); e.g. 0.005",
    )
    valid.add_argument(
        "--valid-docs",
        type=positive_int,
        metavar="N",
        help="hold out the last N documents of the training input as the validation split "
        f"(warns when they hold more than {100 * share:.0f}%% of the text, e.g. "
        "whole books "
        "at the end of the input)",
    )
    files.add_argument(
        "--test", nargs="+", type=Path, default=[], metavar="FILE", help="optional test text"
    )
    files.add_argument(
        "--max-docs", type=positive_int, metavar="N", help="read at most N documents per file"
    )
    files.add_argument(
        "--max-lines",
        type=positive_int,
        metavar="N",
        help="read at most N non-empty lines per file",
    )
    files.add_argument(
        "--keep-gutenberg-boilerplate",
        action="store_true",
        help="keep the Project Gutenberg header and footer (license) of books",
    )

    spm_group = parser.add_argument_group("SentencePiece")
    spm_group.add_argument(
        "--vocab-size",
        type=positive_int,
        default=30522,
        help="pieces including <s> <pad> </s> <unk> (default: %(default)s, as BERT); "
        "fairseq adds <mask>",
    )
    spm_group.add_argument(
        "--model-type",
        choices=tool_constant("taco_fairseq.prep.vocabulary", "MODEL_TYPES"),
        default="unigram",
        help="SentencePiece algorithm (default: %(default)s, SentencePiece's default)",
    )
    spm_group.add_argument(
        "--character-coverage",
        type=fraction(include_one=True),
        default=0.9995,
        help="fraction of the characters the model covers, rarer ones become <unk> "
        "(default: %(default)s)",
    )
    spm_group.add_argument(
        "--input-sentence-size",
        type=positive_int,
        default=1_000_000,
        help="train on at most this many lines, a seeded uniform sample (bounds memory; "
        "default: %(default)s)",
    )
    spm_group.add_argument(
        "--seed", type=seed, default=1, help="seed of that sample and of --valid-fraction's"
    )
    spm_group.add_argument(
        "--num-threads",
        type=int_at_most(tool_constant("taco_fairseq.prep.vocabulary", "MAX_TRAINER_THREADS"),
                         "SentencePiece's limit"),
        default=tool_constant("taco_fairseq.prep.vocabulary", "TRAINER_THREADS"),
        help="SentencePiece's trainer threads; the model depends on this number, so it is "
        "fixed, not the CPU count: the same command (and the versions prep_info.json "
        "records) gives the same data-bin on any machine (default: %(default)s, "
        "SentencePiece's own)",
    )

    out = parser.add_argument_group("output")
    out.add_argument("--destdir", type=Path, required=True, help="the data-bin directory")
    out.add_argument(
        "--shards",
        type=positive_int,
        default=1,
        metavar="N",
        help="write N fairseq data shards DESTDIR/shard0 ... shard{N-1} (whole documents dealt "
        "out by size, each with dict.txt and the model; validation and test in shard0); train "
        "with --data DESTDIR/shard0:DESTDIR/shard1:..., one shard per epoch (default: "
        "%(default)s: DESTDIR is the data-bin)",
    )
    out.add_argument(
        "--keep-text",
        action="store_true",
        help="keep the clean text in DESTDIR/text",
    )
    out.add_argument(
        "--force", action="store_true", help="write into a non-empty DESTDIR, replacing the "
        "outputs of an earlier run (other files stay) once the new ones are complete: until "
        "then DESTDIR keeps its data-bin, also after an error or Ctrl-C",
    )

    speed = parser.add_argument_group("speed (the outputs do not depend on it)")
    speed.add_argument(
        "--workers",
        type=positive_int,
        default=os.cpu_count() or 1,
        help="processes reading the input files and SentencePiece's encoding threads "
        "(default: all CPUs, %(default)s)",
    )
    return parser


def suggested_arch(train_tokens: int) -> str:
    """The largest architecture of :data:`taco_fairseq.models.SIZES` with at least
    :data:`TOKENS_PER_WEIGHT` training tokens per weight of its encoder layers (embeddings not
    counted), or the smallest one."""
    from taco_fairseq.models import SIZES

    weights = {name: layers * (4 * hidden * hidden + 2 * hidden * ffn)
               for name, (layers, hidden, _, ffn) in SIZES.items()}
    fitting = [name for name in weights if TOKENS_PER_WEIGHT * weights[name] <= train_tokens]
    return max(fitting or [min(weights, key=weights.get)], key=weights.get)


def main(argv=None) -> None:
    """Parse ``argv`` and prepare the data; exits with status 1 and a message on bad input or
    when another taco-prepare-data writes ``--destdir``, with status
    :data:`INTERRUPTED_STATUS` and one line after a Ctrl-C (``--destdir`` left as it was)."""
    args = build_parser().parse_args(argv)
    configure_logging()
    for option, paths in (("--train", args.train), ("--valid", args.valid), ("--test", args.test)):
        for path in paths:
            try:
                check_input_file(path)
            except FileNotFoundError as e:
                sys.exit(f"error: {option}: {e}")
    from taco_fairseq.prep.pretraining import PrepareOptions, prepare_pretraining_data

    options = PrepareOptions(
        destdir=args.destdir,
        train=args.train,
        valid=args.valid,
        test=args.test,
        valid_docs=args.valid_docs,
        valid_fraction=args.valid_fraction,
        shards=args.shards,
        vocab_size=args.vocab_size,
        model_type=args.model_type,
        character_coverage=args.character_coverage,
        input_sentence_size=args.input_sentence_size,
        seed=args.seed,
        num_threads=args.num_threads,
        workers=args.workers,
        max_docs=args.max_docs,
        max_lines=args.max_lines,
        strip_gutenberg=not args.keep_gutenberg_boilerplate,
        keep_text=args.keep_text,
        force=args.force,
    )
    try:
        info = prepare_pretraining_data(options)
    except (FileNotFoundError, FileExistsError, ValueError, DestdirInUseError) as e:
        sys.exit(f"error: {e}")
    except KeyboardInterrupt:  # the build directory and the lock are gone already
        print(f"\ninterrupted (Ctrl-C): {args.destdir} is left as it was, nothing of this run "
              "is kept", file=sys.stderr, flush=True)
        logging.shutdown()
        # not sys.exit: the SentencePiece trainer may still run in its thread
        # (prep.vocabulary.interruptible), and the interpreter's shutdown aborts it
        os._exit(INTERRUPTED_STATUS)
    entries = {split: s["dataset_entries"] for split, s in info["splits"].items()}
    tokens = info["splits"]["train"]["tokens"]
    arch = suggested_arch(tokens)
    logging.getLogger(__name__).info(
        "wrote %s (dataset entries: %s); train with: fairseq-train %s --user-dir %s --task "
        "taco_masked_lm --criterion taco --arch %s, plus a recipe's optimizer and batch options "
        "(examples/taco/README.md); %s: the largest model with %d training tokens per encoder "
        "weight, else the smallest (here %.3g M tokens)",
        args.destdir, entries, info["data"], Path(__file__).resolve().parents[1],  # the plugin
        arch, arch, TOKENS_PER_WEIGHT, tokens / 1e6,
    )


if __name__ == "__main__":
    main()
