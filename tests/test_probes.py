"""Frozen-encoder probes, unsupervised STS-B and neighbour attention
(taco_fairseq/glue/probes.py), and the initialization checkpoint of a comparison run
(taco_fairseq/comparison/pretraining.py:save_initialization)."""

import csv
import math

import numpy as np
import pytest
import torch

from taco_fairseq.analysis.batching import length_batches
from taco_fairseq.glue.probes import (
    PROBE_TASKS,
    ProbeOptions,
    mean_states,
    neighbour_attention,
    probe_tasks,
    read_split,
    subsample,
    with_bos,
)
from taco_fairseq.glue.tasks import get_task
from taco_fairseq.neighbour_attention import head_weights

from conftest import fairseq_setup

#: Enough training examples per task for stable probes, few enough for a fast test.
MAX_TRAIN = 1500


def test_length_batches_group_by_length_within_the_budget():
    lengths = [5, 40, 3, 40, 7, 12, 3, 100]
    batches = length_batches(lengths, batch_tokens=80)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert all(len(b) == 1 or len(b) * max(lengths[i] for i in b) <= 80 for b in batches)
    flat = [lengths[i] for b in batches for i in b]
    assert flat == sorted(flat)
    assert batches == length_batches(lengths, batch_tokens=80)


def test_subsample_is_seeded_sorted_and_without_replacement():
    a = subsample(1000, 100, seed=1)
    assert len(set(a.tolist())) == 100 and list(a) == sorted(a) and a.max() < 1000
    assert np.array_equal(a, subsample(1000, 100, seed=1))
    assert not np.array_equal(a, subsample(1000, 100, seed=2))
    assert np.array_equal(subsample(50, 100, seed=1), np.arange(50))
    assert np.array_equal(subsample(50, None, seed=1), np.arange(50))


@pytest.fixture(scope="module")
def random_model(synthetic_databin):
    _, task, model, _ = fairseq_setup(synthetic_databin)
    model.eval()
    return model, task.source_dictionary


def _sentences(dictionary, lengths, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.cat([torch.tensor([dictionary.bos()]),
                       torch.randint(dictionary.nspecial, len(dictionary) - 1, (n,),
                                     generator=generator),
                       torch.tensor([dictionary.eos()])]) for n in lengths]


def test_per_head_weights_average_to_fairseqs_attention_weights(random_model):
    model, dictionary = random_model
    layer = model.encoder.sentence_encoder.layers[0]
    tokens = torch.nn.utils.rnn.pad_sequence(_sentences(dictionary, [9, 4, 20]),
                                             batch_first=True, padding_value=dictionary.pad())
    x = torch.randn(tokens.size(1), tokens.size(0), layer.self_attn.embed_dim)
    padding = tokens.eq(dictionary.pad())
    with torch.no_grad():
        _, fairseq_weights = layer.self_attn(query=x, key=x, value=x, key_padding_mask=padding,
                                             need_weights=True)
        ours = head_weights(layer.self_attn, x, padding)
    assert ours.shape == (3, layer.self_attn.num_heads, tokens.size(1), tokens.size(1))
    torch.testing.assert_close(ours.mean(1), fairseq_weights, rtol=1e-5, atol=1e-6)
    assert float(ours[padding[:, None, None, :].expand_as(ours)].abs().max()) == 0.0


def test_uniform_attention_gives_the_uniform_reference(random_model):
    model, dictionary = random_model
    sentences = _sentences(dictionary, [3, 10, 25, 60])
    measured = neighbour_attention(model, sentences, dictionary)
    assert 0 < measured["neighbour_attention"] < 1
    assert 0 < measured["attention_entropy"] <= math.log2(62) + 1e-6
    pieces = 3 + 10 + 25 + 60
    uniform = sum(n * 2 / (n + 2) for n in (3, 10, 25, 60)) / pieces
    assert measured["neighbour_attention_uniform"] == pytest.approx(uniform)
    assert measured["attention_entropy_uniform"] == pytest.approx(
        sum(n * math.log2(n + 2) for n in (3, 10, 25, 60)) / pieces)
    # q = 0: every score is equal, so the attention is uniform and meets the reference
    flat = {k: v.clone() for k, v in model.state_dict().items()}
    try:
        with torch.no_grad():
            for layer in model.encoder.sentence_encoder.layers:
                layer.self_attn.q_proj.weight.zero_()
                layer.self_attn.q_proj.bias.zero_()
        uniform_model = neighbour_attention(model, sentences, dictionary)
    finally:
        model.load_state_dict(flat)
    assert uniform_model["neighbour_attention"] == pytest.approx(uniform, rel=1e-5)
    assert uniform_model["attention_entropy"] == pytest.approx(
        measured["attention_entropy_uniform"], rel=1e-5)
    for layer in (1, 2):
        assert uniform_model[f"neighbour_attention_layer{layer}"] == pytest.approx(uniform,
                                                                                   rel=1e-5)


def test_mean_states_leave_out_special_tokens_and_padding(random_model):
    model, dictionary = random_model
    sentences = _sentences(dictionary, [4, 30, 4])
    together = mean_states(model, sentences, dictionary, batch_tokens=4096)
    alone = np.stack([mean_states(model, [s], dictionary)[0] for s in sentences])
    np.testing.assert_allclose(together, alone, rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        states = model(sentences[1][None], features_only=True)[0][0, 1:-1]
    np.testing.assert_allclose(together[1], states.double().mean(0).numpy(), rtol=1e-5,
                               atol=1e-6)


def test_the_prepared_splits_are_read_with_their_labels(glue_databin, tiny_databin):
    from fairseq.data import Dictionary

    dictionary = Dictionary.load(str(tiny_databin / "dict.txt"))
    rte = read_split(get_task("RTE"), glue_databin / "RTE", "valid", dictionary)
    assert len(rte.inputs) == 2 and len(rte.targets) == 277 and set(rte.targets) == {0, 1}
    assert all(int(s[-1]) == dictionary.eos() for s in rte.inputs[1])
    sts = read_split(get_task("STS-B"), glue_databin / "STS-B", "valid", dictionary)
    assert len(sts.targets) == 1500 and 0 <= sts.targets.min() and sts.targets.max() <= 5
    cut = with_bos(rte.inputs[0], dictionary, 16)
    assert max(len(s) for s in cut) == 16
    assert all(int(s[0]) == dictionary.bos() and int(s[-1]) == dictionary.eos() for s in cut)


@pytest.fixture(scope="module")
def probed(trained_checkpoint, tiny_databin, glue_databin):
    """The probes of the 20-update TACO run's last checkpoint, of its initialization, and of
    the last checkpoint again."""
    from taco_fairseq.analysis.checkpoints import load_checkpoint

    options = ProbeOptions(max_train=MAX_TRAIN)
    path = trained_checkpoint / "checkpoint_last.pt"
    rows = []
    for _ in range(2):
        rows.append(probe_tasks(load_checkpoint(path, tiny_databin), glue_databin, options))
    return rows


def test_probe_scores_are_in_range_and_deterministic(probed):
    first, again = probed
    assert first == again  # bit for bit, from a fresh load of the checkpoint
    for task in PROBE_TASKS:
        assert 0 <= first[f"probe_{task}"] <= 100 or (
            task in ("CoLA", "STS-B") and -100 <= first[f"probe_{task}"] <= 100)
    # above chance where chance is clear: accuracy on the balanced SST-2, F1 on MRPC
    assert first["probe_SST-2"] > 55
    assert first["probe_MRPC"] > 60
    assert first["probe_average"] == pytest.approx(
        np.mean([first[f"probe_{t}"] for t in PROBE_TASKS]))
    assert -100 <= first["sts_unsupervised"] <= 100


def test_the_command_names_a_task_that_is_not_prepared(trained_checkpoint, tiny_databin,
                                                       tmp_path, capsys):
    from taco_fairseq.cli.probes import main

    with pytest.raises(SystemExit) as exit_info:
        main([str(trained_checkpoint / "checkpoint_last.pt"), "--data-bin", str(tiny_databin),
              "--glue-data", str(tmp_path), "--tasks", "RTE", "--output",
              str(tmp_path / "probes.csv")])
    assert exit_info.value.code == 2
    assert f"{tmp_path / 'RTE'}: RTE is not prepared" in capsys.readouterr().err
    assert not (tmp_path / "probes.csv").exists()


def test_an_undefined_probe_score_counts_as_zero_with_a_warning(
        trained_checkpoint, tiny_databin, glue_databin, monkeypatch, caplog):
    """A probe on constant features predicts one STS-B score for every pair: its Spearman is
    NaN. probe_tasks counts it as 0 points (GLUE's convention), with a warning naming the
    checkpoint and the task, so that no pre-training seed drops out of the paired tests."""
    import logging

    from taco_fairseq.analysis.checkpoints import load_checkpoint
    from taco_fairseq.glue import probes

    sts = get_task("STS-B")
    constant = probes.fit_probe(sts, np.zeros((40, 3)), np.linspace(0, 5, 40),
                                np.zeros((10, 3)), np.linspace(0, 5, 10),
                                ProbeOptions(folds=2))
    assert math.isnan(constant["score"])
    monkeypatch.setattr(probes, "fit_probe", lambda *args, **kwargs: constant)
    monkeypatch.setattr(probes, "cosine_spearman", lambda u, v, gold: math.nan)
    path = trained_checkpoint / "checkpoint_last.pt"
    with caplog.at_level(logging.WARNING, logger="taco_fairseq.glue.probes"):
        row = probes.probe_tasks(load_checkpoint(path, tiny_databin), glue_databin,
                                 ProbeOptions(tasks=("STS-B",), max_train=100))
    assert row == {"probe_STS-B": 0.0, "sts_unsupervised": 0.0, "probe_average": 0.0}
    assert f"{path}: the STS-B probe's spearman is undefined" in caplog.text
    assert f"{path}: the unsupervised STS-B is undefined" in caplog.text


def test_the_probes_cross_validation_scores_by_the_official_metric():
    """fit_probe chooses its regularization by the GLUE metric of the task on class indices:
    F1 of MRPC's positive class ("1") is the F1 that score_predictions gives on the labels."""
    from taco_fairseq.glue.metrics import metric_functions, score_predictions

    for name, metric in (("MRPC", "f1"), ("CoLA", "mcc"), ("RTE", "accuracy")):
        task = get_task(name)
        gold, predicted = [0, 1, 1, 0, 1, 1], [0, 1, 0, 1, 1, 1]
        positive = task.labels.index("1") if metric == "f1" else None
        as_labels = [[task.labels[i] for i in v] for v in (predicted, gold)]
        assert 100 * metric_functions(task, positive)[metric](gold, predicted) == (
            score_predictions(task, *as_labels)[metric])
