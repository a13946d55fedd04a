"""Print a table of metrics over updates from a fairseq ``--log-format json`` log.

Example:
    taco-analyze-log runs/quickstart/train.log
"""

import argparse
from pathlib import Path

from taco_fairseq.analysis.training_log import format_table, parse_json_log

DEFAULT_METRICS = ("mlm_loss", "tc_loss", "tc_accuracy")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path, help="fairseq log file (written with --log-file)")
    parser.add_argument(
        "--metrics", nargs="+",
        help=f"columns to print (default: those of {', '.join(DEFAULT_METRICS)} the log has, "
        "with the valid_ or train_ prefix of --kind valid or train)",
    )
    parser.add_argument(
        "--kind", default="train_inner", choices=["train_inner", "train", "valid"],
        help="which records: per log interval, per epoch or validation (default: %(default)s)",
    )
    args = parser.parse_args(argv)
    if not args.log.is_file():
        parser.error(f"no such log file: {args.log}")
    with args.log.open(encoding="utf-8") as lines:
        records = parse_json_log(lines)
    if not any(r["kind"] == args.kind for r in records):
        parser.error(
            f"{args.log} has no {args.kind} json records: the run logged none (e.g. it had "
            "already reached --max-update, or ran fewer updates than --log-interval) or it was "
            "not trained with --log-format json"
        )
    logged = sorted({key for r in records if r["kind"] == args.kind for key in r} - {"kind"})
    unknown = [m for m in args.metrics or () if m not in logged]
    if unknown:
        parser.error(f"--metrics {' '.join(unknown)}: not in the {args.kind} records of "
                     f"{args.log}; it has {', '.join(logged)}")
    prefix = "" if args.kind == "train_inner" else f"{args.kind}_"  # fairseq's, as valid_loss
    metrics = args.metrics or [prefix + m for m in DEFAULT_METRICS if prefix + m in logged]
    print(format_table(records, metrics, args.kind))


if __name__ == "__main__":
    main()
