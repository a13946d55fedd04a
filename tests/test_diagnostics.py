"""Intra/inter-context similarity: pair sampling and cosine sums against direct numpy
computations, and the online diagnostics of the taco and mlm criteria: what they log, that it
matches a direct computation on the batch, and that training is the same with them on or off."""

import numpy as np
import pytest
import torch
from fairseq.logging import metrics
from scipy import stats

from conftest import fairseq_setup, first_batch
from taco_fairseq.diagnostics import (
    INTER_KEY,
    INTRA_KEY,
    PAIR_SEED,
    PAIRS_KEY,
    pair_sums,
    sample_context_pairs,
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


def test_cosine_sums_match_numpy_on_the_same_pairs():
    rng = np.random.default_rng(0)
    states = torch.from_numpy(rng.normal(size=(4, 6, 8)).astype(np.float32))
    pairs = _draws(VALID, 1)[0]
    count, intra, inter = pair_sums(states, pairs)
    flat = states.flatten(0, 1).double().numpy()
    anchors = pairs.anchor.flatten().numpy()
    a = flat[anchors]
    for got, partner in ((intra, pairs.intra), (inter, pairs.inter)):
        b = flat[partner.flatten().numpy()[anchors]]
        cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
        np.testing.assert_allclose(float(got), cos.sum(), rtol=1e-5)
    assert int(count) == anchors.sum() == 5


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="bool"):
        sample_context_pairs(VALID.long(), torch.Generator())
    with pytest.raises(ValueError, match="batch, seq_len, hidden"):
        pair_sums(torch.zeros(4, 5, 8), _draws(VALID, 1)[0])


PRENORM = ("--arch", "roberta_prenorm", "--encoder-layers", "2", "--encoder-embed-dim", "32",
           "--encoder-ffn-embed-dim", "64", "--encoder-attention-heads", "2")
CRITERIONS = {
    "taco": ("--criterion", "taco"),
    "mlm": ("--task", "masked_lm", "--criterion", "mlm"),
    "mlm+tp": ("--task", "masked_lm", "--criterion", "mlm", "--mlm-positions", "all"),
}


@pytest.mark.parametrize("arch", [(), PRENORM], ids=["postnorm", "prenorm"])
@pytest.mark.parametrize("criterion_name", list(CRITERIONS))
def test_logged_sums_equal_a_direct_computation(synthetic_databin, criterion_name, arch):
    _, task, model, criterion = fairseq_setup(synthetic_databin, *CRITERIONS[criterion_name], *arch)
    model.eval()
    batch = first_batch(task)
    with torch.no_grad():
        log = criterion(model, batch)[2]
        tokens = batch["net_input"]["src_tokens"]
        features, _ = model(tokens, features_only=True)  # the last-layer states
    dictionary = task.source_dictionary
    valid = tokens.ne(dictionary.pad()) & tokens.ne(dictionary.bos()) & tokens.ne(dictionary.eos())
    pairs = sample_context_pairs(valid, torch.Generator().manual_seed(PAIR_SEED))
    _, intra, inter = pair_sums(features, pairs)
    assert int(log[PAIRS_KEY]) == int(valid.sum()) > 0  # every token but <s>, </s>, padding
    assert float(log[INTRA_KEY]) == pytest.approx(float(intra), rel=1e-5)
    assert float(log[INTER_KEY]) == pytest.approx(float(inter), rel=1e-5)


@pytest.mark.parametrize("criterion_name", ["taco", "mlm"])
def test_reduced_metrics(synthetic_databin, criterion_name):
    _, task, model, criterion = fairseq_setup(synthetic_databin, *CRITERIONS[criterion_name])
    model.eval()
    itr = task.get_batch_iterator(task.dataset("valid"), max_sentences=4, seed=1)
    batches = itr.next_epoch_itr(shuffle=False)
    logs = [criterion(model, next(batches))[2] for _ in range(2)]
    with metrics.aggregate() as agg:
        criterion.reduce_metrics(logs)
        values = agg.get_smoothed_values()
    pairs = sum(int(log[PAIRS_KEY]) for log in logs)
    intra = sum(float(log[INTRA_KEY]) for log in logs) / pairs
    inter = sum(float(log[INTER_KEY]) for log in logs) / pairs
    assert values["intra_context_cos"] == pytest.approx(intra, abs=1e-4)
    assert values["inter_context_cos"] == pytest.approx(inter, abs=1e-4)
    assert values["contextual_score"] == pytest.approx(intra - inter, abs=2e-4)


def test_a_logging_interval_without_pairs_logs_none(synthetic_databin):
    """E.g. --sample-break-mode eos batches of one-word lines; this stopped training with a
    TypeError in contextual_score."""
    _, task, model, criterion = fairseq_setup(synthetic_databin)
    model.eval()
    log = criterion(model, first_batch(task))[2]
    with metrics.aggregate() as agg:
        criterion.reduce_metrics([log])
        agg.reset()  # as fairseq does after each logged interval
        criterion.reduce_metrics([{**log, PAIRS_KEY: 0, INTRA_KEY: 0, INTER_KEY: 0}])
        values = agg.get_smoothed_values()
    assert values["contextual_score"] is None and values["intra_context_cos"] is None
    assert values["tc_loss"] > 0


@pytest.mark.parametrize("criterion_name", ["taco", "mlm"])
def test_training_is_the_same_without_diagnostics(synthetic_databin, criterion_name):
    results = []
    for extra in ((), ("--no-context-similarity",)):
        torch.manual_seed(1)  # the same initial model
        _, task, model, criterion = fairseq_setup(synthetic_databin, *CRITERIONS[criterion_name],
                                                  *extra)
        model.train()  # dropout on: the diagnostics must not consume the global RNG
        batch = first_batch(task)
        torch.manual_seed(0)
        loss, _, log = criterion(model, batch)
        loss.backward()
        results.append((loss.detach(), [p.grad for p in model.parameters()], log))
    (loss_on, grads_on, log_on), (loss_off, grads_off, log_off) = results
    assert PAIRS_KEY in log_on and PAIRS_KEY not in log_off
    assert torch.equal(loss_on, loss_off)
    assert all(torch.equal(a, b) for a, b in zip(grads_on, grads_off))
    with metrics.aggregate() as agg:
        criterion.reduce_metrics([log_off])
        assert "intra_context_cos" not in agg.get_smoothed_values()
