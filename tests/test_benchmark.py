"""The benchmark command and its library on tiny shapes (its figures are not checked here:
timings of a shared CI machine mean little; docs/performance.md has measured ones)."""

import os
import re
import subprocess
import sys

import pytest

from conftest import REPO, USER_DIR, fairseq_setup
from benchmarks.collate_timing import time_collate
from benchmarks.report import growth_exponents, paired_ratios
from benchmarks.tc_loss_timing import TCLossTiming, time_tc_loss
from benchmarks import tc_loss_timing, update_timing
from benchmarks.update_timing import compare_updates
from taco_fairseq.loss import info_nce


def run_benchmark(*args):
    """``python -m benchmarks ARGS`` from the repository root, as the docs run it."""
    return subprocess.run([sys.executable, "-m", "benchmarks", *map(str, args)],
                          capture_output=True, text=True, cwd=REPO)


@pytest.mark.slow
def test_benchmark_command_runs_and_prints_its_tables(tiny_databin, tmp_path):
    output = tmp_path / "report.md"
    result = run_benchmark(
        "--data", tiny_databin, "--shapes", "tiny", "--steps", "1",
        "--warmup", "1", "--collate-batches", "2", "--tc-tokens", "512", "768",
        "--tc-negatives", "3", "5", "--tc-fixed-tokens", "512", "--tc-hidden", "32",
        "--tc-repeats", "1",
        "--threads", "1", "--target-growth-exponent", "1.25", "--output", output,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    report = result.stdout
    assert output.read_text() == report
    assert "| torch | " in report and "| fairseq | " in report and "| device | CPU" in report
    number, paired = r" [\d.,]+ \|", r" [\d.]+ \([\d.]+–[\d.]+\) \|"
    update_row = (r"^\| tiny \| roberta_tiny \| 16 × 128 \| 50 \| 1 \|" + number * 2 + paired
                  + number * 3 + paired + number * 4 + "$")
    assert re.search(update_row, report, re.MULTILINE)
    assert re.search(r"^\| tiny \| [\d.]+ \| [\d.]+ \| -?[\d.]+ \| -?[\d.]+% \|", report,
                     re.MULTILINE)
    tc_rows = re.findall(r"^\| (\d+) \| (\d+) \| [\d.]+ \| [\d.]+ \| [\d.]+× \|", report,
                         re.MULTILINE)
    assert tc_rows == [("512", "50"), ("768", "50"), ("512", "3"), ("512", "5")]
    assert "update time taco / masked_lm ≤ 1.03 (small) | not measured" in report
    assert "TC time grows linearly over tokens (slope ≤ 1.25) |" in report


@pytest.mark.slow
def test_benchmark_command_rejects_partial_sequences(tiny_databin):
    result = run_benchmark("--data", tiny_databin, "--tc-tokens", "300")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "--tc-tokens" in result.stderr and "multiples of 256" in result.stderr


@pytest.mark.slow
def test_runs_that_see_different_batches_are_refused(tiny_databin):
    common = [
        str(tiny_databin), "--user-dir", USER_DIR, "--arch", "roberta_tiny", "--cpu",
        "--tokens-per-sample", "32", "--batch-size", "2", "--optimizer", "adam", "--lr", "1e-4",
        "--task", "masked_lm", "--criterion", "masked_lm", "--disable-validation", "--no-save",
        "--num-workers", "0",
    ]
    runs = {"a": common + ["--seed", "1"], "b": common + ["--seed", "2"]}
    with pytest.raises(RuntimeError, match="different batches"):
        compare_updates(runs, steps=1, warmup=0, threads=1)


def test_collate_timing_times_both_collaters(tiny_databin):
    _, task, _, _ = fairseq_setup(tiny_databin)
    dataset = task.dataset("valid")
    stats = time_collate(dataset, [[0, 1, 2, 3], [4, 5]], repeats=2)
    assert stats.batches == 2 and stats.plain_s > 0 and stats.taco_s > 0
    with pytest.raises(TypeError, match="taco_masked_lm"):
        time_collate(dataset.dataset, [[0, 1]])


@pytest.mark.parametrize("error, caught", [(1e-6, True), (2e-9, False)])
def test_tc_timing_checks_both_implementations_agree(monkeypatch, error, caught):
    """The float64 check catches another formula, here off by 1e-6 of the loss, and passes a
    gap like the 1.21e-9 that failed it once in a full run, never reproduced (issue 43; float64
    rounding gives at most 1e-14 here: tc_loss_timing.FLOAT64_RTOL says how it was measured)."""
    timing = time_tc_loss(512, 4, 8, repeats=1)
    assert (timing.tokens, timing.negatives, timing.hidden) == (512, 4, 8)
    # float32 rounding only (it reached 1.2e-4 once on 2 threads)
    assert 0 <= timing.max_difference < 1e-3 and timing.fast_s > 0 and timing.gather_s > 0

    def off_by_a_little(vectors, *args):
        result = info_nce(vectors, *args)
        return result._replace(loss=result.loss * (1 + error))

    monkeypatch.setattr(tc_loss_timing, "info_nce", off_by_a_little)
    if caught:
        with pytest.raises(RuntimeError, match="differ in float64"):
            time_tc_loss(512, 4, 8, repeats=1)
    else:
        time_tc_loss(512, 4, 8, repeats=1)


def test_growth_exponents_are_log_log_slopes():
    def timing(tokens, k):  # linear in tokens, quadratic in K + 1
        seconds = tokens * (k + 1) ** 2 * 1e-9
        return TCLossTiming(tokens, k, 8, seconds, seconds, 0.0)

    over_tokens = [timing(t, 9) for t in (512, 1024, 2048)]
    over_k = [timing(512, k) for k in (19, 39)]
    assert growth_exponents(over_tokens + over_k) == (pytest.approx(1.0), pytest.approx(2.0))
    assert growth_exponents(over_tokens[:1]) == (None, None)


def test_run_processes_get_the_extra_environment(monkeypatch):
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    with update_timing._environment(update_timing.EXACT_RSS_ENVIRON):
        assert os.environ["MALLOC_MMAP_THRESHOLD_"] == "65536"
    assert "MALLOC_MMAP_THRESHOLD_" not in os.environ


def test_paired_ratios_are_quartiles_of_per_update_ratios():
    assert paired_ratios([2, 3, 4, 5, 6], [1, 1, 1, 1, 1]) == (3, 4, 5)
    assert paired_ratios([10, 30], [10, 10]) == (1.5, 2.0, 2.5)
    assert paired_ratios([3], [2]) == (1.5, 1.5, 1.5)
