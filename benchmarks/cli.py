"""Benchmark TACO against masked-LM pre-training and print a markdown report.

Runs `--task taco_masked_lm --criterion taco` and `--task masked_lm --criterion masked_lm`
through fairseq's Trainer on the same binarized real text, model and batches, interleaving their
updates, at the tiny and small shapes (add `base` with --shapes); times the data loader's
collate with and without TACO's sampling, and the TC loss alone (fast implementation against the
[anchors x K x hidden] gather) over sizes, and checks the performance targets (--target-*).
See docs/performance.md.

A development tool of the repository, not installed with the package. Example (from the
repository root; prepares runs/benchmark/data-bin from ../shared on first use):

    python -m benchmarks --output runs/benchmark/report.md
    python -m benchmarks --output runs/benchmark/report.md  # the same
"""

import argparse
import dataclasses
import logging
import shlex
import sys
from pathlib import Path

from tqdm import tqdm

from .report import TARGET_SHAPES, TIME_RATIO_TARGETS, Targets, markdown
from .suite import BenchmarkOptions, run_benchmark
from .training_runs import SHAPES, ensure_data

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TEXT = REPO.parent / "shared/data/corpus/wikipedia-en-2015-wikiextractor/AA.txt.xz"


def _int_at_least(minimum: int):
    """An argparse type: an integer >= ``minimum``."""

    def parse(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be an integer >= {minimum}, got {text}")
        return value

    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    data = parser.add_argument_group("data")
    data.add_argument("--data", type=Path,
                      help="a fairseq data-bin to train on (default: prepare one from --text)")
    data.add_argument("--text", type=Path, nargs="+", default=[DEFAULT_TEXT],
                      help="raw text for the prepared data-bin (default: Wikipedia AA of "
                      "../shared/data/corpus next to the checkout)")
    data.add_argument("--max-lines", type=_int_at_least(1), default=10000,
                      help="lines of each --text file to use (default: %(default)s)")
    data.add_argument("--vocab-size", type=_int_at_least(1), default=30522,
                      help="SentencePiece vocabulary of the prepared data-bin (default: "
                      "%(default)s, as the paper)")
    data.add_argument("--workdir", type=Path, default=REPO / "runs/benchmark",
                      help="where the prepared data-bin is kept (default: %(default)s)")
    runs = parser.add_argument_group("updates")
    runs.add_argument("--shapes", nargs="+", choices=sorted(SHAPES), default=["tiny", "small"],
                      help="model and batch shapes (default: tiny small); base is slow on a CPU")
    runs.add_argument("--steps", type=_int_at_least(1), default=20,
                      help="measured updates per criterion and shape (default: %(default)s)")
    runs.add_argument("--base-steps", type=_int_at_least(1), default=5,
                      help="measured updates per criterion at the base shape (default: "
                      "%(default)s)")
    runs.add_argument("--warmup", type=_int_at_least(0), default=2,
                      help="updates per criterion before measuring (default: %(default)s)")
    runs.add_argument("--threads", type=_int_at_least(1),
                      help="torch threads per process (default: torch's default)")
    runs.add_argument("--device", choices=["cpu", "cuda"],
                      help="default: cuda when available, else cpu")
    runs.add_argument("--fp16", action="store_true", help="train with --fp16 (GPU)")
    runs.add_argument("--collate-batches", type=_int_at_least(1), default=20,
                      help="batches whose collate is timed (default: %(default)s)")
    tc = parser.add_argument_group("TC loss alone")
    tc.add_argument("--tc-tokens", type=_int_at_least(1), nargs="+",
                    default=[1024, 2048, 4096, 8192],
                    help="token counts at K = --tc-fixed-negatives, multiples of 256 (default: "
                    "1024 2048 4096 8192)")
    tc.add_argument("--tc-negatives", type=_int_at_least(1), nargs="+", default=[10, 25, 50, 100],
                    help="K values at --tc-fixed-tokens tokens (default: 10 25 50 100)")
    tc.add_argument("--tc-fixed-negatives", type=_int_at_least(1), default=50,
                    help="K of the token sweep (default: %(default)s)")
    tc.add_argument("--tc-fixed-tokens", type=_int_at_least(1), default=4096,
                    help="tokens of the K sweep (default: %(default)s)")
    tc.add_argument("--tc-hidden", type=_int_at_least(1), default=512,
                    help="vector size (default: %(default)s, BERT-small)")
    tc.add_argument("--tc-repeats", type=_int_at_least(1), default=5,
                    help="timings per implementation and size (default: %(default)s)")
    shapes = ", ".join(f"{shape} on {device}" for device, shape in TARGET_SHAPES.items())
    targets = parser.add_argument_group(
        "targets", f"checked in the report's last table; ratios are taco / masked_lm, at the "
        f"model shape {shapes}")
    default = Targets()
    targets.add_argument("--target-time-ratio", type=float,
                         help="largest ratio of the median update times (default: "
                         + ", ".join(f"{v} on {d}" for d, v in TIME_RATIO_TARGETS.items()) + ")")
    targets.add_argument("--target-memory-ratio", type=float, default=default.memory_ratio,
                         help="largest ratio of the peak memory (default: %(default)s)")
    targets.add_argument("--target-speed-ratio", type=float, default=default.speed_ratio,
                         help="smallest ratio of the tokens per second (default: %(default)s)")
    targets.add_argument("--target-sampling-share", type=float, default=default.sampling_share,
                         help="largest share of the update time in TACO's sampling (default: "
                         "%(default)s)")
    targets.add_argument("--target-growth-exponent", type=float,
                         default=default.growth_exponent,
                         help="largest log-log slope of the TC loss time over tokens or K + 1 "
                         "(default: %(default)s, between linear and quadratic)")
    parser.add_argument("--output", type=Path, help="also write the report to this file")
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s | %(name)s | %(message)s")
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    try:
        options = BenchmarkOptions(
            data=args.data, shapes=args.shapes, steps=args.steps, base_steps=args.base_steps,
            warmup=args.warmup, threads=args.threads, device=device, fp16=args.fp16,
            collate_batches=args.collate_batches, tc_tokens=args.tc_tokens,
            tc_negatives=args.tc_negatives, tc_fixed_negatives=args.tc_fixed_negatives,
            tc_fixed_tokens=args.tc_fixed_tokens, tc_hidden=args.tc_hidden,
            tc_repeats=args.tc_repeats,
        )
        if options.data is None:
            data = ensure_data(args.workdir / "data-bin", args.text, args.max_lines,
                               args.vocab_size)
            options = dataclasses.replace(options, data=data)
    except (ValueError, FileNotFoundError) as error:
        parser.error(str(error))
    with tqdm(desc="benchmark", unit="step", file=sys.stderr) as bar:

        def progress(line):
            bar.update()
            bar.set_postfix_str(line)

        result = run_benchmark(options, progress)
    command = "python -m benchmarks " + " ".join(
        shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv)
    )
    targets = Targets(args.target_time_ratio, args.target_memory_ratio, args.target_speed_ratio,
                      args.target_sampling_share, args.target_growth_exponent)
    report = markdown(result, command.strip(), targets)
    print(report, end="")
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
