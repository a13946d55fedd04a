"""Online diagnostics of the taco and mlm criterions: what they log, that it matches a direct
computation on the batch, and that training is the same with them on or off."""

import pytest
import torch
from fairseq.logging import metrics

from conftest import fairseq_setup, first_batch
from taco_fairseq.analysis.context_logging import INTER_KEY, INTRA_KEY, PAIR_SEED, PAIRS_KEY
from taco_fairseq.diagnostics import pair_measure_sums, sample_context_pairs

PRENORM = ("--arch", "roberta_prenorm", "--encoder-layers", "2", "--encoder-embed-dim", "32",
           "--encoder-ffn-embed-dim", "64", "--encoder-attention-heads", "2")
CRITERIONS = {
    "taco": ("--criterion", "taco"),
    "mlm": ("--task", "masked_lm", "--criterion", "mlm"),
    "mlm+tp": ("--task", "masked_lm", "--criterion", "mlm", "--mlm-positions", "all"),
}


@pytest.mark.parametrize("arch", [(), PRENORM], ids=["postnorm", "prenorm"])
@pytest.mark.parametrize("criterion_name", list(CRITERIONS))
def test_logged_sums_equal_a_direct_computation(tiny_databin, criterion_name, arch):
    _, task, model, criterion = fairseq_setup(tiny_databin, *CRITERIONS[criterion_name], *arch)
    model.eval()
    batch = first_batch(task)
    with torch.no_grad():
        log = criterion(model, batch)[2]
        tokens = batch["net_input"]["src_tokens"]
        features, _ = model(tokens, features_only=True)  # the last-layer states
    dictionary = task.source_dictionary
    valid = tokens.ne(dictionary.pad()) & tokens.ne(dictionary.bos()) & tokens.ne(dictionary.eos())
    pairs = sample_context_pairs(valid, torch.Generator().manual_seed(PAIR_SEED))
    sums = pair_measure_sums(features, pairs)
    assert int(log[PAIRS_KEY]) == int(valid.sum()) > 0  # every token but <s>, </s>, padding
    assert float(log[INTRA_KEY]) == pytest.approx(float(sums.intra["cosine"]), rel=1e-5)
    assert float(log[INTER_KEY]) == pytest.approx(float(sums.inter["cosine"]), rel=1e-5)


@pytest.mark.parametrize("criterion_name", ["taco", "mlm"])
def test_reduced_metrics(tiny_databin, criterion_name):
    _, task, model, criterion = fairseq_setup(tiny_databin, *CRITERIONS[criterion_name])
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


def test_a_logging_interval_without_pairs_logs_none(tiny_databin):
    """E.g. --sample-break-mode eos batches of one-word lines; this stopped training with a
    TypeError in contextual_score."""
    _, task, model, criterion = fairseq_setup(tiny_databin)
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
def test_training_is_the_same_without_diagnostics(tiny_databin, criterion_name):
    results = []
    for extra in ((), ("--no-context-similarity",)):
        torch.manual_seed(1)  # the same initial model
        _, task, model, criterion = fairseq_setup(tiny_databin, *CRITERIONS[criterion_name],
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
