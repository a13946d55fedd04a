"""The paper's ablations: MLM+TP, concentrated TACO, untied and frozen embeddings. Each trains
a few updates on real text; the recipes compose."""

import math
from pathlib import Path

import pytest
import torch
from fairseq import checkpoint_utils, modules

from conftest import (RECIPES, USER_DIR, compose_recipe, fairseq_setup, first_batch,
                      run_fairseq, train_args)
from taco_fairseq import hub
from taco_fairseq.diagnostics import last_layer_states
from taco_fairseq.loss import global_bias
from taco_fairseq.models import TOKEN_EMBEDDING_KEY
from taco_fairseq.analysis.training_log import parse_json_log

MLM = ("--task", "masked_lm", "--criterion", "mlm")
NO_DROPOUT = ("--dropout", "0", "--attention-dropout", "0")


def _train(databin, save_dir, *extra):
    """A 4-update run with checkpoints at 2 and 4 updates, without validation; returns its
    json records."""
    out = run_fairseq("fairseq-train", *train_args(
        databin, save_dir, "--max-update", "4", "--save-interval-updates", "2",
        "--log-interval", "2", "--disable-validation", *extra))
    records = parse_json_log(out.stdout.splitlines())
    train = [r for r in records if r["kind"] == "train_inner"]
    assert [r["num_updates"] for r in train] == [2, 4]
    assert all(math.isfinite(r["loss"]) for r in train)
    return records


def _state(save_dir, updates):
    path = next(Path(save_dir).glob(f"checkpoint_*_{updates}.pt"))
    return checkpoint_utils.load_checkpoint_to_cpu(str(path))["model"]


def test_mlm_tp_predicts_the_original_token_at_every_position(synthetic_databin):
    _, task, model, criterion = fairseq_setup(synthetic_databin, *MLM, "--mlm-positions", "all",
                                              *NO_DROPOUT)
    _, unmasked_task, _, _ = fairseq_setup(synthetic_databin, *MLM, "--skip-masking")
    batch, original = first_batch(task), first_batch(unmasked_task)
    pad = task.dictionary.pad()
    tokens = batch["net_input"]["src_tokens"]
    assert torch.equal(batch["id"], original["id"])
    original = original["net_input"]["src_tokens"]
    masked = batch["target"].ne(pad)
    assert masked.any() and not torch.equal(tokens, original)
    assert torch.equal(torch.where(masked, batch["target"], tokens), original)

    model.eval()
    loss, size, log = criterion(model, batch)
    logits = model(tokens)[0]  # every position
    token_loss = modules.cross_entropy(
        logits.flatten(0, 1), original.flatten(), reduction="none", ignore_index=pad
    ).view_as(original)
    predicted = original.ne(pad)
    assert int(size) == int(predicted.sum())
    torch.testing.assert_close(loss, token_loss.sum(), rtol=1e-5, atol=0)
    torch.testing.assert_close(log["mlm_loss"], token_loss[masked].sum(), rtol=1e-5, atol=0)
    torch.testing.assert_close(log["tp_loss"], token_loss[predicted & ~masked].sum(),
                               rtol=1e-5, atol=0)


@pytest.mark.slow
def test_concentrated_taco_trains(synthetic_databin, tmp_path):
    records = _train(synthetic_databin, tmp_path, "--tc-positions", "masked")
    train = [r for r in records if r["kind"] == "train_inner"]
    # anchors are the ~15% masked tokens of 8 x 64-token sequences
    assert all(0 < r["tc_anchors"] < 0.25 * 8 * 64 for r in train)


def test_untied_token_embedding_is_the_input_embedding(synthetic_databin):
    _, task, model, criterion = fairseq_setup(
        synthetic_databin, "--untie-weights-roberta", "--tc-embedding", "token"
    )
    model.eval()
    batch = first_batch(task)
    tokens = batch["net_input"]["src_tokens"]
    features, extra = model(tokens, features_only=True, return_all_hiddens=True)
    encoder = model.encoder
    inner = extra["inner_states"]
    g = global_bias(last_layer_states(model, inner), criterion.static_embedding(
        model, batch, inner)).transpose(0, 1)
    input_embedding = encoder.sentence_encoder.embed_tokens.weight[tokens]
    torch.testing.assert_close(g, features - input_embedding, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(g, features - encoder.lm_head.weight[tokens], atol=1e-3)


@pytest.mark.slow
def test_untied_taco_trains(synthetic_databin, tmp_path):
    _train(synthetic_databin, tmp_path, "--untie-weights-roberta", "--tc-embedding", "token")
    state = _state(tmp_path, 4)
    assert not torch.equal(state[TOKEN_EMBEDDING_KEY], state["encoder.lm_head.weight"])


def test_frozen_embeddings_from_a_checkpoint_stay_bit_exact(
    tiny_databin, trained_checkpoint, tmp_path
):
    source = tmp_path / "source.pt"
    source.write_bytes((trained_checkpoint / "checkpoint_last.pt").read_bytes())
    source_embedding = checkpoint_utils.load_checkpoint_to_cpu(str(source))["model"][
        TOKEN_EMBEDDING_KEY]
    run = tmp_path / "run"
    _train(tiny_databin, run, "--freeze-token-embeddings", "--init-token-embeddings-from", source)
    early, late = _state(run, 2), _state(run, 4)
    for state in (early, late):
        assert torch.equal(state[TOKEN_EMBEDDING_KEY], source_embedding)
        assert torch.equal(state["encoder.lm_head.weight"], source_embedding)  # tied
    trained = [k for k in late if k != TOKEN_EMBEDDING_KEY and k != "encoder.lm_head.weight"]
    changed = [k for k in trained if not torch.equal(early[k], late[k])]
    assert "encoder.sentence_encoder.layers.0.self_attn.k_proj.weight" in changed
    assert "encoder.lm_head.bias" in changed
    assert len(changed) > 0.9 * len(trained)
    # the checkpoint records the source; the hub loads it without the source file
    source.unlink()
    roberta = hub.from_pretrained(run / "checkpoint_last.pt", data_dir=tiny_databin)
    assert torch.equal(roberta.model.encoder.sentence_encoder.embed_tokens.weight,
                       source_embedding)


@pytest.mark.slow
@pytest.mark.parametrize("task", ["taco_masked_lm", "masked_lm"])
def test_frozen_random_embeddings_with_mlm(synthetic_databin, tmp_path, task):
    """The frozen-embedding options are the model's: with the mlm criterion and either task,
    the random initial matrix is never updated."""
    _train(synthetic_databin, tmp_path, "--task", task, "--criterion", "mlm",
           "--freeze-token-embeddings")
    early, late = _state(tmp_path, 2), _state(tmp_path, 4)
    assert torch.equal(early[TOKEN_EMBEDDING_KEY], late[TOKEN_EMBEDDING_KEY])
    assert not torch.equal(early["encoder.sentence_encoder.embed_positions.weight"],
                           late["encoder.sentence_encoder.embed_positions.weight"])


def test_freezing_is_a_model_option_of_any_size_and_task(synthetic_databin):
    _, _, model, _ = fairseq_setup(
        synthetic_databin, *MLM, "--arch", "taco_roberta", "--encoder-layers", "1",
        "--encoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64",
        "--encoder-attention-heads", "2", "--freeze-token-embeddings")
    assert model.encoder.sentence_encoder.embed_tokens.weight.shape[1] == 32
    assert not model.encoder.sentence_encoder.embed_tokens.weight.requires_grad
    assert model.encoder.lm_head.dense.weight.requires_grad


def test_freeze_options_without_freezing_train_the_copied_matrix(
    tiny_databin, trained_checkpoint
):
    source = trained_checkpoint / "checkpoint_last.pt"
    _, _, model, _ = fairseq_setup(tiny_databin, "--init-token-embeddings-from", str(source))
    weight = model.encoder.sentence_encoder.embed_tokens.weight
    expected = checkpoint_utils.load_checkpoint_to_cpu(str(source))["model"][TOKEN_EMBEDDING_KEY]
    assert weight.requires_grad and torch.equal(weight.detach(), expected)


def test_bad_embedding_source_fails_naming_the_option(tiny_databin, tmp_path, trained_checkpoint):
    with pytest.raises(FileNotFoundError, match="--init-token-embeddings-from"):
        fairseq_setup(tiny_databin, "--init-token-embeddings-from", str(tmp_path / "no.pt"))
    with pytest.raises(ValueError, match="--init-token-embeddings-from.*same dict.txt"):
        fairseq_setup(tiny_databin, "--arch", "roberta_mini", "--init-token-embeddings-from",
                      str(trained_checkpoint / "checkpoint_last.pt"))


@pytest.mark.slow
def test_mlm_tp_recipe_trains_with_hydra(synthetic_databin, tmp_path):
    out = run_fairseq(
        "fairseq-hydra-train", "--config-dir", RECIPES, "--config-name", "mlm_tp_small",
        f"task.data={synthetic_databin}", f"common.user_dir={USER_DIR}", "common.cpu=true",
        "common.fp16=false", "common.log_interval=1", "model._name=roberta_tiny",
        "model.max_positions=64", "task.tokens_per_sample=64", "dataset.batch_size=4",
        "optimization.update_freq=[1]", "optimization.max_update=2",
        "lr_scheduler.warmup_updates=1", "dataset.num_workers=0", "checkpoint.no_save=true",
        "dataset.max_valid_steps=2", f"hydra.run.dir={tmp_path}",
    )
    records = parse_json_log(out.stdout.splitlines())
    train = [r for r in records if r["kind"] == "train_inner"]
    assert [r["num_updates"] for r in train] == [1, 2]
    assert all(r["tp_loss"] > 0 and r["mlm_loss"] > 0 for r in train)
    assert all(-1 <= r["intra_context_cos"] <= 1 for r in train)  # online diagnostics
    valid = [r for r in records if r["kind"] == "valid"]
    assert valid and math.isfinite(valid[0]["valid_contextual_score"])


@pytest.mark.parametrize("name, expected", [
    ("mlm_tp_small", {"criterion._name": "mlm", "criterion.mlm_positions": "all"}),
    ("taco_concentrated_small", {"criterion._name": "taco", "task.tc_positions": "masked"}),
    ("taco_untied_small", {"criterion._name": "taco", "model.untie_weights_roberta": True}),
    ("mlm_untied_small", {"criterion._name": "mlm", "model.untie_weights_roberta": True}),
    ("mlm_frozen_embeddings_small", {"criterion._name": "mlm", "task._name": "masked_lm",
                                     "model.freeze_token_embeddings": True}),
    ("taco_frozen_embeddings_small", {"criterion._name": "taco",
                                      "model.freeze_token_embeddings": True}),
])
def test_recipes_compose(name, expected):
    from omegaconf import OmegaConf

    cfg = compose_recipe(name)
    for key, value in expected.items():
        assert OmegaConf.select(cfg, key) == value, key
    assert cfg.model._name == "roberta_small" and cfg.optimization.max_update == 250000


@pytest.mark.parametrize("path", [p for p in sorted(RECIPES.glob("*.yaml"))
                                  if "defaults" in p.read_text(encoding="utf-8")],
                         ids=lambda p: p.stem)
def test_recipes_of_plugin_architectures_ask_for_the_user_dir(path):
    """A recipe (a config with defaults; bert_*.yaml are shared parts) with one of the plugin's
    architectures must make fairseq-hydra-train ask for common.user_dir, not fail later with
    fairseq's KeyError '_name'. ``???`` cannot (fairseq's schema default None wins over it);
    an interpolation of a key that does not exist stops naming the key
    (tests/test_glue_runner.py runs it)."""
    from omegaconf import OmegaConf

    recipe = OmegaConf.load(path)
    shared = [OmegaConf.load(RECIPES / f"{d}.yaml") for d in recipe.get("defaults", [])
              if d != "_self_"]
    arch = OmegaConf.merge(*shared, recipe).get("model", {}).get("_name")
    if arch in ("roberta_tiny", "roberta_mini", "roberta_small", "roberta_medium"):
        common = OmegaConf.to_container(recipe.get("common", {}), resolve=False)
        assert common.get("user_dir") == "${mandatory_value_missing}", path.name
