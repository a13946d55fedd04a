"""The benchmark's markdown report: environment, tables, and the issue's targets."""

import datetime
import os
import platform
import statistics
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from .training_runs import MASKED_LM, TACO
from .update_timing import MEMORY_UPDATES

MIB = 2**20

#: The model shape the targets of the updates are checked at, by device type.
TARGET_SHAPES = {"cpu": "small", "cuda": "base"}
#: The default largest taco / masked_lm update-time ratio, by device type.
TIME_RATIO_TARGETS = {"cpu": 1.03, "cuda": 1.02}


@dataclass(frozen=True)
class Targets:
    """The performance targets the report checks (``benchmarks/cli.py --target-*``); ratios
    are taco / masked_lm at the device's :data:`TARGET_SHAPES` shape.

    Attributes:
        time_ratio: largest ratio of the median update times (None: the device's
            :data:`TIME_RATIO_TARGETS`).
        memory_ratio: largest ratio of the peak memory, and of its increase over the built
            trainer.
        speed_ratio: smallest ratio of the tokens per second.
        sampling_share: largest share of the taco update time spent in TACO's sampling.
        growth_exponent: largest log-log slope of the TC loss time over tokens or over K + 1
            that counts as linear growth: the midpoint between linear (1) and quadratic (2).
            The work is linear; the time per dot product still rises with the table of keys as
            it outgrows the CPU's caches.
    """

    time_ratio: Optional[float] = None
    memory_ratio: float = 1.05
    speed_ratio: float = 0.97
    sampling_share: float = 0.02
    growth_exponent: float = 1.5


def environment(device: str, threads: Optional[int]) -> Dict[str, str]:
    """Device, versions, date and machine load, as ``{name: text}``."""
    import fairseq

    from taco_fairseq import __version__

    if device == "cuda":
        described = f"CUDA: {torch.cuda.get_device_name(0)} (CUDA {torch.version.cuda})"
    else:
        described = f"CPU: {_cpu_model()}, {os.cpu_count()} cores"
    return {
        "device": f"{described}, {threads or torch.get_num_threads()} torch threads",
        "torch": torch.__version__,
        "fairseq": fairseq.__version__,
        "python": platform.python_version(),
        "taco_fairseq": f"{__version__} ({_git_revision()})",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "load average (1 min) at start": machine_load(),
    }


def machine_load() -> str:
    """The 1-minute load average, as text (``n/a`` where the OS has none)."""
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except OSError:
        return "n/a"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _git_revision() -> str:
    root = Path(__file__).resolve().parents[1]
    try:
        revision = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True,
            text=True, check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
            capture_output=True, text=True, check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "no git checkout"
    return f"git {revision}{' with local changes' if dirty else ''}"


def markdown(result, command: str, targets: Targets = Targets()) -> str:
    """The report of a :class:`~benchmarks.suite.BenchmarkResult` as markdown.

    Args:
        result: what :func:`~benchmarks.suite.run_benchmark` returned.
        command: the command line that produced it (printed in the report).
        targets: what the targets table checks.
    """
    parts = [f"Command: `{command}`", "", "| | |", "|---|---|"]
    parts += [f"| {key} | {value} |" for key, value in result.environment.items()]
    if result.shapes:
        parts += ["", *_update_table(result), "", *_collate_table(result)]
    if result.tc_loss:
        parts += ["", *_tc_table(result)]
    parts += ["", *_targets_table(result, targets)]
    return "\n".join(parts) + "\n"


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.3f}" if b else "n/a"


def paired_ratios(numerator: Sequence[float], denominator: Sequence[float]):
    """Median and quartiles of ``numerator[i] / denominator[i]`` (updates i of two runs saw
    the same batches in the same round), as ``(q1, median, q3)``."""
    ratios = sorted(a / b for a, b in zip(numerator, denominator))
    if len(ratios) == 1:
        return ratios[0], ratios[0], ratios[0]
    q1, median, q3 = statistics.quantiles(ratios, n=4, method="inclusive")
    return q1, median, q3


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> List[str]:
    """A markdown table."""
    return [f"| {' | '.join(header)} |", "|" + "---|" * len(header)] + [
        f"| {' | '.join(row)} |" for row in rows
    ]


def _with_quartiles(quartiles) -> str:
    q1, median, q3 = quartiles
    return f"{median:.3f} ({q1:.3f}–{q3:.3f})"


def _update_table(result) -> List[str]:
    options = result.options
    memory_kind = next(iter(result.shapes)).memory[TACO].kind
    exact = " with glibc's mmap threshold fixed at 64 KiB" if memory_kind == "CPU max RSS" else ""
    lines = [
        f"**Updates** (fairseq `Trainer.train_step`: forward, backward, clip, Adam step), "
        f"medians over the measured updates of each criterion, run interleaved after "
        f"{options.warmup} warm-up updates each. The time and tokens/s ratios are medians of "
        "the ratios of the two criteria's updates of the same batches, side by side "
        "(quartiles in brackets); CPU time ratio: of the medians of the CPU time of each "
        "criterion's process, all threads (a cross-check on a busy machine). Peak memory: the "
        f"{memory_kind} of a separate process per criterion running {MEMORY_UPDATES} "
        f"updates{exact} (increase: over the value when its trainer was built).",
        "",
    ]
    rows = []
    for shape_result in result.shapes:
        shape = shape_result.shape
        mlm, taco = shape_result.updates[MASKED_LM], shape_result.updates[TACO]
        mlm_memory, taco_memory = shape_result.memory[MASKED_LM], shape_result.memory[TACO]
        rows.append([
            shape.name, shape.arch, f"{shape.batch_size} × {shape.tokens_per_sample}",
            str(shape.negatives), str(len(taco.update_times)), f"{mlm.update_s:.3f}",
            f"{taco.update_s:.3f}",
            _with_quartiles(paired_ratios(taco.update_times, mlm.update_times)),
            _ratio(taco.cpu_s, mlm.cpu_s), f"{mlm.tokens_per_s:,.0f}",
            f"{taco.tokens_per_s:,.0f}",
            _with_quartiles(paired_ratios(mlm.update_times, taco.update_times)),
            f"{mlm_memory.peak / MIB:,.0f}", f"{taco_memory.peak / MIB:,.0f}",
            _ratio(taco_memory.peak, mlm_memory.peak),
            _ratio(_increase(taco_memory), _increase(mlm_memory)),
        ])
    header = [
        "shape", "arch", "sequences × tokens", "K", "updates", "masked_lm s", "taco s", "ratio",
        "CPU time ratio", "masked_lm tokens/s", "taco tokens/s", "ratio", "masked_lm peak MiB",
        "taco peak MiB", "ratio", "peak increase ratio",
    ]
    return lines + _table(header, rows)


def _increase(memory) -> int:
    return memory.peak - memory.at_start


def _collate_table(result) -> List[str]:
    lines = [
        "**Data loading**: median ms per batch of the collater of `masked_lm` and of "
        "`taco_masked_lm` (the same items plus TACO's sampling) on the first "
        f"{result.options.collate_batches} training batches, and the sampling's share of the "
        "taco update time (it runs inline with `--num-workers 0`, in the loader's worker "
        "processes otherwise); also the median time to draw an update's batches from the "
        "training iterator (items, masking, collate; update totals for taco).",
        "",
    ]
    rows = []
    for shape_result in result.shapes:
        collate = shape_result.collate
        mlm, taco = shape_result.updates[MASKED_LM], shape_result.updates[TACO]
        sampling = collate.taco_s - collate.plain_s
        rows.append([
            shape_result.shape.name, f"{collate.plain_s * 1e3:.2f}",
            f"{collate.taco_s * 1e3:.2f}", f"{sampling * 1e3:.2f}",
            f"{sampling / taco.update_s:.2%}", f"{mlm.load_s * 1e3:.2f}",
            f"{taco.load_s * 1e3:.2f}",
        ])
    header = [
        "shape", "masked_lm collate ms", "taco collate ms", "TACO sampling ms",
        "share of taco update", "masked_lm batch load ms", "taco batch load ms",
    ]
    return lines + _table(header, rows)


def growth_exponents(timings) -> Tuple[Optional[float], Optional[float]]:
    """Log-log slopes of the fast TC time over tokens (at fixed K) and over K + 1 (at fixed
    tokens): 1 is linear growth, 2 quadratic. None where fewer than two sizes vary."""

    def slope(points: Sequence[Tuple[float, float]]) -> Optional[float]:
        if len({x for x, _ in points}) < 2:
            return None
        x, y = np.log(np.array(points)).T
        return float(np.polyfit(x, y, 1)[0])

    by_k: Dict[int, list] = {}
    by_tokens: Dict[int, list] = {}
    for t in timings:
        by_k.setdefault(t.negatives, []).append((t.tokens, t.fast_s))
        by_tokens.setdefault(t.tokens, []).append((t.negatives + 1, t.fast_s))
    over_tokens = max(by_k.values(), key=len)
    over_k = max(by_tokens.values(), key=len)
    return slope(over_tokens), slope(over_k)


def _tc_table(result) -> List[str]:
    hidden = result.tc_loss[0].hidden
    exponent_tokens, exponent_k = growth_exponents(result.tc_loss)
    lines = [
        f"**TC loss alone**: global bias g = h − e and InfoNCE, forward + backward, hidden "
        f"{hidden}, float32, anchors = all tokens of 256-token sequences, positives and "
        "negatives from the real sampler, median of "
        f"{result.options.tc_repeats} alternating runs: `gather` builds the `[anchors, K, "
        "hidden]` tensor of negatives (the official code's way), `fast` is "
        "`taco_fairseq.loss.info_nce`.",
        "",
    ]
    header = [
        "tokens", "K", "gather ms", "fast ms", "speed-up", "fast ns per anchor × (K+1)",
        "max abs difference",
    ]
    lines += _table(header, [
        [
            str(t.tokens), str(t.negatives), f"{t.gather_s * 1e3:.1f}", f"{t.fast_s * 1e3:.1f}",
            f"{t.gather_s / t.fast_s:.1f}×",
            f"{t.fast_s * 1e9 / (t.tokens * (t.negatives + 1)):.0f}", f"{t.max_difference:.1e}",
        ]
        for t in result.tc_loss
    ])
    lines += [
        "",
        "Growth of the fast time (log-log slope; 1 = linear, 2 = quadratic): "
        f"over tokens {_number(exponent_tokens)}, over K + 1 {_number(exponent_k)}.",
    ]
    for shape_result in result.shapes:
        shape = shape_result.shape
        tokens = shape.batch_size * shape.tokens_per_sample
        same = [t for t in result.tc_loss
                if (t.tokens, t.negatives, t.hidden) == (tokens, shape.negatives, shape.hidden)]
        if same:
            update = shape_result.updates[MASKED_LM].update_s
            lines.append(
                f"At the {shape.name} shape ({tokens} tokens, K = {shape.negatives}, hidden "
                f"{shape.hidden}) the fast TC loss takes {same[0].fast_s / update:.2%} of the "
                f"median masked_lm update, the gather one {same[0].gather_s / update:.2%}."
            )
    return lines


def _number(value: Optional[float]) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _targets_table(result, targets: Targets) -> List[str]:
    device = "cuda" if result.options.device == "cuda" else "cpu"
    shape_name = TARGET_SHAPES[device]
    time_limit = targets.time_ratio or TIME_RATIO_TARGETS[device]
    rows = []

    def add(target: str, value: Optional[float], met: Optional[bool], fmt: str = "{:.3f}"):
        shown = "not measured" if value is None else fmt.format(value)
        rows.append([target, shown, "-" if met is None else "yes" if met else "NO"])

    chosen = next((s for s in result.shapes if s.shape.name == shape_name), None)
    if chosen is None:
        add(f"update time taco / masked_lm ≤ {time_limit} ({shape_name})", None, None)
    else:
        mlm, taco = chosen.updates[MASKED_LM], chosen.updates[TACO]
        time_ratio = paired_ratios(taco.update_times, mlm.update_times)[1]
        memory_ratio = chosen.memory[TACO].peak / chosen.memory[MASKED_LM].peak
        speed_ratio = paired_ratios(mlm.update_times, taco.update_times)[1]
        share = (chosen.collate.taco_s - chosen.collate.plain_s) / taco.update_s
        add(f"update time taco / masked_lm ≤ {time_limit} ({shape_name})", time_ratio,
            time_ratio <= time_limit)
        add(f"peak memory taco / masked_lm ≤ {targets.memory_ratio} ({shape_name})",
            memory_ratio, memory_ratio <= targets.memory_ratio)
        increase_ratio = _increase(chosen.memory[TACO]) / _increase(chosen.memory[MASKED_LM])
        add(f"the same for the increase over the built trainer ({shape_name})", increase_ratio,
            increase_ratio <= targets.memory_ratio)
        add(f"tokens/s taco / masked_lm ≥ {targets.speed_ratio} ({shape_name})", speed_ratio,
            speed_ratio >= targets.speed_ratio)
        add(f"TACO sampling ≤ {targets.sampling_share:.0%} of the update time ({shape_name})",
            share, share <= targets.sampling_share, "{:.2%}")
    exponents = growth_exponents(result.tc_loss) if result.tc_loss else (None, None)
    for over, exponent in zip(("tokens", "K + 1"), exponents):
        add(f"TC time grows linearly over {over} (slope ≤ {targets.growth_exponent})",
            exponent, None if exponent is None else exponent <= targets.growth_exponent,
            "{:.2f}")
    return ["**Targets**", "", *_table(["target", "measured", "met"], rows)]
