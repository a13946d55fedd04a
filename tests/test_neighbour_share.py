"""The first layer's neighbour share at validation (taco_fairseq/neighbour_attention.py): its
sums against a direct loop, the criteria's metric against the probes' hook-based measure, that
training is untouched, the plateau-exit line and its state across a resume, and fairseq-train's
validation log."""

import json
import logging

import pytest
import torch
from fairseq.logging import metrics
from fairseq.tasks.fairseq_task import StatefulContainer

from conftest import fairseq_setup, first_batch, run_fairseq, train_args
from taco_fairseq.glue.probes import neighbour_attention
from taco_fairseq.neighbour_attention import (
    EXIT_RATIO,
    PIECES_KEY,
    SHARE_KEY,
    STATE_KEY,
    neighbour_sums,
    report_plateau_exit,
)

CRITERIA = {"taco": (), "mlm": ("--task", "masked_lm", "--criterion", "mlm")}


def test_sums_match_a_direct_loop_with_padding_and_row_ends():
    generator = torch.Generator().manual_seed(0)
    weights = torch.rand(2, 3, 5, 5, generator=generator).softmax(-1)
    padding = torch.tensor([[False] * 5, [False, False, False, True, True]])
    pieces = torch.tensor([[False, True, True, True, True],  # the last piece ends its row
                           [False, True, False, False, False]])
    sums = neighbour_sums(weights, pieces, padding)
    share = uniform = 0.0
    for b in range(2):
        n = int((~padding[b]).sum())
        for i in range(5):
            if not pieces[b, i]:
                continue
            neighbours = [j for j in (i - 1, i + 1) if 0 <= j < 5 and not padding[b, j]]
            share += float(weights[b, :, i, neighbours].sum(-1).mean())
            uniform += len(neighbours) / n
    assert float(sums.pieces) == 5
    assert float(sums.share) == pytest.approx(share, rel=1e-6)
    assert float(sums.uniform) == pytest.approx(uniform, rel=1e-12)
    assert float(sums.uniform) == pytest.approx(2 / 5 * 3 + 1 / 5 + 2 / 3, rel=1e-12)


@pytest.mark.parametrize("name", ["taco", "mlm"])
def test_the_validation_metric_is_the_probes_first_layer_share(synthetic_databin, name):
    _, task, model, criterion = fairseq_setup(synthetic_databin, *CRITERIA[name])
    model.eval()
    batch = first_batch(task)
    log = criterion(model, batch)[2]
    tokens = batch["net_input"]["src_tokens"]
    dictionary = task.source_dictionary
    rows = [row[row.ne(dictionary.pad())] for row in tokens]
    probe = neighbour_attention(model, rows, dictionary)
    with metrics.aggregate() as agg:
        criterion.reduce_metrics([log])
        values = agg.get_smoothed_values()
    assert values["neighbour_share"] == pytest.approx(probe["neighbour_attention_layer1"],
                                                      abs=1e-4)
    special = torch.isin(tokens, torch.tensor([dictionary.bos(), dictionary.eos(),
                                               dictionary.pad()]))
    assert float(log[PIECES_KEY]) == float((~special).sum())
    assert 0 < values["neighbour_share_uniform"] < 1


@pytest.mark.parametrize("name", ["taco", "mlm"])
def test_nothing_in_training_nor_with_the_option_off(synthetic_databin, name):
    _, task, model, criterion = fairseq_setup(synthetic_databin, *CRITERIA[name])
    model.train()
    assert SHARE_KEY not in criterion(model, first_batch(task))[2]
    _, task, model, criterion = fairseq_setup(synthetic_databin, *CRITERIA[name],
                                              "--no-neighbour-share")
    model.eval()
    log = criterion(model, first_batch(task))[2]
    assert SHARE_KEY not in log
    with metrics.aggregate() as agg:
        criterion.reduce_metrics([log])
        assert "neighbour_share" not in agg.get_smoothed_values()


class _Task:
    def __init__(self):
        self.state = StatefulContainer()


def _stats(update, share, uniform=0.05):
    return {"num_updates": update, "neighbour_share": share, "neighbour_share_uniform": uniform}


def test_the_exit_is_logged_once_naming_the_previous_validation(caplog):
    task = _Task()
    caplog.set_level(logging.INFO, logger="taco_fairseq.neighbour_attention")
    assert report_plateau_exit(_stats(500, 0.05), task) is None
    assert report_plateau_exit(_stats(1000, 0.05 * EXIT_RATIO * 0.99), task) is None
    line = report_plateau_exit(_stats(1500, 0.2), task)
    assert line.startswith("update 1500: left the bag-of-words plateau")
    assert "4.00×" in line and "previous validation (update 1000)" in line
    assert caplog.messages == [line]
    assert report_plateau_exit(_stats(2000, 0.3), task) is None  # once
    assert report_plateau_exit(_stats(2500, 0.01), task) is None
    assert task.state.state_dict[STATE_KEY]["left_at"] == 1500
    assert report_plateau_exit({"num_updates": 3000, "loss": 5.0}, task) is None


@pytest.mark.slow
def test_fairseq_train_logs_the_share_and_a_resume_keeps_the_exit(tiny_databin, tmp_path):
    """fairseq-train's validation log has the metric (both criteria's code path is the mlm
    one, tested above); the task state in the checkpoint says where the run stood."""
    save_dir = tmp_path / "run"
    args = train_args(tiny_databin, save_dir, "--validate-interval-updates", "10")
    out = run_fairseq("fairseq-train", *args).stdout
    valid = [json.loads(line[line.index("{"):]) for line in out.splitlines()
             if '"valid_neighbour_share"' in line]
    assert [int(v["valid_num_updates"]) for v in valid] == [10, 20]
    assert all(0 < float(v["valid_neighbour_share_uniform"]) < 1 for v in valid)
    state = torch.load(save_dir / "checkpoint_last.pt", weights_only=True)["task_state"]
    assert state[STATE_KEY]["update"] == 20
    # resume: the state comes back from the checkpoint before the first validation
    state_left = dict(state[STATE_KEY], left_at=7)
    checkpoint = torch.load(save_dir / "checkpoint_last.pt", weights_only=True)
    checkpoint["task_state"][STATE_KEY] = state_left
    torch.save(checkpoint, save_dir / "checkpoint_last.pt")
    run_fairseq("fairseq-train", *args, "--max-update", "30")
    state = torch.load(save_dir / "checkpoint_last.pt", weights_only=True)["task_state"]
    assert state[STATE_KEY]["update"] == 30 and state[STATE_KEY]["left_at"] == 7


@pytest.mark.slow
def test_python_m_fairseq_cli_train_gets_the_validation_patches(tiny_databin, tmp_path):
    """Under ``python -m fairseq_cli.train`` (how taco-compare trains) the file runs as
    ``__main__``, a module apart from the imported ``fairseq_cli.train``: the plugin patches
    its ``get_valid_stats`` too, so the plateau's exit is followed there as well (the
    validation's neighbour share is kept in the checkpoint's task state)."""
    import subprocess
    import sys

    from conftest import REPO

    save_dir = tmp_path / "run"
    args = train_args(tiny_databin, save_dir, "--task", "masked_lm", "--criterion", "mlm",
                      "--max-update", "10")
    done = subprocess.run([sys.executable, "-m", "fairseq_cli.train", *map(str, args)],
                          capture_output=True, text=True, cwd=REPO, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    state = torch.load(save_dir / "checkpoint_last.pt", weights_only=False)["task_state"]
    assert state[STATE_KEY]["update"] == 10
