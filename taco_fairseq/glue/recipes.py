"""The fine-tuning recipes of ``examples/taco/config/finetuning/`` as ``fairseq-train`` command
lines.

The YAML files are the one source of every fine-tuning hyper-parameter (their comments say
where each comes from: fairseq's RoBERTa GLUE recipe and the paper's authors' fine-tuning
scripts). :func:`finetune_args` composes the task's file as hydra does and writes it as
``fairseq-train`` options, replacing only what belongs to one run: the data, the checkpoint
and its architecture and positions, the save directory, the seed, the grid point (batch size,
learning rate, epochs) and the length of the learning-rate schedule that follows from it.
``fairseq-hydra-train --config-dir examples/taco/config/finetuning --config-name rte_small``
runs the same recipe by hand.

The paper's grid (§4: batch size {16, 32, 64, 128} × learning rate {1e-5, 2e-5, 3e-5, 5e-5} ×
epochs {4, 6}) is a set of runs, not part of a run's recipe, so it lives here (:data:`GRID`).
"""

import itertools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Sequence

from omegaconf import OmegaConf

from .tasks import GlueTask

#: The fine-tuning recipes (installed with the package; examples/taco/config links to them).
RECIPES_DIR = Path(__file__).resolve().parents[1] / "config" / "finetuning"
#: Model sizes with a recipe: ``glue_<size>.yaml`` and ``<task>_<size>.yaml``.
SIZES = ("small", "base")
#: fairseq's option for the ``_name`` of each config group.
NAME_OPTIONS = {"task": "--task", "criterion": "--criterion", "optimizer": "--optimizer",
                 "lr_scheduler": "--lr-scheduler", "model": "--arch"}


@dataclass(frozen=True)
class Hyperparameters:
    """One point of the grid: batch size (sentences per update), learning rate, epochs."""

    batch_size: int
    lr: float
    epochs: int

    @property
    def label(self) -> str:
        """A directory name, e.g. ``bs32_lr5e-05_ep4``."""
        return f"bs{self.batch_size}_lr{self.lr:g}_ep{self.epochs}"


#: The paper's fine-tuning grid (§4).
GRID = {"batch_size": (16, 32, 64, 128), "lr": (1e-5, 2e-5, 3e-5, 5e-5), "epochs": (4, 6)}


def grid() -> List[Hyperparameters]:
    """The 32 points of :data:`GRID`."""
    return [Hyperparameters(b, lr, e) for b, lr, e in itertools.product(*GRID.values())]


def recipe_path(task: Optional[GlueTask], size: str = "small") -> Path:
    """``<task>_<size>.yaml`` of :data:`RECIPES_DIR`, e.g. ``sts_b_small.yaml``; without a
    task the shared ``glue_<size>.yaml``.

    Raises:
        ValueError: ``size`` is not one of :data:`SIZES`.
    """
    if size not in SIZES:
        raise ValueError(f"no {size!r} recipe; known sizes: {', '.join(SIZES)}")
    stem = task.name.lower().replace("-", "_") if task else "glue"
    return RECIPES_DIR / f"{stem}_{size}.yaml"


def load_recipe(path: Path) -> dict:
    """A recipe as hydra composes it: the entries of its ``defaults`` list in order
    (``_self_``, the file itself, last when not listed), later ones overriding earlier ones;
    interpolations (the required values) are left unresolved."""
    own = OmegaConf.load(path)
    defaults = list(own.pop("defaults", []))
    if "_self_" not in defaults:
        defaults.append("_self_")
    layers = [own if d == "_self_" else load_recipe(Path(path).parent / f"{d}.yaml")
              for d in defaults]
    return OmegaConf.to_container(OmegaConf.merge(*layers))


def default_point(size: str = "small") -> Hyperparameters:
    """The single-run batch size, learning rate and epochs of the ``size`` recipes.

    Raises:
        ValueError: as :func:`recipe_path`.
    """
    recipe = load_recipe(recipe_path(None, size))
    return Hyperparameters(recipe["dataset"]["batch_size"], recipe["optimization"]["lr"][0],
                           recipe["optimization"]["max_epoch"])


def selection_metric(task: GlueTask, size: str = "small") -> str:
    """The recipe's ``checkpoint.best_checkpoint_metric`` (e.g. ``mcc`` for CoLA)."""
    return load_recipe(recipe_path(task, size))["checkpoint"]["best_checkpoint_metric"]


def total_updates(train_rows: int, batch_size: int, epochs: int) -> int:
    """Updates of a run on one GPU: ``epochs × ⌈train_rows / batch_size⌉``."""
    return epochs * math.ceil(train_rows / batch_size)


def option(name: str, value, default=None) -> List[str]:
    """One recipe field as ``fairseq-train`` spells it: ``--some-name value``, a list
    comma-joined; a boolean as the bare flag when it differs from ``default`` (fairseq turns a
    field whose default is true into a flag that sets it to false), else nothing; ``null``
    (fairseq's default) as nothing."""
    flag = "--" + name.replace("_", "-")
    if value is None:
        return []
    if isinstance(value, bool):
        return [flag] if value != bool(default) else []
    return [flag, ",".join(map(str, value)) if isinstance(value, list) else str(value)]


def command_line(recipe: dict) -> List[str]:
    """``fairseq-train`` options of a composed, resolved recipe: ``task.data`` first
    (positional), each group's ``_name`` as its option (``model._name`` as ``--arch``), every
    other field as :func:`option` writes it (each boolean of the fine-tuning recipes defaults
    to false)."""
    args = [str(recipe["task"]["data"])]
    for group, fields in recipe.items():
        for name, value in fields.items():
            if name == "_name":
                args += [NAME_OPTIONS[group], str(value)]
            elif (group, name) != ("task", "data"):
                args += option(name, value)
    return args


def finetune_args(
    task: GlueTask,
    data_dir: Path,
    checkpoint: Path,
    *,
    arch: str,
    max_positions: int,
    train_rows: int,
    hyper: Hyperparameters,
    seed: int,
    save_dir: Path,
    user_dir: Path,
    extra: Sequence[str] = (),
    max_updates: Optional[int] = None,
    size: str = "small",
) -> List[str]:
    """The ``fairseq-train`` arguments of one fine-tuning run: the task's recipe
    (:func:`recipe_path`) with the run's values.

    Args:
        task: the GLUE task; ``data_dir`` its prepared directory (``taco-prepare-glue``).
        checkpoint: the pre-training checkpoint (``--restore-file``); must exist (fairseq
            starts from random weights otherwise; see :mod:`.pretrained`).
        arch, max_positions: the checkpoint's architecture and positions (inputs longer than
            ``max_positions`` tokens are truncated at the end).
        train_rows: training examples, for the length of the learning-rate schedule.
        hyper: batch size, learning rate, epochs.
        seed: fairseq's ``--seed``.
        save_dir: where the fine-tuned ``checkpoint_best.pt`` goes (no last/epoch ones).
        user_dir: the ``taco_fairseq`` package directory (``--user-dir``).
        extra: further fairseq options, appended last (e.g. ``--fp16``).
        max_updates: a cap on the run's updates (e.g. for SST-2 on a CPU); the learning-rate
            schedule then decays to 0 at the cap. A run no longer than the recipe's warm-up
            (capped or not) warms up over a tenth of its updates (at least 1) instead.
        size: the recipe, ``small`` or ``base`` (:data:`SIZES`).

    Raises:
        ValueError: an unknown ``size``.
    """
    recipe = load_recipe(recipe_path(task, size))
    total = total_updates(train_rows, hyper.batch_size, hyper.epochs)
    if max_updates is not None:
        total = min(total, max_updates)
        recipe["optimization"]["max_update"] = total
    warmup = recipe["lr_scheduler"]["warmup_updates"]
    if warmup >= total:  # the learning rate would never decay: warm up over a tenth of the run
        warmup = max(1, total // 10)
    run = {
        "common": {"user_dir": str(user_dir), "seed": seed},
        "task": {"data": str(data_dir), "max_positions": max_positions},
        "checkpoint": {"restore_file": str(checkpoint), "save_dir": str(save_dir)},
        "model": {"_name": arch},
        "dataset": {"batch_size": hyper.batch_size},
        "optimization": {"lr": [hyper.lr], "max_epoch": hyper.epochs},
        "lr_scheduler": {"total_num_update": total, "warmup_updates": warmup},
    }
    merged = OmegaConf.to_container(OmegaConf.merge(recipe, run), resolve=True)
    return command_line(merged) + list(extra)
