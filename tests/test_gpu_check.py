"""scripts/gpu_check.sh: its dry run (the GPU check's steps at toy sizes on the CPU, gloo
instead of NCCL) writes every result and the summary into one folder; bad calls stop with one
line; the summary's cross-worker verdict."""

import os
import subprocess
import sys

import pytest

from benchmarks.gpu_check import cross_worker_verdict, read_steps
from conftest import REPO, SHARED

SCRIPT = REPO / "scripts" / "gpu_check.sh"


def _run(*args, **env):
    return subprocess.run(
        ["bash", str(SCRIPT), *map(str, args)], cwd=REPO, capture_output=True, text=True,
        env=dict(os.environ, PYTHON=sys.executable, **env), timeout=1800)


@pytest.mark.slow
def test_dry_run_writes_every_result_and_the_summary(tmp_path):
    if not (SHARED / "data" / "glue" / "RTE").is_dir():
        pytest.skip("needs ../shared (corpus and GLUE)")
    out = tmp_path / "check"
    result = _run("--dry-run", out)
    summary = (out / "summary.md").read_text()
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert summary in result.stdout
    steps = read_steps(out)
    assert [s["name"] for s in steps] == [
        "environment", "data", "glue", "benchmark", "two-processes-gloo-batch1", "pool-tiny",
        "study"]
    assert all(s["status"] == 0 for s in steps)
    assert "7 of 7 steps succeeded" in summary and "CPU only (dry run)" in summary
    # each step's output is in the folder
    assert (out / "data-bin" / "dict.txt").is_file() and (out / "glue" / "RTE").is_dir()
    assert "| tiny | roberta_tiny |" in (out / "benchmark.md").read_text()
    assert "## Wall time" in (out / "study" / "report.md").read_text()
    for name in ("pool-tiny", "two-processes-gloo-batch1"):
        # the step's row, then the run's: updates logged and the last update's metrics
        step_row, run_row = [line.split(" | ") for line in summary.splitlines()
                             if line.startswith(f"| {name} | ")]
        assert step_row[1] == "ok" and run_row[1] == "2"
    assert "| yes: TC loss on all 2 updates with one sequence per process" in summary


@pytest.mark.slow
def test_bad_calls_stop_with_one_line(tmp_path):
    unknown = _run("--fast")
    assert unknown.returncode == 2
    assert unknown.stderr.startswith("error: unknown option --fast")
    no_shared = _run("--dry-run", tmp_path / "out", SHARED=str(tmp_path / "nowhere"))
    assert no_shared.returncode == 2 and no_shared.stderr.count("\n") == 1
    assert "set SHARED=" in no_shared.stderr
    usage = _run("--help")
    assert usage.returncode == 0 and "WHEELS" in usage.stdout and "--dry-run" in usage.stdout


def test_the_verdict_needs_negatives_on_every_update():
    ok = {"tc_skipped": 0.0, "tc_anchors": 128.0, "tc_loss": 9.9}
    assert cross_worker_verdict([ok, ok]).startswith("yes")
    assert cross_worker_verdict([ok, {**ok, "tc_skipped": 1.0}]).startswith("NO")
    assert cross_worker_verdict([{**ok, "tc_loss": float("nan")}]).startswith("NO")
    assert cross_worker_verdict([]) == "no updates logged"
