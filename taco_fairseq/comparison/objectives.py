"""The objectives of a comparison, read from the pre-training recipes.

Objective ``NAME`` is ``examples/taco/config/pretraining/NAME_small.yaml`` (``mlm``, ``taco``,
``mlm_tp``, ``taco_concentrated``, ``taco_untied``, ...): its ``task``, ``criterion`` and
``model`` sections, turned into ``fairseq-train`` options, are what differs between the
objectives. What they share (optimizer, schedule shape, dropout, masking) comes from the
shared recipe ``bert_small.yaml``; the scale (architecture, tokens, batch, updates, learning
rate) from the comparison's own options. The recipes stay the one source of each setting.
"""

import argparse
from pathlib import Path
from typing import Dict, List, Optional

from omegaconf import OmegaConf

from ..glue.recipes import NAME_OPTIONS, option

#: The pre-training recipes (installed with the package; examples/taco/config links to them).
RECIPES_DIR = Path(__file__).resolve().parents[1] / "config" / "pretraining"
#: Shared recipes: the scale and optimizer of a model size, not objectives.
SHARED_RECIPES = ("bert_small", "bert_base")
#: The sections of an objective's recipe that make the objective.
OBJECTIVE_SECTIONS = ("task", "criterion", "model")
#: Settings taken from the shared recipe, as (section, key).
SHARED_SETTINGS = (
    ("optimizer", "_name"), ("optimizer", "adam_betas"), ("optimizer", "adam_eps"),
    ("optimizer", "weight_decay"), ("lr_scheduler", "_name"), ("optimization", "clip_norm"),
    ("model", "dropout"), ("model", "attention_dropout"), ("task", "sample_break_mode"),
)


def available_objectives(recipes_dir: Path = RECIPES_DIR) -> List[str]:
    """Names of the objectives with a ``NAME_small.yaml`` recipe, sorted.

    Raises:
        FileNotFoundError: ``recipes_dir`` has no such recipe.
    """
    names = sorted(p.name[: -len("_small.yaml")] for p in Path(recipes_dir).glob("*_small.yaml"))
    names = [n for n in names if f"{n}_small" not in SHARED_RECIPES and n != "bert"]
    if not names:
        raise FileNotFoundError(f"no pre-training recipe NAME_small.yaml in {recipes_dir}")
    return names


def objective_args(name: str, recipes_dir: Path = RECIPES_DIR) -> List[str]:
    """The ``fairseq-train`` options of objective ``name``: ``--task``, ``--criterion`` and
    every setting of its recipe's task/criterion/model sections (a boolean becomes its flag
    when it differs from the option's default, as fairseq's command line spells it; ``null``
    keeps the default).

    Raises:
        ValueError: ``name`` has no recipe (the message lists those that exist).
    """
    path = Path(recipes_dir) / f"{name}_small.yaml"
    if name in ("bert",) or not path.is_file():
        raise ValueError(f"objective {name!r}: no recipe {path}; choose from "
                         f"{', '.join(available_objectives(recipes_dir))}")
    recipe = OmegaConf.to_container(OmegaConf.load(path))
    args = []
    for section in OBJECTIVE_SECTIONS:
        node = recipe.get(section)
        if node is None:
            continue
        if isinstance(node, str):  # e.g. ``criterion: masked_lm``
            node = {"_name": node}
        node = dict(node)
        component = node.pop("_name", None)
        if component is not None and section != "model":
            args += [f"--{section}", component]
        defaults = _defaults(section, component or recipe.get("task", {}).get("_name"))
        for key, value in node.items():
            args += option(key, value, defaults.get(key))
    return args


def model_settings(name: str, recipes_dir: Path = RECIPES_DIR) -> Dict[str, object]:
    """The ``model`` section of objective ``name``'s recipe (empty: the shared model), what
    decides which parameters the model has and which of them train (e.g.
    ``untie_weights_roberta``, ``freeze_token_embeddings``).

    Raises:
        ValueError: ``name`` has no recipe (as :func:`objective_args`).
    """
    objective_args(name, recipes_dir)  # the check and its message
    recipe = OmegaConf.to_container(OmegaConf.load(Path(recipes_dir) / f"{name}_small.yaml"))
    return dict(recipe.get("model") or {})


def shared_args(recipe: str = "bert_small", recipes_dir: Path = RECIPES_DIR) -> List[str]:
    """The ``fairseq-train`` options of :data:`SHARED_SETTINGS` in the shared ``recipe``
    (optimizer, its betas/eps/weight decay, scheduler, gradient clipping, dropout, sample
    break mode).

    Raises:
        FileNotFoundError: the recipe does not exist.
        KeyError: it lacks one of the settings.
    """
    path = Path(recipes_dir) / f"{recipe}.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"no shared pre-training recipe {path}")
    config = OmegaConf.to_container(OmegaConf.load(path))
    args = []
    for section, key in SHARED_SETTINGS:
        try:
            value = config[section][key]
        except KeyError:
            raise KeyError(f"{path} has no {section}.{key}") from None
        args += [NAME_OPTIONS[section], str(value)] if key == "_name" else option(key, value)
    return args


def _defaults(section: str, component: Optional[str]) -> Dict[str, object]:
    """Default of every option of a task, criterion or (RoBERTa) model, by field name."""
    from fairseq.criterions import CRITERION_DATACLASS_REGISTRY
    from fairseq.models.roberta import RobertaModel
    from fairseq.tasks import TASK_DATACLASS_REGISTRY

    from taco_fairseq import register

    register()  # the plugin's task and criteria

    if section == "model":
        parser = argparse.ArgumentParser()
        RobertaModel.add_args(parser)
        return vars(parser.parse_args([]))
    registry = TASK_DATACLASS_REGISTRY if section == "task" else CRITERION_DATACLASS_REGISTRY
    dataclass = registry.get(component)
    if dataclass is None:
        return {}
    return {name: getattr(dataclass(), name, None) for name in dataclass.__dataclass_fields__}
