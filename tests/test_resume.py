"""Exact resume: a run interrupted mid-epoch and restarted from checkpoint_last.pt continues with
the same batches, masks, dropout and TACO samples as an uninterrupted run."""

import json

import torch

from conftest import run_fairseq, train_args
import taco_fairseq  # noqa: F401  (weights-only loading of fairseq checkpoints)

#: logged per update; everything but timings
LOGGED = ("loss", "mlm_loss", "tc_loss", "tc_accuracy", "tc_anchors", "tc_skipped", "ppl",
          "wpb", "bsz", "gnorm", "lr")


def _run(databin, save_dir, max_update):
    """Adam with warm-up and decay, dropout 0.1, --update-freq 2 and a data-loading worker
    process (the update-totals read-ahead), a checkpoint every 3 updates (mid-epoch)."""
    out = run_fairseq("fairseq-train", *train_args(
        databin, save_dir, "--max-update", max_update, "--update-freq", "2", "--num-workers",
        "1", "--log-interval", "1", "--save-interval-updates", "3", "--disable-validation",
        "--dropout", "0.1", "--attention-dropout", "0.1", "--seed", "7"))
    return {int(r["num_updates"]): r for r in (
        json.loads(line.split("train_inner | ")[1])
        for line in out.stdout.splitlines() if "train_inner | " in line)}


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
    a = torch.load(tmp_path / "whole" / "checkpoint_last.pt", weights_only=True)
    b = torch.load(tmp_path / "interrupted" / "checkpoint_last.pt", weights_only=True)
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name
    for key, value in a["last_optimizer_state"]["state"].items():
        for name, saved in value.items():
            other = b["last_optimizer_state"]["state"][key][name]
            assert torch.equal(saved, other) if torch.is_tensor(saved) else saved == other
