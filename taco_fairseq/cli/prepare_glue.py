"""Prepare GLUE tasks (original GLUE TSV layout) for fine-tuning with fairseq's
sentence_prediction task, with the SentencePiece model and dict.txt of a pre-training data-bin.

Writes DESTDIR/<TASK>/{input0,input1,label,index}/ and prep_info.json per task (layout in
taco_fairseq/glue/databin.py). Malformed rows (a missing or extra column, an unknown label)
stop the preparation with their line numbers unless --skip-malformed leaves them out (counted).

Example (the five GLUE tasks in ../shared, with the quick start's data-bin):

    taco-prepare-glue --glue-dir ../shared/data/glue \\
        --pretraining-data runs/quickstart/data-bin --destdir runs/quickstart/glue-bin
"""

import argparse
import os
import sys
from pathlib import Path

from taco_fairseq.cli.argtypes import positive_int
from taco_fairseq.glue.tasks import TASKS
from taco_fairseq.logs import configure_logging


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser; option names match
    :class:`~taco_fairseq.glue.databin.GluePrepOptions` fields."""
    parser = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--glue-dir", type=Path, required=True,
                        help="directory with one directory per GLUE task (RTE/, MNLI/, ...)")
    parser.add_argument("--pretraining-data", type=Path, required=True,
                        help="pre-training data-bin with sentencepiece.bpe.model and dict.txt")
    parser.add_argument("--checkpoint", type=Path, metavar="FILE",
                        help="the pre-training checkpoint to be fine-tuned: stop unless "
                        "--pretraining-data has its dict.txt and sentencepiece.bpe.model")
    parser.add_argument("--destdir", type=Path, required=True,
                        help="output directory; task T goes to DESTDIR/T")
    parser.add_argument("--tasks", nargs="+", default=[], metavar="TASK",
                        help=f"tasks to prepare, of {', '.join(TASKS)} (default: every task "
                        "directory found in --glue-dir)")
    parser.add_argument("--workers", type=positive_int, default=os.cpu_count() or 1,
                        help="SentencePiece encoding threads (default: all CPUs, %(default)s)")
    parser.add_argument("--skip-malformed", action="store_true",
                        help="leave malformed train/dev rows out (counted in prep_info.json) "
                        "instead of stopping; test rows are never skipped")
    parser.add_argument("--keep-text", action="store_true",
                        help="write the sentences as text into DESTDIR/<TASK>/text too")
    parser.add_argument("--force", action="store_true",
                        help="replace task output directories that are not empty")
    return parser


def main(argv=None) -> None:
    """Parse ``argv`` and prepare; exits with status 1 and a message on bad input."""
    args = build_parser().parse_args(argv)
    configure_logging()
    from taco_fairseq.glue.databin import GluePrepOptions, MalformedRowsError, prepare_glue

    options = GluePrepOptions(
        glue_dir=args.glue_dir, pretraining_data=args.pretraining_data,
        checkpoint=args.checkpoint, destdir=args.destdir,
        tasks=args.tasks, workers=args.workers, skip_malformed=args.skip_malformed,
        keep_text=args.keep_text, force=args.force,
    )
    try:
        infos = prepare_glue(options)
    except (FileNotFoundError, FileExistsError, MalformedRowsError, ValueError) as e:
        sys.exit(f"error: {e}")
    for task, info in infos.items():
        rows = ", ".join(f"{split} {s['rows']}" + (f" ({s['malformed_rows']} malformed left out)"
                                                   if s["malformed_rows"] else "")
                         for split, s in info["splits"].items())
        print(f"{task}: {rows} -> {args.destdir / task}")


if __name__ == "__main__":
    main()
