"""Relative paths under ``fairseq-hydra-train`` mean what they meant where it was started.

hydra runs the job in its own directory (``hydra.run.dir``, fairseq's ``outputs/DATE/TIME``),
so a relative ``checkpoint.save_dir`` would put the checkpoints in a new directory at every
run, and a rerun would start from update 0 instead of resuming. :func:`resolve` makes the
paths of :data:`PATH_OPTIONS` absolute against hydra's original working directory, once the
plugin is loaded and before fairseq uses them (``fairseq_patches`` calls it from fairseq's
``add_defaults`` in ``fairseq_cli.train.main``).
"""

import logging
import os

from fairseq import utils

#: (config group, option) of the paths resolved; the checkpoint options only when not their
#: default (``checkpoint_last.pt`` is relative to ``save_dir``) or None.
PATH_OPTIONS = (("checkpoint", "save_dir"), ("task", "data"), ("checkpoint", "restore_file"),
                ("checkpoint", "continue_once"), ("checkpoint", "finetune_from_model"))
#: fairseq's default ``restore_file``: ``checkpoint_last.pt`` in ``save_dir``, left as it is.
DEFAULT_RESTORE_FILE = "checkpoint_last.pt"

logger = logging.getLogger(__name__)


def resolve(cfg) -> None:
    """Under ``fairseq-hydra-train``, make the relative paths of :data:`PATH_OPTIONS` in
    ``cfg`` (fairseq's whole config, changed in place) absolute against the directory the
    command was started in, with one info line each; ``task.data`` may list several paths
    (``a:b``). Outside hydra, or where hydra did not change the working directory, nothing
    changes. A process that fairseq itself spawned for a GPU does not know hydra's original
    directory: there a relative path gets a warning.
    """
    from hydra.core.hydra_config import HydraConfig
    from hydra.utils import get_original_cwd

    if not HydraConfig.initialized():
        if "job_logging_cfg" in cfg:  # a hydra job's config in a process fairseq spawned
            for group, name, value in _relative_paths(cfg):
                logger.warning(
                    f"{group}.{name} {value!r} is relative, and this process, started by fairseq "
                    f"for one GPU, does not know where fairseq-hydra-train was started: it "
                    f"means {os.path.abspath(value)}. Give absolute paths (e.g. $PWD/{value})")
        return
    started_in = get_original_cwd()
    if os.path.realpath(started_in) == os.path.realpath(os.getcwd()):
        return
    for group, name, value in _relative_paths(cfg):
        absolute = os.pathsep.join(os.path.normpath(os.path.join(started_in, p))
                                   for p in utils.split_paths(value))
        logger.info(f"{group}.{name} {value!r} is relative to where fairseq-hydra-train was "
                    f"started, {started_in}: using {absolute} (the job runs in {os.getcwd()})")
        cfg[group][name] = absolute


def _relative_paths(cfg):
    """``(group, option, value)`` of each option of :data:`PATH_OPTIONS` in ``cfg`` whose
    value holds a relative local path."""
    for group, name in PATH_OPTIONS:
        section = cfg.get(group)
        value = None if section is None else section.get(name)
        if (not isinstance(value, str) or not value or "://" in value
                or (name == "restore_file" and value == DEFAULT_RESTORE_FILE)):
            continue
        if not all(os.path.isabs(p) for p in utils.split_paths(value)):
            yield group, name, value

