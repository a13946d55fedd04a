"""Narrow fixes of fairseq (ve-fairseq 0.12.3), applied when ``taco_fairseq`` is imported:

* ``TokenBlockDataset`` and ``LanguagePairDataset`` see a numpy with ``np.compat.long`` (int64,
  removed in numpy 2); numpy itself is unchanged.
* ``checkpoint_utils.load_checkpoint`` first holds ``--save-dir`` for the run (on global rank
  0, which writes the checkpoints; not with ``--no-save``: :func:`taco_fairseq.save_dir.hold`),
  goes through :func:`taco_fairseq.resume.prepare_resume` (:func:`~taco_fairseq.resume.
  restore_config`, :func:`~taco_fairseq.resume.check_batching_unchanged`), moves the data
  position of an allowed change of batches (:func:`~taco_fairseq.resume.data_position_kept`)
  and then goes through :func:`taco_fairseq.resume.stop_if_finished`, for every task.
* ``masked_lm``'s config is :class:`taco_fairseq.resume.MaskedLMResumeConfig`
  (``--allow-changed-batch``).
* Checkpoint files (``checkpoint_utils.torch_persistent_save``, and ``PathManager.copy``,
  with which fairseq copies the first to ``checkpoint_last.pt`` …) are written whole or not
  at all, a full disk ending the run in one line (:func:`taco_fairseq.save_dir.written_whole`).
* (the two patches of ``fairseq_cli.train`` below reach ``__main__`` too when fairseq-train
  runs as ``python -m fairseq_cli.train``, as taco-compare runs it)
* ``fairseq_cli.train.main``'s ``add_defaults`` makes the relative paths of a
  ``fairseq-hydra-train`` run absolute where it was started
  (:func:`taco_fairseq.hydra_paths.resolve`).
* ``MaskedLMTask.state_dict`` (fairseq's ``masked_lm``, and so ``taco_masked_lm``) saves the
  fingerprints of the task's data with its state
  (:func:`taco_fairseq.metadata.masked_lm_state_dict`).
* ``checkpoint_utils.verify_checkpoint_directory`` turns a ``--save-dir`` it cannot create or
  write into a one-line error.
* ``distributed.utils._broadcast_object_slow``, with which rank 0 sends the checkpoint it
  loaded to the other data-parallel ranks, unpickles also :data:`BROADCAST_GLOBALS`.
* ``distributed.utils.all_gather_list``, with which fairseq gathers logging outputs that
  cannot be summed, needs CUDA; without it, torch's ``all_gather_object`` does the same.
* At exit, the read-ahead threads of ``BufferedIterator`` are stopped and joined: a daemon
  thread still collating inside torch when the interpreter finalizes aborts the process
  ("terminate called without an active exception", status 134).
* The warning torch gives each update for the ``torch.cuda.amp.autocast`` of fairseq's
  ``FairseqTask.train_step`` is silenced.
* ``fairseq_cli.train.get_valid_stats`` stops in one line when a validation logged no
  ``--best-checkpoint-metric`` (:func:`check_validation_logged`), and logs the first
  validation that leaves the bag-of-words plateau
  (:func:`taco_fairseq.neighbour_attention.report_plateau_exit`).
* ``Trainer.load_checkpoint`` keeps a checkpoint's optimizer and learning-rate state across
  a change of criterion where ``--tc-allow-changed-objective`` allows it
  (:func:`taco_fairseq.resume.keep_optimizer_across_objectives`; fairseq asserts the
  criterion's class is unchanged).
* ``Trainer`` first checks the precision options (:func:`check_precision`), for every task:
  without it, ``--fp16`` on a machine without CUDA and ``--bf16`` without torch_xla end in a
  traceback from deep inside the trainer.
"""

import atexit
import collections
import contextlib
import functools
import importlib.util
import logging
import os
import queue
import shutil
import sys
import threading
import time
import types
import typing
import warnings

import numpy as np
import torch
from fairseq import checkpoint_utils
from fairseq.data import iterators, language_pair_dataset, token_block_dataset
from fairseq.distributed import utils as distributed_utils
from omegaconf import AnyNode, DictConfig, ListConfig
from omegaconf.base import ContainerMetadata, Metadata

from .errors import OptionError, hydra_relative_path_hint

#: What ``broadcast_object`` pickles of a checkpoint loaded by fairseq's
#: ``load_checkpoint_to_cpu`` beyond :data:`taco_fairseq.metadata.SAFE_GLOBALS`: its ``cfg``,
#: made an omegaconf ``DictConfig``, and fairseq's placeholders of the tensors it sends apart.
BROADCAST_GLOBALS = [DictConfig, ListConfig, AnyNode, ContainerMetadata, Metadata, typing.Any,
                     collections.defaultdict, dict, list, int, distributed_utils._TensorPlaceholder]


class _NumpyWithCompatLong(types.ModuleType):
    """numpy, plus ``compat.long`` when the installed numpy has no ``compat``."""

    compat = types.SimpleNamespace(long=np.int64)

    def __getattr__(self, name):
        return getattr(np, name)


def _stop_read_ahead(timeout: float = 60.0) -> None:
    """Let every live read-ahead thread (``BackgroundConsumer``) finish its batch, stop after
    it and exit, its queue drained so that no ``put`` blocks; at most ``timeout`` seconds in all,
    after which a thread still alive is named in a warning."""
    deadline = time.monotonic() + timeout
    for consumer in threading.enumerate():
        if isinstance(consumer, iterators.BackgroundConsumer):
            consumer._max_len = 0  # it stops after its next put
            while consumer.is_alive() and time.monotonic() < deadline:
                with contextlib.suppress(queue.Empty):
                    while True:
                        consumer._queue.get_nowait()
                consumer.join(0.05)
            if consumer.is_alive():
                logging.getLogger(__name__).warning(
                    f"fairseq's read-ahead thread {consumer.name} is still collating after "
                    f"{timeout:g} s; the process may abort at exit (status 134)")


def check_precision(common_cfg) -> None:
    """Check fairseq's precision options (``cfg.common``) against the machine.

    Raises:
        OptionError: ``--fp16`` without a CUDA GPU (fairseq: torch's "Torch not compiled with
            CUDA enabled" when it builds the optimizer), or ``--bf16`` without torch_xla
            (fairseq: "'NoneType' object has no attribute 'xla_device'" in ``Trainer``).
    """
    if common_cfg.fp16 and not torch.cuda.is_available():
        raise OptionError("--fp16 needs a CUDA GPU (fairseq's FP16Optimizer); on the CPU leave "
                          "it out and train in float32")
    if common_cfg.bf16 and importlib.util.find_spec("torch_xla") is None:
        raise OptionError("--bf16 means TPU training in fairseq (it implies --tpu) and needs "
                          "torch_xla; on GPUs use --fp16 or --amp, on the CPU leave it out")


def check_validation_logged(stats: dict, metric: str, updates: int) -> None:
    """Stop in one line when a validation logged no ``metric`` (fairseq's
    ``--best-checkpoint-metric``, ``loss`` by default), as when none of its batches had a
    masked token (the criteria log no loss for a batch that predicts nothing,
    :mod:`taco_fairseq.criterion`): fairseq would end in a ``KeyError`` from choosing the best
    checkpoint.

    Raises:
        OptionError: naming the update, the metric and what to check.
    """
    if metric not in stats:
        raise OptionError(
            f"the validation at update {updates} logged no {metric}: none of its batches had a "
            "masked token (or a TC anchor) to predict. Check --mask-prob and the validation "
            "data (--valid-subset), or choose another --best-checkpoint-metric")


def unwritable_save_dir(save_dir: str, error: OSError) -> str:
    """The one-line message for a ``--save-dir`` that fairseq cannot create or write to
    (``error``): a file where a directory should be, or a directory without write access."""
    blocking = os.path.abspath(save_dir)
    while not os.path.exists(blocking) and os.path.dirname(blocking) != blocking:
        blocking = os.path.dirname(blocking)
    hint = hydra_relative_path_hint(save_dir)
    if not os.path.isdir(blocking):
        return (f"--save-dir {save_dir}: {blocking} is a file, not a directory, so the "
                f"checkpoint directory cannot be made there{hint}. Give a --save-dir whose "
                f"path holds no file, or move {blocking} away")
    return (f"--save-dir {save_dir}: cannot write checkpoints there ({error.strerror or error}: "
            f"{blocking} is read-only for this user){hint}. Give a --save-dir in a directory "
            "you can write to")


def apply() -> None:
    """Apply the fixes (idempotent)."""
    from fairseq.tasks.masked_lm import MaskedLMTask
    from fairseq.trainer import Trainer

    import fairseq_cli.train as fairseq_train

    from fairseq.file_io import PathManager

    from . import hydra_paths, save_dir
    from .metadata import masked_lm_state_dict
    from .neighbour_attention import report_plateau_exit
    from .resume import (
        ALLOW_CHANGED_OBJECTIVE,
        MaskedLMResumeConfig,
        data_position_kept,
        keep_optimizer_across_objectives,
        prepare_resume,
        stop_if_finished,
    )

    warnings.filterwarnings("ignore", category=FutureWarning,
                            message=r"`torch\.cuda\.amp\.autocast\(args\.\.\.\)` is deprecated")
    atexit.unregister(_stop_read_ahead)  # registered once
    atexit.register(_stop_read_ahead)
    if not hasattr(np, "compat"):
        for module in (token_block_dataset, language_pair_dataset):
            if module.np is np:
                module.np = _NumpyWithCompatLong("numpy")

    def broadcast_object_slow(original, *args, **kwargs):
        with torch.serialization.safe_globals(BROADCAST_GLOBALS):
            return original(*args, **kwargs)

    def all_gather_list(original, data, group=None, max_size=16384):
        if torch.cuda.is_available():
            return original(data, group, max_size)
        gathered = [None] * distributed_utils.get_world_size(group)
        torch.distributed.all_gather_object(gathered, data, group=group)
        return gathered

    def load_checkpoint(original, cfg, trainer, **passthrough_args):
        if not cfg.no_save and distributed_utils.is_master(trainer.cfg.distributed_training):
            save_dir.hold(cfg.save_dir)
        cfg, saved_batching = prepare_resume(cfg, trainer)
        with data_position_kept(trainer, saved_batching):
            loaded = original(cfg, trainer, **passthrough_args)
        stop_if_finished(trainer)
        return loaded

    def torch_persistent_save(original, obj, filename, async_write=False):
        if async_write or not PathManager.supports_rename(filename):
            return original(obj, filename, async_write)
        with save_dir.written_whole(filename) as partial, open(partial, "wb") as f:
            torch.save(obj, f)

    def copy(original, src_path, dst_path, overwrite=False):
        if PathManager.path_requires_pathmanager(dst_path):
            return original(src_path, dst_path, overwrite)
        with save_dir.written_whole(dst_path) as partial:
            shutil.copyfile(src_path, partial)
        return True

    def add_defaults(original, cfg):
        original(cfg)
        hydra_paths.resolve(cfg)

    def verify_checkpoint_directory(original, save_dir):
        try:
            return original(save_dir)
        except OSError as e:
            raise OptionError(unwritable_save_dir(save_dir, e)) from e

    def get_valid_stats(original, cfg, trainer, stats, tracking_best):
        check_validation_logged(stats, cfg.checkpoint.best_checkpoint_metric,
                                trainer.get_num_updates())
        stats = original(cfg, trainer, stats, tracking_best)
        if tracking_best:  # the first validation subset
            report_plateau_exit(stats, trainer.task)
        return stats

    def trainer_load_checkpoint(original, self, *args, **kwargs):
        if not getattr(self.task.cfg, ALLOW_CHANGED_OBJECTIVE, False):
            return original(self, *args, **kwargs)

        def load_checkpoint_to_cpu(load, *load_args, **load_kwargs):
            state = load(*load_args, **load_kwargs)
            keep_optimizer_across_objectives(state, self.get_criterion())
            return state

        with _wrapped(checkpoint_utils, "load_checkpoint_to_cpu", load_checkpoint_to_cpu):
            return original(self, *args, **kwargs)

    def trainer_init(original, self, cfg, *args, **kwargs):
        check_precision(cfg.common)
        original(self, cfg, *args, **kwargs)

    _wrap_once(distributed_utils, "_broadcast_object_slow", broadcast_object_slow)
    _wrap_once(distributed_utils, "all_gather_list", all_gather_list)
    _wrap_once(checkpoint_utils, "load_checkpoint", load_checkpoint)
    _wrap_once(Trainer, "__init__", trainer_init)
    _wrap_once(Trainer, "load_checkpoint", trainer_load_checkpoint)
    for train_module in _fairseq_train_modules(fairseq_train):
        _wrap_once(train_module, "get_valid_stats", get_valid_stats)
        _wrap_once(train_module, "add_defaults", add_defaults)
    _wrap_once(checkpoint_utils, "verify_checkpoint_directory", verify_checkpoint_directory)
    _wrap_once(checkpoint_utils, "torch_persistent_save", torch_persistent_save)
    _wrap_once(PathManager, "copy", copy)
    MaskedLMTask.state_dict = masked_lm_state_dict
    _replace_task_config(MaskedLMTask, "masked_lm", MaskedLMResumeConfig)


def _fairseq_train_modules(fairseq_train) -> list:
    """The modules whose ``get_valid_stats`` and ``add_defaults`` a run calls: the imported
    ``fairseq_cli.train`` (``fairseq-train``, ``fairseq-hydra-train``), and also ``__main__``
    under ``python -m fairseq_cli.train`` (as taco-compare trains), which runs the file as a
    module of its own whose functions the imported one's patches would not reach."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if main is not fairseq_train and getattr(spec, "name", None) == fairseq_train.__name__:
        return [fairseq_train, main]
    return [fairseq_train]


def _replace_task_config(task, name: str, config) -> None:
    """Make ``config`` (a dataclass extending the task's own) the config of the task class
    ``task`` registered as ``name``, where fairseq's ``register_task`` put the old one: for the
    command line, hydra's config store and ``setup_task``."""
    from fairseq import tasks
    from hydra.core.config_store import ConfigStore

    if tasks.TASK_DATACLASS_REGISTRY.get(name) is config:
        return
    tasks.TASK_DATACLASS_REGISTRY[name] = config
    setattr(task, "__dataclass", config)  # not name-mangled: register_task sets it so
    node = config()
    node._name = name
    ConfigStore.instance().store(name=name, group="task", node=node, provider="fairseq")


@contextlib.contextmanager
def _wrapped(owner, name: str, wrapper):
    """``owner.name`` replaced by a function calling ``wrapper(original, *args, **kwargs)``
    while the block runs (for one call of the caller), then restored."""
    original = getattr(owner, name)
    setattr(owner, name, functools.partial(wrapper, original))
    try:
        yield
    finally:
        setattr(owner, name, original)


def _wrap_once(owner, name: str, wrapper) -> None:
    """Replace ``owner.name`` (a module's function or a class's method) by a function calling
    ``wrapper(original, *args, **kwargs)``, unless done before."""
    original = getattr(owner, name)
    if not getattr(original, "wrapped_by_taco_fairseq", False):
        @functools.wraps(original)
        def wrapped(*args, **kwargs):
            return wrapper(original, *args, **kwargs)

        wrapped.wrapped_by_taco_fairseq = True
        setattr(owner, name, wrapped)
