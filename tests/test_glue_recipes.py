"""The hydra recipes in examples/taco/config/finetuning agree with the runner's command lines
and run with fairseq-hydra-train."""

import math
from pathlib import Path

import pytest
from fairseq import options
from omegaconf import OmegaConf

from conftest import REPO, USER_DIR, run_fairseq
from taco_fairseq.glue.recipes import ARCHITECTURES, DEFAULTS, finetune_args
from taco_fairseq.glue.tasks import TASKS
from taco_fairseq.analysis.training_log import parse_json_log

CONFIGS = REPO / "examples" / "taco" / "config" / "finetuning"
#: fields the user sets per run or that only the runner sets: ??? where fairseq's schema has no
#: default, else an interpolation that fails naming the field (??? gives way to the default)
PER_RUN = {"common.user_dir": "${mandatory_value_missing}", "task.data": "???",
           "checkpoint.restore_file": "${mandatory_value_missing}"}


def config_file(task_name, size):
    stem = {"SST-2": "sst_2", "STS-B": "sts_b"}.get(task_name, task_name.lower())
    return CONFIGS / f"{stem}_{size}.yaml"


def compose(path: Path) -> dict:
    """The recipe as hydra composes it: the entries of its `defaults` list in order (``_self_``:
    the file itself, last when not listed), later ones overriding earlier ones."""
    own = OmegaConf.load(path)
    defaults = list(own.pop("defaults", []))
    if "_self_" not in defaults:
        defaults.append("_self_")
    layers = [own if d == "_self_" else compose(CONFIGS / f"{d}.yaml") for d in defaults]
    return OmegaConf.to_container(OmegaConf.merge(*layers))


def leaves(tree, prefix=""):
    for key, value in tree.items():
        if isinstance(value, dict):
            yield from leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


@pytest.mark.parametrize("size", sorted(DEFAULTS))
@pytest.mark.parametrize("task_name", list(TASKS))
def test_recipes_match_the_runner(task_name, size):
    task = TASKS[task_name]
    recipe = compose(config_file(task_name, size))
    hyper = DEFAULTS[size]
    args = finetune_args(
        task, Path("DATA"), Path("CKPT"), arch=ARCHITECTURES[size], max_positions=256,
        train_rows=task.train_rows, hyper=hyper, seed=1, save_dir=Path("SAVE"),
        user_dir=Path(USER_DIR),
    )
    parsed = options.parse_args_and_arch(options.get_training_parser(), args)
    checked = 0
    for key, value in leaves(recipe):
        if key in PER_RUN:
            assert value == PER_RUN[key], key
            continue
        group, name = key.split(".")
        expected = parsed.arch if (group, name) == ("model", "_name") else getattr(
            parsed, name if name != "_name" else group)
        if isinstance(value, float) or isinstance(expected, float):
            assert math.isclose(float(value), float(expected)), key
        elif isinstance(value, list):
            assert list(value) == list(expected), key
        else:
            assert str(value) == str(expected), (key, value, expected)
        checked += 1
    assert checked >= 30  # every option of the recipe, not a few


def test_a_recipe_runs_with_fairseq_hydra_train(glue_databin, trained_checkpoint, tmp_path):
    result = run_fairseq(
        "fairseq-hydra-train", "--config-dir", CONFIGS, "--config-name", "cola_small",
        f"task.data={glue_databin / 'CoLA'}", f"common.user_dir={USER_DIR}",
        f"checkpoint.restore_file={trained_checkpoint / 'checkpoint_last.pt'}",
        # the tiny test checkpoint instead of BERT-small
        "model._name=roberta_tiny", "task.max_positions=64", "optimization.max_update=2",
        "common.cpu=true", "dataset.num_workers=0", f"checkpoint.save_dir={tmp_path}",
        f"hydra.run.dir={tmp_path / 'hydra'}",
    )
    assert "Loaded checkpoint" in result.stdout
    valid = [r for r in parse_json_log(result.stdout.splitlines()) if r["kind"] == "valid"]
    assert valid and "valid_mcc" in valid[-1]
    assert (tmp_path / "checkpoint_best.pt").is_file()


def test_an_update_cap_shortens_the_schedule_with_the_run():
    """``max_updates`` (--max-updates SST-2=N): fairseq stops at the cap and the learning rate
    decays to 0 there, not at the 4 epochs the cap cuts short."""
    task = TASKS["SST-2"]
    common = dict(arch="roberta_tiny", max_positions=64, train_rows=task.train_rows,
                  hyper=DEFAULTS["small"], seed=1, save_dir=Path("SAVE"), user_dir=Path(USER_DIR))
    full = options.parse_args_and_arch(options.get_training_parser(), finetune_args(
        task, Path("DATA"), Path("CKPT"), **common))
    capped = options.parse_args_and_arch(options.get_training_parser(), finetune_args(
        task, Path("DATA"), Path("CKPT"), max_updates=500, **common))
    assert int(full.total_num_update) == 4 * math.ceil(task.train_rows / 32)
    assert full.max_update == 0
    assert int(capped.total_num_update) == 500 and capped.max_update == 500
    assert capped.warmup_updates == full.warmup_updates == 100
    small = options.parse_args_and_arch(options.get_training_parser(), finetune_args(
        TASKS["RTE"], Path("DATA"), Path("CKPT"), max_updates=10**6,
        **dict(common, train_rows=2490)))
    assert int(small.total_num_update) == small.max_update == 4 * math.ceil(2490 / 32)


@pytest.mark.parametrize("config_dir, config_name, given, missing", [
    (CONFIGS.parent / "pretraining", "taco_small", ["task.data=DATA"], "common.user_dir"),
    (CONFIGS, "rte_small", ["task.data=DATA", f"common.user_dir={USER_DIR}"],
     "checkpoint.restore_file"),
])
def test_a_recipe_without_a_required_value_stops_naming_it(config_dir, config_name, given,
                                                           missing, tmp_path):
    """Without common.user_dir fairseq said "Could not infer task type"; without
    checkpoint.restore_file a GLUE recipe fine-tuned from random weights."""
    result = run_fairseq(
        "fairseq-hydra-train", "--config-dir", config_dir, "--config-name", config_name, *given,
        f"checkpoint.save_dir={tmp_path}", f"hydra.run.dir={tmp_path / 'hydra'}", check=False)
    assert result.returncode != 0
    assert "Interpolation key 'mandatory_value_missing' not found" in result.stdout
    assert f"full_key: {missing}" in result.stdout
    assert "Could not infer task type" not in result.stdout and "train_inner" not in result.stdout
