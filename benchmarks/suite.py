"""The whole benchmark: updates of both criteria per shape, collate times, the TC loss alone."""

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

import torch

from .collate_timing import CollateStats, time_session_collate
from .report import environment, machine_load
from .tc_loss_timing import SEQ_LEN, TCLossTiming, time_tc_loss
from .training_runs import SHAPES, TACO, Shape, training_argv
from .update_timing import (
    EXACT_RSS_ENVIRON, MEMORY_UPDATES, MemoryUse, UpdateStats, compare_updates,
)


@dataclass
class BenchmarkOptions:
    """What to measure (the options of ``python -m benchmarks``).

    Raises:
        ValueError: (when built) for an unknown shape name, TC token counts that are not whole
            sequences, or CUDA asked for but not available.

    Attributes:
        data: a data-bin directory (None: to be filled in, e.g. by
            :func:`~benchmarks.training_runs.ensure_data`, before
            :func:`run_benchmark`).
        shapes: names of :data:`~benchmarks.training_runs.SHAPES`.
        steps: measured updates per criterion (after ``warmup``), per shape but ``base``.
        base_steps: measured updates per criterion for ``base``.
        warmup: updates per criterion before measuring.
        threads: torch threads per process (None: torch's default).
        device: ``"cpu"`` or ``"cuda"``.
        fp16: train with ``--fp16``.
        collate_batches: batches whose collate is timed.
        tc_tokens: anchors (tokens) of the TC-loss-only timings, at K = ``tc_fixed_negatives``.
        tc_negatives: K of the TC-loss-only timings, at ``tc_fixed_tokens`` tokens.
        tc_fixed_negatives: K of the token sweep.
        tc_fixed_tokens: tokens of the K sweep.
        tc_hidden: vector size of the TC-loss-only timings.
        tc_repeats: timings per implementation and size.
    """

    data: Optional[Path]
    shapes: Sequence[str] = ("tiny", "small")
    steps: int = 20
    base_steps: int = 5
    warmup: int = 2
    threads: Optional[int] = None
    device: str = "cpu"
    fp16: bool = False
    collate_batches: int = 20
    tc_tokens: Sequence[int] = (1024, 2048, 4096, 8192)
    tc_negatives: Sequence[int] = (10, 25, 50, 100)
    tc_fixed_negatives: int = 50
    tc_fixed_tokens: int = 4096
    tc_hidden: int = 512
    tc_repeats: int = 5

    def __post_init__(self):
        unknown = [name for name in self.shapes if name not in SHAPES]
        if unknown:
            raise ValueError(f"unknown shapes {unknown}; choose from {sorted(SHAPES)}")
        tc_tokens = [*self.tc_tokens, self.tc_fixed_tokens]
        bad_tokens = [t for t in tc_tokens if t % SEQ_LEN or t < 2 * SEQ_LEN]
        if bad_tokens:
            raise ValueError(
                f"TC token counts {bad_tokens} (--tc-tokens, --tc-fixed-tokens) must be "
                f"multiples of {SEQ_LEN} and >= {2 * SEQ_LEN} (at least two {SEQ_LEN}-token "
                "sequences)"
            )
        if self.device == "cuda" and not torch.cuda.is_available():
            raise ValueError("device cuda asked for, but torch sees no CUDA device")


@dataclass
class ShapeResult:
    """Both criteria at one shape.

    Attributes:
        shape: the shape.
        updates: {``"masked_lm"``, ``"taco"``} -> their :class:`UpdateStats` (timing runs).
        memory: {``"masked_lm"``, ``"taco"``} -> their peak memory, measured in separate
            processes of :data:`MEMORY_UPDATES` updates (on CPU with
            :data:`~benchmarks.update_timing.EXACT_RSS_ENVIRON`).
        collate: the collate times of the taco run's training batches.
    """

    shape: Shape
    updates: Dict[str, UpdateStats]
    memory: Dict[str, MemoryUse]
    collate: CollateStats


@dataclass
class BenchmarkResult:
    """Everything measured, with the environment it was measured in."""

    environment: Dict[str, str]
    options: BenchmarkOptions
    shapes: List[ShapeResult] = field(default_factory=list)
    tc_loss: List[TCLossTiming] = field(default_factory=list)


def run_benchmark(
    options: BenchmarkOptions, progress: Optional[Callable[[str], None]] = None
) -> BenchmarkResult:
    """Measure everything :class:`BenchmarkOptions` asks for.

    Raises:
        ValueError: if ``options.data`` is None.
        RuntimeError: when a training run fails (see :func:`compare_updates`).
    """
    if options.data is None:
        raise ValueError("BenchmarkOptions.data is None: give a data-bin directory")
    if options.threads:
        torch.set_num_threads(options.threads)
    result = BenchmarkResult(environment(options.device, options.threads), options)
    for name in options.shapes:
        shape = SHAPES[name]
        runs = training_argv(options.data, shape, options.device, options.fp16)
        collate = functools.partial(time_session_collate, batches=options.collate_batches)
        updates = compare_updates(
            runs,
            steps=options.base_steps if name == "base" else options.steps,
            warmup=options.warmup,
            threads=options.threads,
            extras={TACO: {"collate": collate}},
            progress=(lambda line, name=name: progress(f"{name}: {line}")) if progress else None,
        )
        memory = compare_updates(
            runs, steps=MEMORY_UPDATES - 1, warmup=1, threads=options.threads,
            environ=EXACT_RSS_ENVIRON if options.device == "cpu" else None,
            progress=(lambda line, name=name: progress(f"{name} memory: {line}"))
            if progress else None,
        )
        by_name = {stats.name: stats for stats in updates}
        result.shapes.append(ShapeResult(
            shape, by_name, {stats.name: stats.memory for stats in memory},
            by_name[TACO].extra["collate"],
        ))
    sizes = [(tokens, options.tc_fixed_negatives) for tokens in options.tc_tokens] + [
        (options.tc_fixed_tokens, k) for k in options.tc_negatives
    ]
    for tokens, k in dict.fromkeys(sizes):  # unique, in order
        if progress:
            progress(f"TC loss alone: {tokens} tokens, K = {k}")
        result.tc_loss.append(
            time_tc_loss(tokens, k, options.tc_hidden, repeats=options.tc_repeats,
                         device=options.device)
        )
    result.environment["load average (1 min) at end"] = machine_load()
    return result

