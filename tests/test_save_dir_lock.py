"""One training run at a time writes to a --save-dir: a second is refused in one line naming
the run that holds it, and a holder that died blocks nothing."""

import json
import multiprocessing
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import fairseq  # noqa: F401  (before taco_fairseq, which then registers the plugin)
import pytest
import torch

from conftest import REPO, run_fairseq, train_args
import taco_fairseq  # noqa: F401  (weights-only loading of fairseq checkpoints)
from taco_fairseq.errors import OptionError
from taco_fairseq.save_dir import LOCK_FILE, hold


def _hold_until_killed(save_dir, held):
    hold(str(save_dir))
    held.set()
    time.sleep(600)


def test_a_held_save_dir_is_refused_until_its_holder_dies(tmp_path):
    """The holder is another process (forked: flock locks are per open file, so one process
    holding a directory twice is a no-op); killed, it leaves its lock file, which blocks
    nothing."""
    save_dir = tmp_path / "run"
    context = multiprocessing.get_context("fork")
    held = context.Event()
    holder = context.Process(target=_hold_until_killed, args=(save_dir, held), daemon=True)
    holder.start()
    try:
        assert held.wait(60)
        record = json.loads((save_dir / LOCK_FILE).read_text())
        assert record["pid"] == holder.pid and record["host"] == socket.gethostname()
        with pytest.raises(OptionError) as refused:
            hold(str(save_dir))
        message = str(refused.value)
        assert message == (
            f"--save-dir {save_dir} is in use by another training run (pid {holder.pid} on "
            f"{socket.gethostname()}, started {record['started']}: {record['command']}): both "
            "would write the same checkpoints. Wait for it to end or stop it, or give this run "
            "another --save-dir")
        assert "\n" not in message
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.join()
    assert (save_dir / LOCK_FILE).is_file()  # left behind by the killed holder ...
    hold(str(save_dir))  # ... and blocking nothing
    hold(str(save_dir))  # held already by this process: a no-op
    assert json.loads((save_dir / LOCK_FILE).read_text())["pid"] == os.getpid()


@pytest.mark.slow
def test_a_second_training_on_a_save_dir_in_use_is_refused(synthetic_databin, tmp_path):
    """The issue's case: two fairseq-train on one --save-dir, the second (with --seed 2)
    started while the first runs. Before, both trained and every checkpoint afterwards held
    seed 2. Now the second stops at once, naming the first, whose checkpoints stay its own; a
    --no-save run beside it is not refused. (A killed holder blocks nothing: the test
    above.)"""
    save_dir = tmp_path / "run"
    args = train_args(synthetic_databin, save_dir, "--max-update", "10000",
                      "--save-interval-updates", "2", "--disable-validation")
    first = subprocess.Popen(
        [str(Path(sys.executable).with_name("fairseq-train")), *map(str, args)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO)
    try:
        deadline = time.monotonic() + 300
        while not (save_dir / "checkpoint_last.pt").is_file():
            assert first.poll() is None and time.monotonic() < deadline, "the first run ended"
            time.sleep(0.2)
        second = run_fairseq("fairseq-train", *args, "--seed", "2", check=False)
        no_save = run_fairseq("fairseq-train", *args, "--max-update", "1", "--no-save",
                              check=False)
        assert first.poll() is None  # still training
    finally:
        first.kill()
        first.communicate()
    assert second.returncode == 1
    last = second.stdout.strip().splitlines()[-1]
    assert re.fullmatch(
        rf"error: --save-dir {re.escape(str(save_dir))} is in use by another training run "
        rf"\(pid {first.pid} on {re.escape(socket.gethostname())}, started \S+: "
        rf"fairseq-train {re.escape(str(synthetic_databin))} .*--seed 1 .*\): both would write "
        "the same checkpoints. Wait for it to end or stop it, or give this run another "
        "--save-dir", last), last
    assert "Traceback" not in second.stdout
    assert no_save.returncode == 0, no_save.stdout[-3000:]
    checkpoints = sorted(save_dir.glob("checkpoint*.pt"))
    assert checkpoints
    for checkpoint in checkpoints:
        state = torch.load(checkpoint, weights_only=True)
        assert state["cfg"]["common"]["seed"] == 1, checkpoint
