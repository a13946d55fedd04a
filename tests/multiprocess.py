"""Helpers for tests that run several processes: a free TCP port, fairseq-train with one
process per rank (gloo on the CPU), and the jobs of tests/distributed_worker.py."""

import functools
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from conftest import ONE_THREAD, REPO

#: fairseq's distributed mode on CPU: gloo, fairseq's own gradient all-reduce, one process
#: per rank started by the caller.
GLOO = ("--distributed-backend", "gloo", "--ddp-backend", "legacy_ddp", "--distributed-no-spawn")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(commands, timeout=600):
    """Start one process per command (rank order), each with :data:`ONE_THREAD`, and wait
    for all.

    Returns:
        the merged stdout+stderr of each rank (text).

    Raises:
        AssertionError: when a rank fails or times out (with the tail of every rank's output).
    """
    env = dict(os.environ, **ONE_THREAD, PYTHONPATH=os.pathsep.join(
        filter(None, [str(REPO), str(REPO / "tests"), os.environ.get("PYTHONPATH")])))
    processes = [
        subprocess.Popen(list(map(str, command)), stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, cwd=REPO, env=env)
        for command in commands
    ]
    outputs, failed = [], False
    for process in processes:
        try:
            out, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for other in processes:
                other.kill()
            out, _ = process.communicate()
            failed = True
        outputs.append(out)
        failed = failed or process.returncode != 0
    if failed:
        tails = "\n".join(f"--- rank {r}:\n{out[-3000:]}" for r, out in enumerate(outputs))
        raise AssertionError(f"a rank failed:\n{tails}")
    return outputs


def fairseq_train_ranks(args, world_size=2, timeout=600):
    """``fairseq-train ARGS`` as ``world_size`` gloo processes; returns each rank's output."""
    executable = Path(sys.executable).with_name("fairseq-train")
    common = [executable, *args, *GLOO, "--distributed-world-size", world_size,
              "--distributed-init-method", f"tcp://127.0.0.1:{free_port()}"]
    return run_ranks([[*common, "--distributed-rank", r] for r in range(world_size)], timeout)


@functools.lru_cache(maxsize=None)
def worker_results(databin, world_size=2, timeout=900):
    """Run tests/distributed_worker.py as ``world_size`` gloo ranks (once per session and
    data-bin).

    Returns:
        per rank, ``{job name: result}`` (see ``distributed_worker.JOBS``).
    """
    out_dir = Path(tempfile.mkdtemp(prefix="taco_distributed_"))
    port = free_port()
    script = REPO / "tests" / "distributed_worker.py"
    run_ranks(
        [[sys.executable, script, databin, out_dir, r, world_size, port]
         for r in range(world_size)],
        timeout,
    )
    results = [torch.load(out_dir / f"rank{r}.pt", weights_only=False) for r in range(world_size)]
    shutil.rmtree(out_dir)
    return results
