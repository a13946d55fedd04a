"""Write GLUE test-set predictions (submission format: <COLUMN>.tsv with `index<TAB>prediction`)
from the best dev run of each task of one pre-training checkpoint.

Example:
    taco-predict-glue runs/glue --checkpoint TACO --output-dir submission
"""

import argparse
import sys
from pathlib import Path

from taco_fairseq.logs import configure_logging


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, help="the runner's --out directory")
    parser.add_argument("--checkpoint", help="checkpoint name (needed when the runs hold several)")
    parser.add_argument("--output-dir", type=Path, required=True)
    parser.add_argument("--cpu", action="store_true", help="predict on the CPU")
    args = parser.parse_args(argv)
    configure_logging()
    from taco_fairseq.glue.submission import best_runs, write_submission
    from taco_fairseq.glue.summary import collect_results

    try:
        best = best_runs(collect_results(args.runs), args.checkpoint)
        for task, result in best.items():
            print(f"{task}: best dev run {result['run_dir']}")
        for path in write_submission(best, args.output_dir, cpu=args.cpu):
            print(f"wrote {path}")
    except (FileNotFoundError, ValueError) as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    main()
