"""Intra/inter-context pair sampling and pair measures against direct numpy computations."""

import numpy as np
import pytest
import torch
from scipy import stats

from taco_fairseq.diagnostics import (
    MEASURES,
    add_sums,
    pair_measure_sums,
    sample_context_pairs,
    summarize,
)

VALID = torch.tensor(
    [
        [0, 1, 1, 1, 0, 0],  # three tokens
        [1, 1, 0, 0, 0, 0],  # two tokens
        [0, 0, 0, 0, 0, 0],  # none
        [1, 0, 0, 0, 0, 0],  # one token: no intra partner, still an inter partner
    ],
    dtype=torch.bool,
)


def _draws(valid, n, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [sample_context_pairs(valid, generator) for _ in range(n)]


def test_partners_are_other_tokens_of_the_same_and_of_other_rows():
    seq_len = VALID.size(1)
    flat_valid = VALID.flatten()
    for pairs in _draws(VALID, 200):
        expected_anchor = VALID & (VALID.sum(1, keepdim=True) >= 2)
        assert torch.equal(pairs.anchor, expected_anchor)
        for index in pairs.anchor.flatten().nonzero().flatten().tolist():
            intra, inter = int(pairs.intra.flatten()[index]), int(pairs.inter.flatten()[index])
            assert flat_valid[intra] and flat_valid[inter]
            assert intra != index and intra // seq_len == index // seq_len
            assert inter // seq_len != index // seq_len


def test_partners_are_uniform():
    """Chi-square test of the partner counts of every anchor against the uniform distribution
    over its candidates (fails for an off-by-one in the rank arithmetic)."""
    seq_len = VALID.size(1)
    flat_valid = VALID.flatten().nonzero().flatten().tolist()
    draws = _draws(VALID, 3000)
    for index in draws[0].anchor.flatten().nonzero().flatten().tolist():
        row = index // seq_len
        candidates = {
            "intra": [i for i in flat_valid if i // seq_len == row and i != index],
            "inter": [i for i in flat_valid if i // seq_len != row],
        }
        for kind, allowed in candidates.items():
            drawn = [int(getattr(p, kind).flatten()[index]) for p in draws]
            counts = [drawn.count(i) for i in allowed]
            assert sum(counts) == len(draws)  # nothing outside the candidates
            if len(allowed) > 1:
                assert stats.chisquare(counts).pvalue > 1e-3, (index, kind, counts)


def test_one_context_or_single_tokens_give_no_anchor():
    one_row = torch.tensor([[1, 1, 1, 0]], dtype=torch.bool)
    assert not _draws(one_row, 1)[0].anchor.any()
    singles = torch.tensor([[1, 0], [1, 0]], dtype=torch.bool)
    assert not _draws(singles, 1)[0].anchor.any()


def test_sampling_is_seeded_and_leaves_the_global_rng_alone():
    torch.manual_seed(123)
    before = torch.get_rng_state()
    first, second = _draws(VALID, 1, seed=5)[0], _draws(VALID, 1, seed=5)[0]
    assert torch.equal(torch.get_rng_state(), before)
    assert all(torch.equal(a, b) for a, b in zip(first, second))


def test_measure_sums_and_ratios_match_numpy_on_the_same_pairs():
    rng = np.random.default_rng(0)
    states = torch.from_numpy(rng.normal(size=(4, 6, 8)).astype(np.float32))
    pairs = _draws(VALID, 1)[0]
    sums = pair_measure_sums(states, pairs, MEASURES)

    flat = states.flatten(0, 1).double().numpy()
    anchors = pairs.anchor.flatten().numpy()
    a = flat[anchors]

    def measures(b):
        return {
            "cosine": (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1),
            "dot": (a * b).sum(1),
            "l1": np.abs(a - b).sum(1),
            "l2": np.sqrt(((a - b) ** 2).sum(1)),
            "l10": (np.abs(a - b) ** 10).sum(1) ** 0.1,
        }

    intra = measures(flat[pairs.intra.flatten().numpy()[anchors]])
    inter = measures(flat[pairs.inter.flatten().numpy()[anchors]])
    assert int(sums.count) == anchors.sum() == 5
    for m in MEASURES:
        np.testing.assert_allclose(float(sums.intra[m]), intra[m].sum(), rtol=1e-5)
        np.testing.assert_allclose(float(sums.inter[m]), inter[m].sum(), rtol=1e-5)

    row = summarize(sums)
    assert row["pairs"] == 5
    for m in MEASURES:
        assert row[f"{m}_intra"] == pytest.approx(intra[m].mean(), rel=1e-5)
        assert row[f"{m}_inter"] == pytest.approx(inter[m].mean(), rel=1e-5)
        assert row[f"{m}_gap"] == pytest.approx(intra[m].mean() - inter[m].mean(), abs=1e-5)
        assert row[f"{m}_ratio"] == pytest.approx(intra[m].mean() / inter[m].mean(), rel=1e-5)


def test_sums_add_up():
    states = torch.randn(4, 6, 8, generator=torch.Generator().manual_seed(1))
    first, second = _draws(VALID, 2)
    a, b = (pair_measure_sums(states, p, ("cosine", "l2")) for p in (first, second))
    total = add_sums(a, b)
    assert int(total.count) == int(a.count) + int(b.count)
    assert float(total.inter["l2"]) == pytest.approx(float(a.inter["l2"]) + float(b.inter["l2"]))


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="bool"):
        sample_context_pairs(VALID.long(), torch.Generator())
    pairs = _draws(VALID, 1)[0]
    with pytest.raises(ValueError, match="unknown measures"):
        pair_measure_sums(torch.zeros(4, 6, 8), pairs, ("cosine", "l3"))
    with pytest.raises(ValueError, match="batch, seq_len, hidden"):
        pair_measure_sums(torch.zeros(4, 5, 8), pairs)
    no_pairs = pair_measure_sums(torch.zeros(1, 3, 8), _draws(VALID[:1, :3], 1)[0])
    with pytest.raises(ValueError, match="no intra/inter-context pairs"):
        summarize(no_pairs)
