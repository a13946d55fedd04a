"""Export a fairseq TACO/MLM (or fine-tuned sentence_prediction) checkpoint to HuggingFace
transformers, and check on real text that it reproduces fairseq's token ids and logits.

A pre-training checkpoint becomes a RobertaForMaskedLM, a sentence_prediction one a
RobertaForSequenceClassification (regression for STS-B); the directory loads offline with
AutoModelForMaskedLM / AutoModelForSequenceClassification and AutoTokenizer.from_pretrained.
The export is kept only if the parity check passes; otherwise the command prints where the
outputs differ and exits with status 1. A save directory stands for its checkpoint_best.pt,
else checkpoint_last.pt, else model.pt; the command prints which file it exports. Needs
`pip install -e ".[hf]"`.

Examples (from the repository root):

    taco-export-hf checkpoints/taco_small/checkpoint_best.pt hf/taco_small
    taco-export-hf checkpoints/stsb/checkpoint_best.pt hf/taco_small-stsb \\
        --data data-bin/glue/STS-B --sentencepiece-model data-bin/books-wiki/sentencepiece.bpe.model
"""

import argparse
import sys
from pathlib import Path

from taco_fairseq.cli.argtypes import positive, positive_int
from taco_fairseq.cli.constants import tool_constant
from taco_fairseq.cli.extras import require_extras
from taco_fairseq.logs import configure_logging

#: Default check text: held-out Wikipedia articles and WikiText-2 test (../shared next to
#: the repository), when present.
DEFAULT_CHECK_TEXT = [
    Path(__file__).resolve().parents[3] / "shared" / "data" / "corpus" / relative
    for relative in ("wikipedia-en-2015-wikiextractor/AB.txt.xz", "wikitext-2-raw/wiki.test.raw.xz")
]


#: transformers, its tokenizers and safetensors write and check the export.
EXTRAS = ("hf",)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "checkpoint", type=Path,
        help="checkpoint file, or save directory: its checkpoint_best.pt, else checkpoint_last.pt, "
        "else model.pt (the command prints which)",
    )
    parser.add_argument("output_dir", type=Path, help="the transformers directory to write")
    parser.add_argument(
        "--data", type=Path, metavar="DIR",
        help="data-bin with the model's dict.txt (a GLUE task directory for sentence_prediction); "
        "default: the one recorded in the checkpoint",
    )
    parser.add_argument(
        "--sentencepiece-model", type=Path, metavar="FILE",
        help="default: DIR/sentencepiece.bpe.model of --data",
    )
    parser.add_argument(
        "--classification-head", metavar="NAME",
        help="head of a sentence_prediction checkpoint to export (default: its only head)",
    )
    parser.add_argument(
        "--check-text", type=Path, nargs="+", metavar="FILE",
        default=[p for p in DEFAULT_CHECK_TEXT if p.is_file()],
        help="plain/.xz/.gz text for the parity check (default: Wikipedia AB and WikiText-2 "
        "test of ../shared/data/corpus)",
    )
    parser.add_argument(
        "--check-lines", type=positive_int, default=1000, metavar="N",
        help="lines read from each check-text file; all are tokenized by both pipelines, the "
        "hardest cases also run through both models (default: %(default)s)",
    )
    parser.add_argument(
        "--atol", type=positive(float, zero=True),
        default=tool_constant("taco_fairseq.hf_export.parity", "DEFAULT_ATOL"),
        help="largest absolute logit difference accepted, fp32 (default: %(default)g)",
    )
    parser.add_argument("--force", action="store_true", help="replace an existing OUTPUT_DIR")
    return parser


def main(argv=None) -> None:
    """Parse ``argv`` and export; exits with status 1 and a message if the parity check fails
    or the input cannot be exported."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.check_text:
        parser.error("no check text found in ../shared/data/corpus; pass --check-text FILE")
    require_extras(parser.prog, *EXTRAS)
    configure_logging()
    from taco_fairseq.hf_export.check_text import read_check_lines
    from taco_fairseq.hf_export.export import export_to_transformers
    from taco_fairseq.hf_export.parity import ParityError
    from taco_fairseq.hub import CHECKPOINT_NAMES, resolve_checkpoint

    try:
        checkpoint = resolve_checkpoint(args.checkpoint)
        if args.checkpoint.is_dir():
            print(f"{args.checkpoint} is a save directory: exporting {checkpoint} (the first it "
                  f"holds of {', '.join(CHECKPOINT_NAMES)}; pass a checkpoint file to export "
                  "another)", flush=True)
        lines = read_check_lines(args.check_text, args.check_lines)
        report = export_to_transformers(
            checkpoint, args.output_dir, lines,
            data_dir=args.data, sentencepiece_model=args.sentencepiece_model,
            classification_head=args.classification_head, atol=args.atol, force=args.force,
        )
    except ParityError as e:
        sys.exit(f"error: the export does not reproduce fairseq, nothing was written: {e}")
    except (FileNotFoundError, FileExistsError, ValueError, KeyError) as e:
        sys.exit(f"error: {e}")
    print(
        f"wrote {args.output_dir} from {checkpoint}: {report.tokenized_texts} texts "
        f"({report.tokenized_ids} tokens) tokenized as fairseq does; {report.model_inputs} of "
        f"them through both models, largest logit difference {report.max_abs_diff:.3g} "
        f"(<= {args.atol:g})"
    )


if __name__ == "__main__":
    main()
