"""Download the official GLUE data (original TSV layout) of the paper's eight tasks.

Needs internet access. Example:

    taco-download-glue --data-dir glue_data --tasks MNLI QNLI QQP
    taco-prepare-glue --glue-dir glue_data --pretraining-data DATA_BIN --destdir ...
"""

import argparse
import sys
from pathlib import Path

from taco_fairseq.glue.download import download_glue
from taco_fairseq.glue.tasks import TASKS
from taco_fairseq.logs import configure_logging


def main(argv=None) -> None:
    """Parse ``argv`` and download; exits with status 1 and a message on failure."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-dir", type=Path, required=True, help="where <TASK>/ goes")
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), metavar="TASK",
                        help="GLUE tasks (default: all eight: %(default)s)")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds per connection attempt (default: %(default)s)")
    args = parser.parse_args(argv)
    configure_logging()
    try:
        for path in download_glue(args.data_dir, args.tasks, timeout=args.timeout):
            print(f"downloaded {path}")
    except (RuntimeError, FileExistsError, ValueError) as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    main()
