"""What the validation metric ``neighbour_share`` costs: a validation pass of the ``mlm``
criterion with it and with ``--no-neighbour-share`` on the same model and batches.

    python -m benchmarks.neighbour_share_timing DATA-BIN [--tokens-per-sample 128]
        [--batch-size 32] [--batches 20] [--repeats 5]

Each batch goes through both criteria ``repeats`` times, alternating which goes first (eval
mode, no gradient, as fairseq's validation); the report is the median seconds per batch of
each and their ratio. A development tool (docs/performance.md), not installed with the package.
"""

import argparse
import statistics
import time
from pathlib import Path
from typing import NamedTuple

import torch

USER_DIR = Path(__file__).resolve().parents[1] / "taco_fairseq"


class ValidationTimes(NamedTuple):
    """Median seconds per validation batch with the metric (``with_s``) and without
    (``without_s``), over ``batches`` batches."""

    with_s: float
    without_s: float
    batches: int


def _criterion(data: Path, arch: str, tokens: int, *extra):
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    argv = [str(data), "--user-dir", str(USER_DIR), "--task", "masked_lm", "--criterion", "mlm",
            "--arch", arch, "--tokens-per-sample", str(tokens), "--max-positions", str(tokens),
            "--sample-break-mode", "none", "--cpu", "--seed", "1", *extra]
    cfg = convert_namespace_to_omegaconf(
        options.parse_args_and_arch(options.get_training_parser(), argv))
    task = tasks.setup_task(cfg.task)
    task.load_dataset("valid")
    return task, task.build_criterion(cfg.criterion), cfg


def time_validation(data: Path, arch: str = "roberta_tiny", tokens: int = 128,
                    batch_size: int = 32, batches: int = 20, repeats: int = 5) -> ValidationTimes:
    """Time the ``mlm`` criterion's validation forward with and without the metric.

    Raises:
        ValueError: ``batches`` or ``repeats`` < 1, or the valid split has no batch.
    """
    if batches < 1 or repeats < 1:
        raise ValueError(f"need batches and repeats >= 1, got {batches} and {repeats}")
    task, with_metric, cfg = _criterion(data, arch, tokens)
    _, without_metric, _ = _criterion(data, arch, tokens, "--no-neighbour-share")
    model = task.build_model(cfg.model).eval()
    iterator = task.get_batch_iterator(task.dataset("valid"), max_sentences=batch_size,
                                       seed=1).next_epoch_itr(shuffle=False)
    samples = [sample for _, sample in zip(range(batches), iterator)]
    if not samples:
        raise ValueError(f"{data}: the valid split has no batch")
    criteria = {"with": with_metric, "without": without_metric}
    times = {name: [] for name in criteria}
    with torch.no_grad():
        for sample in samples:
            for repeat in range(repeats):
                order = list(criteria) if repeat % 2 == 0 else list(criteria)[::-1]
                for name in order:
                    start = time.perf_counter()
                    criteria[name](model, sample)
                    times[name].append(time.perf_counter() - start)
    return ValidationTimes(statistics.median(times["with"]), statistics.median(times["without"]),
                           len(samples))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", type=Path, help="a pre-training data-bin")
    parser.add_argument("--arch", default="roberta_tiny")
    parser.add_argument("--tokens-per-sample", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    result = time_validation(args.data, args.arch, args.tokens_per_sample, args.batch_size,
                             args.batches, args.repeats)
    print(f"{args.arch}, {args.batch_size} x {args.tokens_per_sample} tokens, torch threads "
          f"{torch.get_num_threads()}, {result.batches} validation batches: "
          f"{result.with_s * 1e3:.1f} ms per batch with neighbour_share, "
          f"{result.without_s * 1e3:.1f} ms without (× {result.with_s / result.without_s:.3f})")


if __name__ == "__main__":
    main()
