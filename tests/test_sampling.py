"""TACO's positive/negative sampling: invariants on random padded batches, the distributions
of positives and negatives, and the one "uniform outside the anchor's row" rule shared with the
cross-worker negatives (:func:`taco_fairseq.distributed.global_negative_index`)."""

import numpy as np
import pytest
import torch

from taco_fairseq.distributed import global_negative_index
from taco_fairseq.sampling import SamplingOptions, outside_row, sample_positions, uniform_below

ACROSS_WORKERS = SamplingOptions(3, 4, cross_worker=True)


def random_batch(rng, max_batch=6, max_len=12, hole_prob=0.0):
    batch = rng.integers(1, max_batch + 1)
    seq_len = rng.integers(1, max_len + 1)
    lengths = rng.integers(0, seq_len + 1, size=batch)
    candidate = np.arange(seq_len)[None, :] < lengths[:, None]  # right padding
    if hole_prob:  # e.g. excluded special tokens inside a row
        candidate &= rng.random(candidate.shape) >= hole_prob
    anchor_mask = candidate & (rng.random(candidate.shape) < 0.7)
    return candidate, anchor_mask


@pytest.mark.parametrize("window", [3, 5, 11])
@pytest.mark.parametrize("hole_prob", [0.0, 0.2])
def test_invariants_on_random_padded_batches(window, hole_prob):
    rng = np.random.default_rng(window)
    for trial in range(300):
        candidate, anchor_mask = random_batch(rng, hole_prob=hole_prob)
        k = int(rng.integers(1, 8))
        out = sample_positions(candidate, anchor_mask, SamplingOptions(window, k), rng)
        seq_len = candidate.shape[1]
        flat = candidate.ravel()
        rows_with_tokens = candidate.sum(1)
        row = out.anchor // seq_len

        # anchors: exactly the asked positions whose row has a positive and negatives
        eligible = (rows_with_tokens >= 2) & (candidate.sum() - rows_with_tokens >= 1)
        expected = np.flatnonzero(anchor_mask & candidate & eligible[:, None])
        assert np.array_equal(out.anchor, expected)
        assert out.negative.shape == (len(out.anchor), k)

        # positives: same row, not the anchor, a real token
        assert np.array_equal(out.positive // seq_len, row)
        assert not np.any(out.positive == out.anchor)
        assert flat[out.positive].all()
        # an anchor whose whole window is real tokens never falls back
        half = window // 2
        column = out.anchor % seq_len
        padded = np.pad(candidate, ((0, 0), (half, half)))
        window_full = np.array(
            [padded[r, c:c + window].all() for r, c in zip(row, column)], dtype=bool
        )
        offset = out.positive - out.anchor
        assert np.all(np.abs(offset[window_full]) <= half)

        # negatives: real tokens of other rows, sorted per anchor
        assert flat[out.negative].all()
        assert np.all(out.negative // seq_len != row[:, None])
        assert np.all(np.diff(out.negative, axis=1) >= 0)


def test_single_sequence_and_length_one_rows_have_no_anchors():
    rng = np.random.default_rng(0)
    one_row = np.ones((1, 6), dtype=bool)
    assert len(sample_positions(one_row, one_row, SamplingOptions(5, 3), rng).anchor) == 0
    # row 0 has one token (no positive), row 1 is empty: only row 2 anchors
    candidate = np.array([[1, 0, 0], [0, 0, 0], [1, 1, 1]], dtype=bool)
    out = sample_positions(candidate, candidate, SamplingOptions(3, 4), rng)
    assert out.anchor.tolist() == [6, 7, 8]
    assert np.all(out.negative == 0)  # the only other token


def test_offsets_are_uniform_over_the_window_without_zero():
    rng = np.random.default_rng(1)
    candidate = np.ones((2, 400), dtype=bool)
    anchor_mask = np.zeros_like(candidate)
    anchor_mask[:, 50:350] = True  # far from the edges: no fallback
    offsets = []
    for _ in range(20):
        out = sample_positions(candidate, anchor_mask, SamplingOptions(5, 1), rng)
        offsets.append(out.positive - out.anchor)
    values, counts = np.unique(np.concatenate(offsets), return_counts=True)
    assert values.tolist() == [-2, -1, 1, 2]
    share = counts / counts.sum()
    assert np.all(np.abs(share - 0.25) < 0.01)  # 12,000 draws: sd of a share is ~0.004


def test_fallback_is_uniform_over_the_other_tokens_of_the_row():
    rng = np.random.default_rng(2)
    candidate = np.zeros((2, 8), dtype=bool)
    candidate[:, :4] = True
    anchor_mask = np.zeros_like(candidate)
    anchor_mask[0, 0] = True  # offsets -2, -1 leave the row: half of the draws fall back
    positives = np.concatenate(
        [sample_positions(candidate, anchor_mask, SamplingOptions(5, 1), rng).positive
         for _ in range(4000)]
    )
    values, counts = np.unique(positives, return_counts=True)
    assert values.tolist() == [1, 2, 3]
    # window: 1 and 2 with 1/4 each; fallback (1/2) spread evenly over 1, 2, 3
    expected = np.array([1 / 4 + 1 / 6, 1 / 4 + 1 / 6, 1 / 6])
    assert np.all(np.abs(counts / counts.sum() - expected) < 0.025)


def test_negatives_are_uniform_over_other_rows_tokens():
    rng = np.random.default_rng(3)
    candidate = np.zeros((3, 4), dtype=bool)
    candidate[0, :2] = candidate[1, :4] = candidate[2, :1] = True
    anchor_mask = np.zeros_like(candidate)
    anchor_mask[0, 0] = True
    out = sample_positions(candidate, anchor_mask, SamplingOptions(3, 20000), rng)
    values, counts = np.unique(out.negative, return_counts=True)
    assert values.tolist() == [4, 5, 6, 7, 8]  # row 1 (4 tokens) and row 2 (1 token)
    assert np.all(np.abs(counts / counts.sum() - 0.2) < 0.01)


def test_same_generator_state_gives_same_samples():
    candidate, anchor_mask = random_batch(np.random.default_rng(4))
    options = SamplingOptions(5, 6)
    a = sample_positions(candidate, anchor_mask, options, np.random.default_rng(7))
    b = sample_positions(candidate, anchor_mask, options, np.random.default_rng(7))
    c = sample_positions(candidate, anchor_mask, options, np.random.default_rng(8))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert len(a.anchor) == 0 or not np.array_equal(a.negative, c.negative)


@pytest.mark.parametrize("cross_worker", [False, True])
def test_masks_of_other_shapes_raise(cross_worker):
    """(W and K are checked once, where the task declares --tc-window and --tc-negatives:
    test_bad_input.py.)"""
    candidate = np.ones((2, 3), dtype=bool)
    with pytest.raises(ValueError, match=r"must both be \[batch, seq_len\]"):
        sample_positions(candidate, candidate[:, :2], SamplingOptions(5, 3, cross_worker),
                         np.random.default_rng())


def test_outside_row_skips_the_block_on_numpy_and_torch():
    # a pool of 7 whose block [2, 5) is left out: draws 0..3 -> 0, 1, 5, 6
    draws = np.arange(4)
    assert outside_row(draws, 2, 3).tolist() == [0, 1, 5, 6]
    assert outside_row(torch.arange(4), torch.tensor(2), torch.tensor(3)).tolist() == [0, 1, 5, 6]
    bound = torch.tensor([3, 1, 0])
    below = uniform_below(torch.tensor([0.999999999, 0.5, 0.3], dtype=torch.float64), bound)
    assert below.tolist() == [2, 0, 0]
    assert uniform_below(torch.tensor([1 - 1e-17], dtype=torch.float64), torch.tensor(5)) == 4


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


def test_one_worker_draws_from_the_local_samplers_distribution():
    """With a single worker the rule is the local sampler's: uniform over the other rows."""
    rng = np.random.default_rng(1)
    candidate = rng.random((4, 7)) < 0.7
    candidate[:, 0] = True
    sampled = sample_positions(candidate, candidate, SamplingOptions(5, 20000, cross_worker=True),
                               rng)
    index = global_negative_index(
        torch.from_numpy(sampled.negative_uniform[:1]),
        torch.from_numpy(sampled.anchor_row_start[:1]),
        torch.from_numpy(sampled.anchor_row_length[:1]),
        pool_sizes=[len(sampled.candidates)], rank=0,
    )
    negatives = sampled.candidates[index.numpy().ravel()]  # of row 0's first token
    other_rows = np.flatnonzero(candidate[1:]) + candidate.shape[1]
    values, counts = np.unique(negatives, return_counts=True)
    assert values.tolist() == other_rows.tolist()
    assert np.all(np.abs(counts / counts.sum() - 1 / len(other_rows)) < 0.02)
    local = sample_positions(candidate, candidate, SamplingOptions(5, 20000), rng).negative[0]
    assert np.unique(local).tolist() == other_rows.tolist()


def test_cross_worker_variates_are_deterministic_and_in_range():
    candidate = np.ones((2, 5), dtype=bool)
    a = sample_positions(candidate, candidate, ACROSS_WORKERS, np.random.default_rng(5))
    b = sample_positions(candidate, candidate, ACROSS_WORKERS, np.random.default_rng(5))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert a.negative_uniform.shape == (10, 4)
    assert np.all((a.negative_uniform >= 0) & (a.negative_uniform < 1))
    one_row = np.ones((1, 5), dtype=bool)  # no local negatives, but anchors: others may have
    assert len(sample_positions(one_row, one_row, ACROSS_WORKERS,
                                np.random.default_rng(0)).anchor) == 5
