"""--tc-cross-worker-negatives: negatives from all workers' sequences, with the distribution of
one worker holding the whole batch (2 gloo processes on the CPU)."""

import json
import math

import numpy as np
import pytest
import torch

from conftest import fairseq_setup, train_args
from distributed_worker import NO_DROPOUT
from multiprocess import fairseq_train_ranks, worker_results
from taco_fairseq.sampling import sample_cross_worker_positions
from taco_fairseq.distributed import global_negative_index


def test_global_index_is_uniform_over_all_workers_tokens_outside_the_row():
    # worker 0: rows of 3 and 2 candidates; worker 1: rows of 4 and 1 (pool sizes 5 and 5)
    rng = np.random.default_rng(0)
    draws = 60000
    uniform = torch.from_numpy(rng.random((1, draws)))
    # the anchor in worker 1's first row (global candidates 5..8): negatives 0..4 and 9
    index = global_negative_index(
        uniform, torch.tensor([0]), torch.tensor([4]), pool_sizes=[5, 5], rank=1
    )
    values, counts = np.unique(index.numpy(), return_counts=True)
    assert values.tolist() == [0, 1, 2, 3, 4, 9]
    assert np.all(np.abs(counts / draws - 1 / 6) < 0.006)  # sd of a share: 0.0015
    # an anchor of worker 0's second row (global 3, 4)
    index = global_negative_index(
        uniform, torch.tensor([3]), torch.tensor([2]), pool_sizes=[5, 5], rank=0
    )
    values, counts = np.unique(index.numpy(), return_counts=True)
    assert values.tolist() == [0, 1, 2, 5, 6, 7, 8, 9]
    assert np.all(np.abs(counts / draws - 1 / 8) < 0.006)


def test_one_worker_draws_what_the_local_sampler_draws():
    """With a single worker the rule is the local sampler's: uniform over the other rows."""
    rng = np.random.default_rng(1)
    candidate = rng.random((4, 7)) < 0.7
    candidate[:, 0] = True
    sampled = sample_cross_worker_positions(candidate, candidate, 5, 20000, rng)
    anchor = 0  # row 0's first token
    index = global_negative_index(
        torch.from_numpy(sampled.negative_uniform[anchor:anchor + 1]),
        torch.from_numpy(sampled.anchor_row_start[:1]),
        torch.from_numpy(sampled.anchor_row_length[:1]),
        pool_sizes=[len(sampled.candidates)], rank=0,
    )
    negatives = sampled.candidates[index.numpy().ravel()]
    other_rows = np.flatnonzero(candidate[1:]) + candidate.shape[1]
    values, counts = np.unique(negatives, return_counts=True)
    assert values.tolist() == other_rows.tolist()
    assert np.all(np.abs(counts / counts.sum() - 1 / len(other_rows)) < 0.02)


def test_variates_are_deterministic_and_in_range():
    candidate = np.ones((2, 5), dtype=bool)
    a = sample_cross_worker_positions(candidate, candidate, 3, 4, np.random.default_rng(5))
    b = sample_cross_worker_positions(candidate, candidate, 3, 4, np.random.default_rng(5))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert a.negative_uniform.shape == (10, 4)
    assert np.all((a.negative_uniform >= 0) & (a.negative_uniform < 1))
    one_row = np.ones((1, 5), dtype=bool)  # no local negatives, but anchors: others may have
    assert len(sample_cross_worker_positions(one_row, one_row, 3, 4,
                                             np.random.default_rng(0)).anchor) == 5


def _merge(samples):
    """The batches of all workers as the one batch of a single worker (rows in rank order)."""
    seq_len = samples[0]["net_input"]["src_tokens"].size(1)
    assert all(s["net_input"]["src_tokens"].size(1) == seq_len for s in samples)
    merged = {
        "net_input": {k: torch.cat([s["net_input"][k] for s in samples])
                      for k in ("src_tokens", "src_lengths")},
        "target": torch.cat([s["target"] for s in samples]),
    }
    taco, rows, pool = {}, 0, 0
    parts = {k: [] for k in ("anchor", "positive", "candidates", "anchor_row_start",
                             "anchor_row_length", "negative_uniform")}
    for s in samples:
        t = s["taco"]
        shift = rows * seq_len
        parts["anchor"].append(t["anchor"] + shift)
        parts["positive"].append(t["positive"] + shift)
        parts["candidates"].append(t["candidates"] + shift)
        parts["anchor_row_start"].append(t["anchor_row_start"] + pool)
        parts["anchor_row_length"].append(t["anchor_row_length"])
        parts["negative_uniform"].append(t["negative_uniform"])
        rows += s["net_input"]["src_tokens"].size(0)
        pool += len(t["candidates"])
    taco = {k: torch.cat(v) for k, v in parts.items()}
    taco.update(skipped=0, update_totals=torch.ones(2))
    merged["taco"] = taco
    return merged


@pytest.fixture(scope="module")
def two_workers(tiny_databin):
    return [rank["cross-worker"] for rank in worker_results(tiny_databin)]


def _reference(tiny_databin, state, sample):
    _, _, model, criterion = fairseq_setup(
        tiny_databin, "--tc-cross-worker-negatives", "--sample-break-mode", "none", *NO_DROPOUT
    )
    model.load_state_dict(state)
    model.zero_grad()
    losses = criterion.compute_losses(model, sample)
    losses.tc_loss.backward()
    grad = [torch.zeros_like(p) if p.grad is None else p.grad for p in model.parameters()]
    return losses, grad


def test_two_workers_equal_one_worker_holding_both_batches(two_workers, tiny_databin):
    ranks = two_workers
    for name, a in ranks[0]["model"].items():  # the same initial model on both ranks
        assert torch.equal(a, ranks[1]["model"][name])
    merged = _merge([r["sample"] for r in ranks])
    losses, grad = _reference(tiny_databin, ranks[0]["model"], merged)
    steps = [r["steps"][0] for r in ranks]
    assert all(s["anchors"] > 0 for s in steps)
    assert losses.num_anchors == sum(s["anchors"] for s in steps)
    torch.testing.assert_close(
        losses.tc_loss, sum(s["tc_loss"] for s in steps), rtol=1e-5, atol=0
    )
    # keys carry no gradient, so each worker's anchors give its share of the gradient
    scale = max(float(g.abs().max()) for g in grad)
    for ref, g0, g1 in zip(grad, steps[0]["grad"], steps[1]["grad"]):
        torch.testing.assert_close(g0 + g1, ref, rtol=1e-4, atol=1e-6 * scale)


def test_dummy_batch_shares_no_keys(two_workers, tiny_databin):
    """With rank 1 on fairseq's padding batch, rank 0 draws only from its own batch."""
    rank0 = two_workers[0]
    sample = {**rank0["sample"]}
    sample["taco"] = {**sample["taco"], "update_totals": torch.ones(2), "dummy": False}
    losses, _ = _reference(tiny_databin, rank0["model"], sample)
    torch.testing.assert_close(rank0["steps"][1]["tc_loss"], losses.tc_loss, rtol=1e-5, atol=0)
    # and differs from the step whose negatives came from both workers
    assert not torch.isclose(rank0["steps"][0]["tc_loss"], losses.tc_loss, rtol=1e-3)


def test_fairseq_train_with_one_sequence_per_worker(tiny_databin, tmp_path):
    """--batch-size 1: each worker holds one sequence, yet every anchor gets negatives."""
    args = train_args(tiny_databin, tmp_path, "--tc-cross-worker-negatives", "--batch-size",
                      "1", "--max-update", "3", "--log-interval", "1", "--disable-validation",
                      "--save-interval-updates", "0")
    rank0, _ = fairseq_train_ranks(args)
    records = [json.loads(line.split("train_inner | ")[1])
               for line in rank0.splitlines() if "train_inner | " in line]
    assert [r["num_updates"] for r in records] == ["1", "2", "3"]
    for r in records:
        assert r["bsz"] == "2" and r["tc_skipped"] == "0"
        assert int(r["tc_anchors"]) > 0 and math.isfinite(float(r["tc_loss"]))


def test_needs_detached_keys(tiny_databin):
    with pytest.raises(ValueError, match="--tc-cross-worker-negatives needs tc_detach_keys"):
        fairseq_setup(tiny_databin, "--tc-cross-worker-negatives", "--tc-detach-keys")
