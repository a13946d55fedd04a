"""Which checkpoint ``fairseq-train`` resumes from, and the checks before and after it loads it:
for every task of a ``--user-dir taco_fairseq`` run, fairseq's ``checkpoint_utils.
load_checkpoint`` goes through :func:`restore_config` first and :func:`stop_if_finished` after
(:mod:`taco_fairseq.fairseq_patches`). What each check catches: docs/reliability.md. What a
checkpoint records and how it is read: :mod:`taco_fairseq.metadata`."""

import contextlib
import copy
import dataclasses
import logging
import os
import re
import sys
from typing import Dict, List, Optional, Tuple

import torch
from fairseq import checkpoint_utils
from fairseq.file_io import PathManager
from fairseq.tasks.masked_lm import MaskedLMConfig
from omegaconf import DictConfig, open_dict

from .criterion import DEPRECATED_DETACH_KEYS, keys_carry_gradient
from .errors import InputNotFoundError, OptionError, hydra_relative_path_hint
from .metadata import (DICTIONARY_KEY, SENTENCEPIECE_KEY, canonical_weights, check_dictionary,
                       load_lazily, saved_option, warn_once)
from .neighbour_attention import STATE_KEY as NEIGHBOUR_STATE_KEY

#: fairseq's default ``--restore-file``: resume from ``<save-dir>/checkpoint_last.pt`` if any.
DEFAULT_RESTORE_FILE = "checkpoint_last.pt"
#: Prefixes of the options that define a ``taco_masked_lm`` run's objective, by config group:
#: TACO's sampling options and fairseq's masking options of the task, the TC and MLM options of
#: the criteria. A resume with another value of one of them is refused
#: (:func:`check_objective_unchanged`); a new option with such a prefix is compared without
#: being listed anywhere.
OBJECTIVE_PREFIXES: Dict[str, Tuple[str, ...]] = {
    "task": ("tc_", "mask_", "leave_unmasked_", "random_token_", "freq_weighted_"),
    "criterion": ("tc_", "mlm_"),
}
#: The option that allows a resume with another objective (a task option).
ALLOW_CHANGED_OBJECTIVE = "tc_allow_changed_objective"
#: The option that allows a resume with another batching (a task option of ``masked_lm`` and
#: ``taco_masked_lm``: :class:`MaskedLMResumeConfig`; :func:`check_batching_unchanged`).
ALLOW_CHANGED_BATCH = "allow_changed_batch"
#: Options of the task and criteria that do not change the objective: the opt-in above and
#: the online diagnostics (logged only); and the deprecated ``tc_detach_keys``, compared as
#: part of ``tc_key_gradients`` (:func:`~taco_fairseq.criterion.keys_carry_gradient`).
NOT_OBJECTIVE_OPTIONS = (ALLOW_CHANGED_OBJECTIVE, "no_context_similarity", "no_neighbour_share",
                         DEPRECATED_DETACH_KEYS)

logger = logging.getLogger(__name__)


def checkpoint_to_load(cfg) -> Optional[str]:
    """The checkpoint ``fairseq-train`` will load given fairseq's ``checkpoint`` config
    ``cfg``, or None for a fresh start; for an unreadable ``checkpoint_last.pt`` the intact
    numbered checkpoint with the most updates (with a warning).

    Raises:
        InputNotFoundError: ``--restore-file`` (not the default) or ``--continue-once`` names no
            file (fairseq would silently start from scratch).
        OptionError: ``checkpoint_last.pt`` is unreadable and no intact checkpoint is there.
    """
    return _checkpoint_and_state(cfg)[0]


def _checkpoint_and_state(cfg) -> Tuple[Optional[str], Optional[dict]]:
    """:func:`checkpoint_to_load`'s path, with its state (:func:`~taco_fairseq.metadata.
    load_lazily`) where choosing it read the file (``checkpoint_last.pt`` or a numbered
    checkpoint in its place), else None: each file is read once."""
    last = _last_checkpoint(cfg)
    if cfg.restore_file != DEFAULT_RESTORE_FILE:
        path = cfg.restore_file.replace(".pt", cfg.checkpoint_suffix + ".pt")
        if not PathManager.isfile(path):
            raise InputNotFoundError(
                f"--restore-file {path}: no such checkpoint (fairseq would start from scratch)"
                f"{hydra_relative_path_hint(path)}. Fix the path, or leave --restore-file out to "
                f"resume from {last} or start afresh.")
        if PathManager.isfile(last) and os.path.abspath(path) != os.path.abspath(last):
            logger.warning(
                f"loading --restore-file {path}, not {last}: this run restarts from {path}. "
                f"To resume an interrupted run, leave --restore-file out (use --continue-once "
                f"{path} to start from it only when {last} does not exist)")
        return path, None
    if PathManager.isfile(last):
        try:
            return last, load_lazily(last)
        except Exception:  # torch raises EOFError, RuntimeError, ... for such files
            return _newest_intact_checkpoint(cfg, last)
    if cfg.continue_once is not None:
        if not PathManager.isfile(cfg.continue_once):
            raise InputNotFoundError(
                f"--continue-once {cfg.continue_once}: no such checkpoint (fairseq would start "
                "from scratch). Fix the path or leave the option out.")
        return cfg.continue_once, None
    if cfg.finetune_from_model is not None and PathManager.isfile(cfg.finetune_from_model):
        return cfg.finetune_from_model, None
    return None, None  # fresh start (fairseq reports a missing --finetune-from-model itself)


def restore_config(cfg, task, model, criterion_cfg, chosen=None):
    """The ``checkpoint`` config with which fairseq-train loads its checkpoint: ``cfg``, or a
    copy naming the newest intact checkpoint (:func:`checkpoint_to_load`). For RoBERTa models
    the checkpoint is checked to fit (:func:`check_checkpoint_fits`), a resume of
    ``taco_masked_lm`` to keep its objective (:func:`check_objective_unchanged`, with the
    task's config and ``criterion_cfg``, the training config's ``criterion``), and the task
    gets the data fingerprints the checkpoint records (fairseq's trainer does not restore a
    task's state; a masked-LM task saves those of its own data in their place,
    :func:`taco_fairseq.metadata.masked_lm_state_dict`): a GLUE fine-tuning's checkpoints
    record its pre-training data's. ``chosen``: the checkpoint and its state (None: not
    read) where the caller has chosen it already (:func:`prepare_resume`).

    Raises:
        OptionError, InputNotFoundError: from the functions named.
    """
    from fairseq.models.roberta import RobertaModel

    path, state = chosen if chosen is not None else _checkpoint_and_state(cfg)
    if path is None:
        return cfg
    last = _last_checkpoint(cfg)
    if isinstance(model, RobertaModel):
        state = state if state is not None else load_lazily(path)
        check_checkpoint_fits(path, state, model, task.source_dictionary)
        starts_from_weights = cfg.reset_optimizer or _finetune_start(cfg, path)
        if not starts_from_weights:
            check_objective_unchanged(path, state, task.cfg, criterion_cfg)
        task_state = state.get("task_state") or {}
        task.load_state_dict({key: task_state[key] for key in (
            DICTIONARY_KEY, SENTENCEPIECE_KEY, NEIGHBOUR_STATE_KEY) if key in task_state})
    if cfg.restore_file != DEFAULT_RESTORE_FILE or path == last or not PathManager.isfile(last):
        return cfg  # fairseq loads path itself
    cfg = copy.deepcopy(cfg)
    with open_dict(cfg):
        # fairseq appends --checkpoint-suffix to an explicit --restore-file itself
        cfg.restore_file = path[: len(path) - len(f"{cfg.checkpoint_suffix}.pt")] + ".pt"
        cfg.finetune_from_model = None  # fairseq refuses it next to an explicit restore file
    return cfg


def objective_options(group: str, cfg) -> Tuple[str, ...]:
    """The options of ``cfg`` (the ``group`` config: a dataclass, omegaconf config or
    namespace) that define the objective: ``_name`` (the task or criterion itself) and those
    with a prefix of :data:`OBJECTIVE_PREFIXES`, less :data:`NOT_OBJECTIVE_OPTIONS`."""
    if isinstance(cfg, DictConfig):
        names = list(cfg.keys())
    elif dataclasses.is_dataclass(cfg):
        names = [f.name for f in dataclasses.fields(cfg)]
    else:
        names = list(vars(cfg))
    return ("_name", *sorted(n for n in names if n.startswith(OBJECTIVE_PREFIXES[group])
                             and n not in NOT_OBJECTIVE_OPTIONS))


def changed_objective_options(state: dict, task_cfg, criterion_cfg) -> List[Tuple[str, object,
                                                                                  object]]:
    """``(option, value in the checkpoint, value here)`` for each option of
    :func:`objective_options` that the checkpoint ``state`` records with another value than ``task_cfg`` or
    ``criterion_cfg`` hold; options a checkpoint does not record (older versions) are
    skipped. ``option`` is spelled as on the command line (``--tc-negatives``);
    ``tc_key_gradients`` is compared with its deprecated negation ``tc_detach_keys`` folded in.
    """
    changed = []
    for group, current in (("task", task_cfg), ("criterion", criterion_cfg)):
        for name in objective_options(group, current):
            key = name if name != "_name" or state.get("args") is None else group
            saved = saved_option(state, group, key)
            here = getattr(current, name, None)
            if name == "tc_key_gradients":  # until tc_detach_keys is removed
                saved = keys_carry_gradient(saved, saved_option(state, group,
                                                                DEPRECATED_DETACH_KEYS))
                here = keys_carry_gradient(here, getattr(current, DEPRECATED_DETACH_KEYS, None))
            if saved is None or here is None:
                continue
            saved, here = getattr(saved, "value", saved), getattr(here, "value", here)
            if saved != here:
                flag = f"--{group}" if name == "_name" else f"--{name.replace('_', '-')}"
                changed.append((flag, saved, here))
    return changed


def check_objective_unchanged(path, state: dict, task_cfg, criterion_cfg) -> None:
    """Refuse to resume ``taco_masked_lm`` from the checkpoint ``path`` (``state``) with other
    values of options of :func:`objective_options` (:func:`changed_objective_options`) than it was
    trained with: the run would change its objective midway while its checkpoints record only
    the new values. With ``--tc-allow-changed-objective`` a warning names the changes instead.
    Tasks without that option (fairseq's own) are not checked.

    Raises:
        OptionError: naming each changed option with the checkpoint's value and this run's.
    """
    allowed = getattr(task_cfg, ALLOW_CHANGED_OBJECTIVE, None)
    if allowed is None:
        return
    changed = changed_objective_options(state, task_cfg, criterion_cfg)
    if not changed:
        return
    updates, listed = _num_updates(state), _listed(changed)
    if allowed:
        logger.warning(f"--tc-allow-changed-objective: resuming {path} (update {updates}) with "
                       f"another objective: {listed}. Its later checkpoints record the new "
                       "values")
        return
    raise OptionError(
        f"{path} (update {updates}) was trained with another objective than this run's: "
        f"{listed}. Resume with the checkpoint's values; to change them from update {updates} "
        "on, add --tc-allow-changed-objective; to start a new run, use another --save-dir (or "
        "--reset-optimizer to start from the checkpoint's weights at update 0)")


def keep_optimizer_across_objectives(state: dict, criterion: torch.nn.Module) -> None:
    """Let fairseq's trainer restore the optimizer and learning-rate scheduler of a checkpoint
    whose criterion was another one, when the run allows a changed objective
    (``--tc-allow-changed-objective``): e.g. TACO continuing an MLM run at its update, with its
    Adam moments, schedule and data position (docs/pretraining.md, "Switching objectives
    midway"). fairseq refuses any change of the criterion's class ("Criterion does not
    match; please reset the optimizer") because a criterion may hold parameters of its own;
    for one without (``mlm``, ``taco``, fairseq's ``masked_lm``) the optimizer holds exactly
    the model's parameters, so the checkpoint's last ``optimizer_history`` entry is renamed to
    ``criterion``'s class, in ``state`` (as loaded to the CPU, before the trainer reads it).

    A criterion with parameters is left to fairseq's check; a state without optimizer history
    is left alone.
    """
    from fairseq import utils

    history = state.get("optimizer_history") or []
    name = type(criterion).__name__
    if not history or history[-1].get("criterion_name") in (None, name) \
            or utils.has_parameters(criterion):
        return
    logger.warning(f"--tc-allow-changed-objective: the checkpoint's optimizer and learning-rate "
                   f"state, saved with criterion {history[-1]['criterion_name']}, continue with "
                   f"{name}")
    history[-1] = {**history[-1], "criterion_name": name}


def check_checkpoint_fits(path: str, state: dict, model: torch.nn.Module, dictionary) -> None:
    """Check that the checkpoint at ``path`` (``state``, :func:`taco_fairseq.metadata.
    load_lazily`) was trained on ``dictionary`` and fits ``model`` (parameter names and shapes).

    Raises:
        OptionError: another dictionary, ``--arch``, size options or ``--max-positions``.
    """
    check_dictionary(path, state, dictionary, "--data's dict.txt")
    weights = canonical_weights(state["model"])
    expected = canonical_weights(model.state_dict())
    positions = "sentence_encoder.embed_positions.weight"
    missing = sorted(expected.keys() - weights.keys())
    mismatched = sorted(
        f"{name}: {tuple(weights[name].shape)} in the checkpoint, {tuple(t.shape)} here"
        for name, t in expected.items() if name in weights and weights[name].shape != t.shape)
    if mismatched and not missing and all(m.startswith(positions) for m in mismatched):
        saved = saved_option(state, "model", "max_positions")
        raise OptionError(
            f"checkpoint {path} was pre-trained with --max-positions {saved} "
            f"({len(weights[positions])} position embeddings); the model being trained has "
            f"--max-positions {model.max_positions()}. Use --max-positions {saved} (hydra: "
            f"task.max_positions and model.max_positions); sentence_prediction cuts longer "
            "inputs with --shorten-method truncate.")
    if missing or mismatched:
        arch = (saved_option(state, "model", "arch") or saved_option(state, "model", "_name")
                or "unknown")
        details = "; ".join(mismatched[:3] + [f"missing {name}" for name in missing[:3]])
        raise OptionError(
            f"checkpoint {path} (--arch {arch}) does not fit the model being trained: "
            f"{details}{' ...' if len(missing) + len(mismatched) > 3 else ''}. Train with the "
            "checkpoint's --arch and size options, or start from scratch (another --save-dir, "
            "no --restore-file).")


def stop_if_finished(trainer) -> None:
    """End the process (status 0) when the checkpoint just loaded holds a finished run: its
    updates reach ``--max-update``. fairseq would train one more update and overwrite
    ``checkpoint_last.pt`` and ``checkpoint_best.pt`` with it; a finished run started again
    leaves them as they are. The log line says ``done training`` as fairseq's does at the end
    of a run (scripts that look for it see a finished run)."""
    cfg = trainer.cfg
    max_update, updates = cfg.optimization.max_update, trainer.get_num_updates()
    if not max_update or updates < max_update:
        return
    logger.info(f"done training: the checkpoint loaded holds {updates} updates, --max-update is "
                f"{max_update}; nothing to train, the checkpoints in {cfg.checkpoint.save_dir} "
                "are left as they are. Raise --max-update to train on")
    sys.exit(0)


def _last_checkpoint(cfg) -> str:
    return os.path.join(cfg.save_dir, f"checkpoint_last{cfg.checkpoint_suffix}.pt")


def _newest_intact_checkpoint(cfg, last: str) -> Tuple[str, dict]:
    """The readable numbered checkpoint of ``--save-dir`` with the most updates, and its state
    (the first of equals)."""
    numbered = r"checkpoint(?:_\d+_\d+|\d+)" + re.escape(f"{cfg.checkpoint_suffix}.pt")
    candidates, newest = {}, None
    for path in sorted(checkpoint_utils.checkpoint_paths(cfg.save_dir, numbered)):
        try:
            state = load_lazily(path)
            candidates[path] = int(state["optimizer_history"][-1]["num_updates"])
        except Exception:  # unreadable, or no update count
            continue
        if newest is None or candidates[path] > candidates[newest[0]]:
            newest = (path, state)
    if not candidates:
        raise OptionError(
            f"{last} cannot be read (cut short, e.g. by a kill while fairseq copied it) and "
            f"{cfg.save_dir} has no intact checkpoint_<epoch>_<updates>.pt or "
            f"checkpoint<epoch>.pt to resume from. Move {last} away to start from scratch, "
            "or pass --restore-file with a checkpoint to start from")
    path, state = newest
    warn_once(
        f"{last} cannot be read (cut short, e.g. by a kill while fairseq copied it): resuming "
        f"from {path}, the intact checkpoint with the most updates ({candidates[path]}). The "
        f"unreadable file is left as it is; the next save replaces it")
    return path, state


@dataclasses.dataclass
class MaskedLMResumeConfig(MaskedLMConfig):
    """fairseq's ``masked_lm`` options and :data:`ALLOW_CHANGED_BATCH`: ``masked_lm``'s config
    once the plugin is loaded (:mod:`taco_fairseq.fairseq_patches`), and the base of
    ``taco_masked_lm``'s."""

    allow_changed_batch: bool = dataclasses.field(default=False, metadata={
        "help": "resume from a checkpoint trained with another number of workers "
        "(--distributed-world-size), --batch-size or --update-freq, with a warning; the data "
        "goes on after the sequences already trained on. Without it such a resume is refused"})


@dataclasses.dataclass(frozen=True)
class Batching:
    """How a run splits its sequences per update: ``workers`` (data-parallel processes) ×
    ``batch_size`` (``--batch-size``; None with ``--max-tokens`` alone) × ``update_freq``
    (``--update-freq``, one entry per epoch, the last for later epochs)."""

    workers: int
    batch_size: Optional[int]
    update_freq: Tuple[int, ...]

    @classmethod
    def of_run(cls, cfg) -> "Batching":
        """The batching of fairseq's whole config ``cfg``."""
        model_parallel = cfg.common.model_parallel_size or 1
        return cls(cfg.distributed_training.distributed_world_size // model_parallel,
                   cfg.dataset.batch_size, tuple(cfg.optimization.update_freq))

    @classmethod
    def of_checkpoint(cls, state: dict) -> Optional["Batching"]:
        """The batching a checkpoint ``state`` was trained with, None where it does not record
        it."""
        world = saved_option(state, "distributed_training", "distributed_world_size")
        update_freq = saved_option(state, "optimization", "update_freq")
        if world is None or update_freq is None:
            return None
        model_parallel = saved_option(state, "common", "model_parallel_size") or 1
        return cls(int(world) // model_parallel, saved_option(state, "dataset", "batch_size"),
                   tuple(int(n) for n in update_freq))

    def sequences_per_update(self, epoch: int) -> Optional[int]:
        """Sequences per update in ``epoch`` (None without ``--batch-size``)."""
        if self.batch_size is None:
            return None
        return self.workers * self.batch_size * self.update_freq[min(epoch, len(
            self.update_freq)) - 1]

    def changes(self, other: "Batching") -> List[Tuple[str, object, object]]:
        """``(option, value here, value in other)`` of each option that differs."""
        pairs = (("--distributed-world-size", self.workers, other.workers),
                 ("--batch-size", self.batch_size, other.batch_size),
                 ("--update-freq", ",".join(map(str, self.update_freq)),
                  ",".join(map(str, other.update_freq))))
        return [(flag, mine, theirs) for flag, mine, theirs in pairs if mine != theirs]


def prepare_resume(cfg, trainer) -> Tuple[DictConfig, Optional[Batching]]:
    """What ``fairseq-train`` checks before it loads its checkpoint (given fairseq's
    ``checkpoint`` config ``cfg`` and its ``trainer``), the checkpoint read once:
    :func:`restore_config`, then :func:`check_batching_unchanged`.

    Returns:
        :func:`restore_config`'s config, and :func:`check_batching_unchanged`'s batching.

    Raises:
        OptionError, InputNotFoundError: from the functions named.
    """
    path, state = _checkpoint_and_state(cfg)
    if path is not None and state is None:
        state = load_lazily(path)
    restored = restore_config(cfg, trainer.task, trainer.get_model(), trainer.cfg.criterion,
                              chosen=(path, state))
    return restored, check_batching_unchanged(path, state, cfg, trainer.task.cfg, trainer.cfg)


def check_batching_unchanged(path, state: dict, cfg, task_cfg, training_cfg) -> Optional[Batching]:
    """Refuse to resume from the checkpoint ``path`` (``state``; None: a fresh start) with
    another number of workers, ``--batch-size`` or ``--update-freq`` than it was trained with,
    for tasks with :data:`ALLOW_CHANGED_BATCH` in their config ``task_cfg`` (``masked_lm``,
    ``taco_masked_lm``); ``cfg`` is fairseq's ``checkpoint`` config, ``training_cfg`` the whole
    one. The sequences per update would change without a word, and fairseq would restore each
    worker's position in the epoch as if it were the old one's, skipping or repeating batches.
    With ``--allow-changed-batch`` a warning names the changes instead, and the returned
    batching lets :func:`data_position_kept` move the position. Not checked: a start from the
    checkpoint's weights (``--finetune-from-model`` without ``checkpoint_last.pt``, or
    ``--reset-optimizer`` with ``--reset-dataloader``).

    Returns:
        the checkpoint's :class:`Batching` when the run goes on from its position in the data
        with another one, else None.

    Raises:
        OptionError: naming each changed option with the checkpoint's value and this run's.
    """
    allowed = getattr(task_cfg, ALLOW_CHANGED_BATCH, None)
    if (allowed is None or path is None or _finetune_start(cfg, path)
            or (cfg.reset_optimizer and cfg.reset_dataloader)):
        return None
    saved, here = Batching.of_checkpoint(state), Batching.of_run(training_cfg)
    changed = [] if saved is None else saved.changes(here)
    if not changed:
        return None
    updates = _num_updates(state)
    epoch = ((state.get("extra_state") or {}).get("train_iterator") or {}).get("epoch", 1)
    sequences = [b.sequences_per_update(epoch) for b in (saved, here)]
    per_update = (f" ({sequences[0]} sequences per update in the checkpoint, {sequences[1]} in "
                  "this run)" if None not in sequences and sequences[0] != sequences[1] else "")
    listed = f"{_listed(changed)}{per_update}"
    if not allowed:
        raise OptionError(
            f"{path} (update {updates}) was trained with other batches than this run's: "
            f"{listed}. Resume with the checkpoint's values; to go on from update {updates} "
            "with the new ones, add --allow-changed-batch (the data goes on after the "
            "sequences trained on); to start a new run, use another --save-dir")
    logger.warning(f"--allow-changed-batch: resuming {path} (update {updates}) with other "
                   f"batches: {listed}. Its later checkpoints record the new values")
    return None if cfg.reset_dataloader else saved


def data_position(saved: Batching, here: Batching, itr_state: dict,
                  batches_per_worker: int) -> Tuple[dict, Optional[str]]:
    """Where each worker of a run with batching ``here`` goes on in the epoch that a run with
    batching ``saved`` left at ``itr_state`` (fairseq's train-iterator state: ``epoch``, and
    ``iterations_in_epoch``, the batches each of its workers had read), the epoch having
    ``batches_per_worker`` batches per worker here. fairseq shuffles an epoch's batches (which
    depend on the batch size, not on the workers) with the seed and the epoch, and gives worker
    r the batches r, r + workers, ...:

    * same ``--batch-size``: the workers skip the batches read before, exactly, up to fewer
      than ``here.workers`` batches read again where they do not divide evenly;
    * another ``--batch-size``: the epoch's batches are formed anew; the workers skip as many
      sequences as were read before, so some read before come again and as many others are
      left out of this epoch (from the next epoch on, each once per epoch);
    * ``--max-tokens`` batches (no ``--batch-size`` on one side): the epoch starts over.

    Returns:
        the iterator state to load (the next epoch when nothing is left of this one) and a
        line saying where the run goes on (None when the epoch had not begun).
    """
    read = itr_state.get("iterations_in_epoch", 0)
    epoch = itr_state.get("epoch", 1)
    if read == 0:
        return itr_state, None
    consumed = read * saved.workers
    if saved.batch_size == here.batch_size:
        position, again = consumed // here.workers, consumed % here.workers
        how = (f"after the {consumed} batches of the epoch read before"
               + (f" ({again} of them read again, as {consumed} batches do not divide evenly "
                  f"over {here.workers} workers)" if again else ""))
    elif saved.batch_size is not None and here.batch_size is not None:
        sequences = consumed * saved.batch_size
        position = sequences // (here.batch_size * here.workers)
        how = (f"after {position * here.batch_size * here.workers} sequences, as many as the "
               f"{sequences} read before: the epoch's batches are formed anew for --batch-size "
               f"{here.batch_size}, so some sequences read before come again in this epoch and "
               "as many others are left out of it")
    else:
        position = 0
        how = ("at its start: its batches are formed by --max-tokens on one side, so the "
               "sequences read before cannot be skipped; they are read again")
    if position >= batches_per_worker:
        return ({**itr_state, "epoch": epoch + 1, "iterations_in_epoch": 0},
                f"epoch {epoch} was read to its end: the run goes on with epoch {epoch + 1}")
    who = (f"each of the {here.workers} workers goes on" if here.workers > 1
           else "the worker goes on")
    return ({**itr_state, "iterations_in_epoch": position},
            f"{who} in epoch {epoch} at its batch {position} of {batches_per_worker}, {how}")


@contextlib.contextmanager
def data_position_kept(trainer, saved: Optional[Batching]):
    """While fairseq's ``load_checkpoint`` runs in this block, the train iterator that
    ``trainer`` builds loads its checkpoint state moved by :func:`data_position` from the
    checkpoint's batching ``saved`` to the run's (nothing changes for ``saved`` None)."""
    if saved is None:
        yield
        return
    here, build = Batching.of_run(trainer.cfg), trainer.get_train_iterator

    def get_train_iterator(*args, **kwargs):
        epoch_itr = build(*args, **kwargs)
        load = epoch_itr.load_state_dict

        def load_state_dict(itr_state):
            moved, where = data_position(saved, here, itr_state, len(epoch_itr))
            if where is not None:
                logger.warning(f"--allow-changed-batch: {where}")
            del epoch_itr.load_state_dict
            return load(moved)

        epoch_itr.load_state_dict = load_state_dict
        return epoch_itr

    trainer.get_train_iterator = get_train_iterator
    try:
        yield
    finally:
        del trainer.get_train_iterator


def _finetune_start(cfg, path) -> bool:
    """Whether fairseq starts from the weights of ``path`` alone: ``--finetune-from-model``
    without a ``checkpoint_last.pt`` (it then resets the optimizer, meters and data)."""
    return path == cfg.finetune_from_model and not PathManager.isfile(_last_checkpoint(cfg))


def _num_updates(state: dict):
    """The updates a checkpoint ``state`` holds (``?`` where it does not say)."""
    return (state.get("optimizer_history") or [{}])[-1].get("num_updates", "?")


def _listed(changed) -> str:
    """``(option, checkpoint's value, this run's)`` triples as a message lists them."""
    return "; ".join(f"{flag} {saved} in the checkpoint, {here} in this run"
                     for flag, saved, here in changed)
