"""Exact resume: a run interrupted mid-epoch and restarted from checkpoint_last.pt continues with
the same batches, masks, dropout and TACO samples as an uninterrupted run."""

import json
import logging
import re
import shutil

import pytest
import torch

from conftest import ONE_THREAD, fairseq_setup, run_fairseq, train_args
import taco_fairseq  # noqa: F401  (weights-only loading of fairseq checkpoints)
from taco_fairseq.checkpoints import checkpoint_to_load, restore_config

#: logged per update; everything but timings
LOGGED = ("loss", "mlm_loss", "tc_loss", "tc_accuracy", "tc_anchors", "tc_skipped", "ppl",
          "wpb", "bsz", "gnorm", "lr")


def _run(databin, save_dir, max_update, output=None):
    """Adam with warm-up and decay, dropout 0.1, --update-freq 2 and a data-loading worker
    process (the update-totals read-ahead), a checkpoint every 3 updates (mid-epoch), one thread
(bitwise-reproducible reductions from process to process: :data:`conftest.ONE_THREAD`). Returns
    the logged records by update; ``output`` (a list) gets fairseq-train's output."""
    out = run_fairseq("fairseq-train", *train_args(
        databin, save_dir, "--max-update", max_update, "--update-freq", "2", "--num-workers",
        "1", "--log-interval", "1", "--save-interval-updates", "3", "--disable-validation",
        "--dropout", "0.1", "--attention-dropout", "0.1", "--seed", "7"), env=ONE_THREAD)
    if output is not None:
        output.append(out.stdout)
    return {int(r["num_updates"]): r for r in (
        json.loads(line.split("train_inner | ")[1])
        for line in out.stdout.splitlines() if "train_inner | " in line)}


def _cut_short(path):
    """What a kill during fairseq's copy to checkpoint_last.pt leaves: the file's first half."""
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_interrupted_run_continues_as_the_uninterrupted_one(tiny_databin, tmp_path):
    whole = _run(tiny_databin, tmp_path / "whole", 6)
    first = _run(tiny_databin, tmp_path / "interrupted", 3)
    state = torch.load(tmp_path / "interrupted" / "checkpoint_last.pt", weights_only=True)
    assert state["extra_state"]["train_iterator"]["iterations_in_epoch"] == 6  # mid-epoch
    resumed = _run(tiny_databin, tmp_path / "interrupted", 6)

    assert sorted(whole) == [1, 2, 3, 4, 5, 6]
    assert sorted(first) == [1, 2, 3] and sorted(resumed) == [4, 5, 6]
    for update in range(1, 7):
        got = (first if update <= 3 else resumed)[update]
        assert {k: got[k] for k in LOGGED} == {k: whole[update][k] for k in LOGGED}, update
    # and bit for bit the same weights and optimizer state at the end
    _assert_same_state(tmp_path / "whole", tmp_path / "interrupted")

    # killed while saving update 6: checkpoint_1_6.pt and checkpoint_last.pt are cut short;
    # the rerun resumes from checkpoint_1_3.pt (with a warning) and trains 4-6 as before
    interrupted = tmp_path / "interrupted"
    for name in ("checkpoint_1_6.pt", "checkpoint_last.pt"):
        _cut_short(interrupted / name)
    output = []
    rerun = _run(tiny_databin, interrupted, 6, output)
    assert (f"{interrupted / 'checkpoint_last.pt'} cannot be read (cut short, e.g. by a kill "
            f"while fairseq copied it): resuming from {interrupted / 'checkpoint_1_3.pt'}, the "
            "intact checkpoint with the most updates (3)") in output[0]
    assert sorted(rerun) == [4, 5, 6]
    for update in range(4, 7):
        assert {k: rerun[update][k] for k in LOGGED} == {k: whole[update][k] for k in LOGGED}
    _assert_same_state(tmp_path / "whole", interrupted)  # checkpoint_last.pt is whole again


def _assert_same_state(run_a, run_b):
    a = torch.load(run_a / "checkpoint_last.pt", weights_only=True)
    b = torch.load(run_b / "checkpoint_last.pt", weights_only=True)
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name
    for key, value in a["last_optimizer_state"]["state"].items():
        for name, saved in value.items():
            other = b["last_optimizer_state"]["state"][key][name]
            assert torch.equal(saved, other) if torch.is_tensor(saved) else saved == other


def test_unreadable_checkpoint_last_picks_the_newest_intact_checkpoint(trained_checkpoint,
                                                                       tiny_databin, tmp_path,
                                                                       caplog):
    """The run of 20 updates saved checkpoint_1_10.pt, checkpoint_1_20.pt and _last.pt."""
    for name in ("checkpoint_1_10.pt", "checkpoint_1_20.pt", "checkpoint_last.pt"):
        shutil.copy(trained_checkpoint / name, tmp_path / name)
    _cut_short(tmp_path / "checkpoint_last.pt")
    with caplog.at_level(logging.WARNING):
        cfg, _, _, _ = fairseq_setup(tiny_databin, "--save-dir", str(tmp_path))
    assert checkpoint_to_load(cfg.checkpoint) == str(tmp_path / "checkpoint_1_20.pt")
    assert "resuming from" in caplog.text
    assert (tmp_path / "checkpoint_last.pt").stat().st_size > 0  # left in place
    # fairseq loads checkpoint_last.pt whenever it exists: the config must name the intact one,
    # also when --continue-once (or --finetune-from-model) names that same file
    for option in ([], ["--continue-once", str(tmp_path / "checkpoint_1_20.pt")],
                   ["--finetune-from-model", str(tmp_path / "checkpoint_1_20.pt")]):
        cfg, task, model, _ = fairseq_setup(tiny_databin, "--save-dir", str(tmp_path), *option)
        restored = restore_config(cfg.checkpoint, task, model)
        assert restored.restore_file == str(tmp_path / "checkpoint_1_20.pt"), option
        assert restored.finetune_from_model is None
    _cut_short(tmp_path / "checkpoint_1_20.pt")
    assert checkpoint_to_load(cfg.checkpoint) == str(tmp_path / "checkpoint_1_10.pt")
    _cut_short(tmp_path / "checkpoint_1_10.pt")
    with pytest.raises(ValueError, match=(
            rf"{re.escape(str(tmp_path / 'checkpoint_last.pt'))} cannot be read .* has no intact "
            r"checkpoint_<epoch>_<updates>.pt or checkpoint<epoch>.pt to resume from. Move .* "
            "away to start from scratch")):
        fairseq_setup(tiny_databin, "--save-dir", str(tmp_path))
