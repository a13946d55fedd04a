"""The ``taco`` and ``mlm`` criteria with the ``taco_masked_lm`` task on a synthetic data-bin:
the masked-LM loss, the objective of an update, logged metrics, options and errors, and finite
losses and gradients in every precision and TC variant (property-based, hypothesis)."""

import copy
import logging
import math
import re

import pytest
import torch
from fairseq.criterions.masked_lm import MaskedLmConfig, MaskedLmLoss
from fairseq.logging import metrics
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from batches import FixedBatch, masked_lm_batches
from conftest import USER_DIR, first_batch, fairseq_setup
from taco_fairseq.criterion import TC_EMBEDDINGS, check_temperature
from taco_fairseq.data import TC_POSITIONS, ContrastiveSamplingDataset
from taco_fairseq.diagnostics import last_layer_states
from taco_fairseq.loss import global_bias
from taco_fairseq.sampling import SamplingOptions
from taco_fairseq.totals import UpdateTotals

NO_DROPOUT = ("--dropout", "0", "--attention-dropout", "0")


@pytest.mark.parametrize(
    "options",
    [("--tc-weight", "0"), ("--task", "masked_lm", "--criterion", "mlm")],
    ids=["taco-zero-weight", "mlm-masked-positions"],
)
def test_gives_masked_lm_loss_and_gradients(synthetic_databin, options):
    _, task, model, taco = fairseq_setup(synthetic_databin, *options)
    masked_lm = MaskedLmLoss(MaskedLmConfig(tpu=False), task)
    batch = first_batch(task)
    model.train()  # dropout on: the same seed must give the same masks in both

    results = []
    for criterion in (taco, masked_lm):
        model.zero_grad()
        torch.manual_seed(0)
        loss, sample_size, _ = criterion(model, batch)
        loss.backward()
        results.append((loss.detach(), sample_size, [p.grad.clone() for p in model.parameters()]))
    (loss_taco, size_taco, grad_taco), (loss_mlm, size_mlm, grad_mlm) = results
    assert loss_taco.item() > 0
    torch.testing.assert_close(loss_taco, loss_mlm, rtol=1e-6, atol=0)
    assert int(size_taco) == int(size_mlm)
    for a, b in zip(grad_taco, grad_mlm):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-9)


class _Backward:
    """The one optimizer method ``FairseqTask.train_step`` calls."""

    @staticmethod
    def backward(loss):
        loss.backward()


@pytest.mark.parametrize("update_freq", [1, 3])
def test_update_gradient_is_mean_mlm_plus_weighted_mean_tc(synthetic_databin, update_freq):
    """fairseq sums the batch losses of an update and divides by the summed sample size; the
    result must be the gradient of  Σ MLM / masked tokens + λ · Σ TC / anchors  of the update."""
    weight = 0.7
    _, task, model, criterion = fairseq_setup(
        synthetic_databin, "--tc-weight", str(weight), "--update-freq", str(update_freq), *NO_DROPOUT
    )
    itr = task.get_batch_iterator(task.dataset("valid"), max_sentences=3, seed=1)
    batches = list(_take(itr.next_epoch_itr(shuffle=False), update_freq))
    counts = [(int(b["target"].ne(task.dictionary.pad()).sum()), len(b["taco"].anchor))
              for b in batches]
    masked, anchors = map(sum, zip(*counts))
    assert [b["update_totals"] for b in batches] == [
        UpdateTotals(masked, anchors, index, update_freq) for index in range(update_freq)]

    # as fairseq's trainer: one update over the batches
    model.zero_grad()
    sample_size = 0
    for b in batches:
        _, size, _ = task.train_step(b, model, criterion, _Backward, update_num=0)
        sample_size += int(size)
    assert not any(b["taco"].training for b in batches)  # train_step trained on copies
    fairseq_grad = [p.grad / sample_size for p in model.parameters()]

    # the objective, written out
    model.zero_grad()
    parts = [criterion.compute_losses(model, b) for b in batches]
    objective = sum(p.mlm_loss for p in parts) / masked + weight * sum(
        p.tc_loss for p in parts
    ) / anchors
    objective.backward()
    assert sample_size == masked
    scale = max(float(p.grad.abs().max()) for p in model.parameters())
    for a, p in zip(fairseq_grad, model.parameters()):  # up to fp32 summation-order noise
        torch.testing.assert_close(a, p.grad, rtol=1e-4, atol=1e-6 * scale)


def _take(iterator, n):
    for _ in range(n):
        yield next(iterator)


def test_logged_metrics(synthetic_databin):
    _, task, model, criterion = fairseq_setup(synthetic_databin, "--tc-weight", "0.5")
    model.eval()
    itr = task.get_batch_iterator(task.dataset("valid"), max_sentences=4, seed=1)
    logs = [criterion(model, b)[2] for b in _take(itr.next_epoch_itr(shuffle=False), 2)]
    with metrics.aggregate() as agg:
        criterion.reduce_metrics(logs)
        values = agg.get_smoothed_values()
    masked = sum(int(log["sample_size"]) for log in logs)
    anchors = sum(log["tc_anchors"] for log in logs)
    mlm_bits = sum(float(log["mlm_loss"]) for log in logs) / masked / math.log(2)
    tc_bits = sum(float(log["tc_loss"]) for log in logs) / anchors / math.log(2)
    assert values["mlm_loss"] == pytest.approx(mlm_bits, abs=1e-3)
    assert values["tc_loss"] == pytest.approx(tc_bits, abs=1e-3)
    assert values["loss"] == pytest.approx(mlm_bits + 0.5 * tc_bits, abs=2e-3)
    assert values["ppl"] == pytest.approx(2 ** values["mlm_loss"], rel=1e-2)
    correct = sum(int(log["tc_correct"]) for log in logs)
    assert values["tc_accuracy"] == pytest.approx(correct / anchors, abs=1e-4)
    assert values["tc_anchors"] == anchors  # one reduce_metrics call: one update
    for log in logs:  # summable: numbers only
        assert all(isinstance(v, (int, float, torch.Tensor)) for v in log.values())


def test_a_huge_temperature_pins_the_tc_loss_at_chance(synthetic_databin):
    """What ``check_temperature`` warns about: at τ = 1e5 every anchor's TC loss is log(K + 1)
    nats, chance, whatever the vectors."""
    _, task, model, criterion = fairseq_setup(synthetic_databin, "--tc-temperature", "1e5")
    losses = criterion.compute_losses(model, first_batch(task))
    assert losses.num_anchors > 0
    torch.testing.assert_close(losses.tc_loss / losses.num_anchors, torch.tensor(math.log(51)),
                               rtol=0, atol=1e-4)


@pytest.mark.parametrize("temperature, negatives",
                         [(1e5, 50), (1e3, 5), (0.6, 50), (2.0, 1), (1e9, 50)])
def test_the_temperature_warning_prints_the_loss_bounds_and_their_range(caplog, temperature,
                                                                        negatives):
    """The bounds log2(1 + K·exp(−2/τ)) and log2(K + 1), each the exact value rounded to 6
    decimals, and their distance to 3 significant digits: it tells them apart where 6
    decimals do not (τ = 1e9)."""
    with caplog.at_level(logging.WARNING):
        check_temperature(temperature, negatives)
    found = re.search(r"stays between (\d+\.\d{6}) bits \(perfectly aligned vectors\) and "
                      r"(\d+\.\d{6}) bits \(chance, log2\(K\+1\)\), a range of (\S+) bits",
                      caplog.text)
    assert found, caplog.text
    floor, chance, width = found[1], found[2], float(found[3])
    exact_floor = math.log2(1 + negatives * math.exp(-2 / temperature))
    assert floor == f"{exact_floor:.6f}"
    assert chance == f"{math.log2(negatives + 1):.6f}"
    assert width > 0 and width == pytest.approx(math.log2(negatives + 1) - exact_floor, rel=1e-2)


def test_key_gradients_and_their_deprecated_spelling_train_alike(synthetic_databin, caplog):
    """--tc-key-gradients lets the positives and negatives carry gradient; the deprecated
    --tc-detach-keys (tc_detach_keys false) means the same, with a warning naming the new
    option; without either they are detached. The flags as fairseq's command line parses them,
    the losses and gradients of one batch with the same model."""
    from fairseq import options
    from omegaconf import OmegaConf

    for flag, key_gradients, detach_keys in (("--tc-key-gradients", True, True),
                                             ("--tc-detach-keys", False, False)):
        args = options.parse_args_and_arch(options.get_training_parser(), [
            str(synthetic_databin), "--user-dir", USER_DIR, "--task", "taco_masked_lm",
            "--criterion", "taco", "--arch", "roberta_tiny", flag])
        assert (args.tc_key_gradients, args.tc_detach_keys) == (key_gradients, detach_keys)
    cfg, task, model, _ = fairseq_setup(synthetic_databin, *NO_DROPOUT)
    batch = first_batch(task)
    runs = []  # (tc_key_gradients, loss, gradients): detached, new spelling, old spelling
    with caplog.at_level(logging.WARNING):
        for settings in ({}, {"tc_key_gradients": True}, {"tc_detach_keys": False}):
            assert "deprecated" not in caplog.text  # until the old spelling
            criterion = task.build_criterion(OmegaConf.merge(cfg.criterion, settings))
            model.zero_grad()
            loss, _, _ = criterion(model, batch)
            loss.backward()
            runs.append((criterion.tc_key_gradients, loss.detach(),
                         [p.grad.clone() for p in model.parameters()]))
    assert caplog.text.count("--tc-detach-keys (criterion.tc_detach_keys: false) is deprecated "
                             "and will be removed in the next release: use --tc-key-gradients "
                             "(criterion.tc_key_gradients: true)") == 1
    key_gradients, losses, gradients = zip(*runs)
    assert key_gradients == (False, True, True)
    assert torch.equal(losses[1], losses[2]) and torch.equal(losses[1], losses[0])
    assert all(torch.equal(a, b) for a, b in zip(gradients[1], gradients[2]))
    assert not all(torch.equal(a, b) for a, b in zip(gradients[1], gradients[0]))


def test_single_sequence_batch_skips_tc(synthetic_databin):
    _, task, model, criterion = fairseq_setup(synthetic_databin)
    batch = first_batch(task, batch_size=1)
    loss, _, log = criterion(model, batch)
    assert log["tc_skipped"] == 1 and log["tc_anchors"] == 0
    assert float(log["tc_loss"]) == 0.0 and torch.isfinite(loss)
    loss.backward()
    # the same keys and kinds as a batch with a TC term: fairseq's all_reduce_dict reduces
    # tensors and Python numbers in separate buffers, whose sizes must match on all workers
    _, _, full = criterion(model, first_batch(task, batch_size=4))
    assert full["tc_anchors"] > 0
    kinds = {key: torch.is_tensor(value) for key, value in log.items()}
    assert kinds == {key: torch.is_tensor(value) for key, value in full.items()}


@pytest.mark.parametrize("positions", ["masked", "unmasked"])
def test_positions_option_selects_anchors(synthetic_databin, positions):
    _, task, _, _ = fairseq_setup(synthetic_databin, "--tc-positions", positions)
    batch = first_batch(task)
    masked = batch["target"].ne(task.dictionary.pad()).flatten()
    anchors = batch["taco"].anchor
    assert len(anchors) > 0
    assert bool(masked[anchors].all()) == (positions == "masked")
    assert bool((~masked[anchors]).all()) == (positions == "unmasked")


def test_exclude_special_tokens(synthetic_databin):
    _, task, _, _ = fairseq_setup(synthetic_databin, "--tc-exclude-special-tokens")
    batch = first_batch(task)
    tokens = batch["net_input"]["src_tokens"].flatten()
    special = torch.tensor([task.dictionary.bos(), task.dictionary.eos()])
    taco = batch["taco"]
    for positions in (taco.anchor, taco.positive, taco.negative.flatten()):
        assert not torch.isin(tokens[positions], special).any()
    _, task, _, _ = fairseq_setup(synthetic_databin)
    batch = first_batch(task)
    tokens = batch["net_input"]["src_tokens"].flatten()
    assert torch.isin(tokens[batch["taco"].anchor], special).any()  # default: kept


@pytest.mark.parametrize("arch_args", [("--arch", "roberta_tiny"), (
    "--arch", "roberta_prenorm", "--encoder-layers", "2", "--encoder-embed-dim", "32",
    "--encoder-ffn-embed-dim", "64", "--encoder-attention-heads", "2")])
@pytest.mark.parametrize("embedding", ["layer-output", "token", "original-token"])
def test_global_bias_is_final_features_minus_embedding(synthetic_databin, arch_args, embedding):
    _, task, model, criterion = fairseq_setup(
        synthetic_databin, *arch_args, "--tc-embedding", embedding
    )
    model.eval()
    batch = first_batch(task)
    tokens = batch["net_input"]["src_tokens"]
    features, extra = model(tokens, features_only=True, return_all_hiddens=True)
    encoder = model.encoder.sentence_encoder
    masked = batch["target"].ne(task.dictionary.pad())
    if embedding == "token":  # the input: at most masked positions the <mask> row
        expected_e = encoder.embed_tokens.weight[tokens]
        assert tokens[masked].eq(task.mask_idx).any()
    elif embedding == "original-token":  # the token before masking
        expected_e = encoder.embed_tokens.weight[torch.where(masked, batch["target"], tokens)]
    else:
        x, _ = encoder.forward_embedding(tokens)
        expected_e = x * tokens.ne(task.dictionary.pad()).unsqueeze(-1)
    inner = extra["inner_states"]
    g = global_bias(last_layer_states(model, inner), criterion.static_embedding(
        model, batch, inner)).transpose(0, 1)
    torch.testing.assert_close(g, features - expected_e, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("--tc-weight", "-1", "--tc-weight"),
        ("--tc-temperature", "0", "--tc-temperature"),
        ("--tc-window", "4", "--tc-window"),
        ("--tc-window", "1", "--tc-window"),
        ("--tc-negatives", "0", "--tc-negatives"),
        ("--mask-prob", "1.5", "--mask-prob"),
    ],
)
def test_bad_options_fail_at_start_naming_the_option(synthetic_databin, option, value, message):
    with pytest.raises(ValueError, match=message):
        fairseq_setup(synthetic_databin, option, value)


def test_missing_data_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere' does not exist"):
        fairseq_setup(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="no dict.txt"):
        fairseq_setup(tmp_path)


def test_masked_lm_task_batches_are_refused(synthetic_databin):
    _, task, model, criterion = fairseq_setup(synthetic_databin)
    batch = first_batch(task)
    del batch["taco"]
    with pytest.raises(KeyError, match="taco_masked_lm"):
        criterion(model, batch)


def test_untied_embeddings_train_with_taco(synthetic_databin):
    _, task, model, criterion = fairseq_setup(
        synthetic_databin, "--untie-weights-roberta", "--tc-embedding", "token"
    )
    encoder = model.encoder
    assert encoder.lm_head.weight is not encoder.sentence_encoder.embed_tokens.weight
    loss, _, log = criterion(model, first_batch(task))
    assert log["tc_anchors"] > 0
    loss.backward()
    # the input embedding gets gradient from both losses, the output projection from MLM only
    assert encoder.sentence_encoder.embed_tokens.weight.grad.abs().sum() > 0
    assert encoder.lm_head.weight.grad.abs().sum() > 0


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@pytest.fixture(scope="module")
def models(synthetic_databin):
    """The taco criterion and a roberta_tiny model in each dtype (no dropout)."""
    _, task, model, criterion = fairseq_setup(synthetic_databin, *NO_DROPOUT)
    assert task.dictionary.pad() == 1 and task.mask_idx == 204  # as masked_lm_batches
    return criterion, {name: copy.deepcopy(model).to(dtype) for name, dtype in DTYPES.items()}


@pytest.mark.slow
@settings(max_examples=30, deadline=None,  # a forward and backward pass each
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=masked_lm_batches(), positions=st.sampled_from(TC_POSITIONS),
       embedding=st.sampled_from(TC_EMBEDDINGS),
       precision=st.sampled_from([*sorted(DTYPES), "amp"]))
def test_loss_and_gradients_are_finite(models, batch, positions, embedding, precision):
    """Models in float16/bfloat16 (--fp16/--bf16) or float32 under bfloat16 autocast (--amp),
    on odd batches (empty rows, special tokens inside, nothing masked)."""
    criterion, by_dtype = models
    autocast = precision == "amp"
    model = by_dtype["float32" if autocast else precision]
    criterion.tc_embedding = embedding
    dataset = ContrastiveSamplingDataset(
        FixedBatch(batch), pad_idx=1, excluded_tokens=(), positions=positions,
        sampling=SamplingOptions(5, 6), seed=1,
    )
    sample = dataset.collater([])
    model.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        loss, sample_size, log = criterion(model, sample)
    assert log["tc_loss"].dtype == torch.float32
    assert log["tc_anchors"] == len(sample["taco"].anchor)
    assert int(sample_size) == int(batch["target"].ne(1).sum())
    assert torch.isfinite(loss) and torch.isfinite(log["tc_loss"])
    loss.backward()
    for p in model.parameters():
        assert p.grad is None or torch.isfinite(p.grad.float()).all()
