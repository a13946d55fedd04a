"""Configuration errors of the plugin, reported as one line by the commands a user runs.

The plugin's checks of options, data and checkpoints (task, criterion and model set-up) raise
:class:`OptionError` (a ``ValueError``) or :class:`InputNotFoundError` (a
``FileNotFoundError``), whose message names the option or file and the fix. Such an error
ends the command with ``error: MESSAGE`` on stderr and exit status 1, without a traceback:

* ``fairseq-train --user-dir taco_fairseq`` (and every Python program that imports
  ``taco_fairseq``): importing the package installs :func:`excepthook`, which shortens these two
  classes only and hands every other exception to the previous hook unchanged;
* ``fairseq-hydra-train``: hydra prints the message of a ``CompactHydraException`` alone, and
  both classes are one.

``TACO_FAIRSEQ_DEBUG=1`` in the environment (or ``HYDRA_FULL_ERROR=1`` for
``fairseq-hydra-train``) brings the full traceback back. With fairseq's own spawning of one
process per GPU (``--distributed-world-size N`` without ``--distributed-no-spawn``) the error
reaches the parent as torch's ``ProcessRaisedException`` and keeps its traceback.
"""

import os
import sys

from hydra.errors import CompactHydraException

#: Set to 1 to see the traceback of a configuration error.
DEBUG_VARIABLE = "TACO_FAIRSEQ_DEBUG"


class ConfigurationError(CompactHydraException):
    """A bad option, data directory or checkpoint found before training; its message names
    what to change."""


class OptionError(ConfigurationError, ValueError):
    """A bad option value or combination of options (or a checkpoint or data-bin that does
    not fit them)."""


class InputNotFoundError(ConfigurationError, FileNotFoundError):
    """A data directory or checkpoint named by an option does not exist."""


def hydra_relative_path_hint(path) -> str:
    """`` (…)`` explaining where a relative ``path`` went under ``fairseq-hydra-train``, which
    runs in its own directory (``hydra.run.dir``, ``outputs/DATE/TIME`` by default), not in
    the one it was started from; ``""`` for an absolute path or outside hydra."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.utils import get_original_cwd

    if path is None or os.path.isabs(path) or not HydraConfig.initialized():
        return ""
    return (
        f" (fairseq-hydra-train runs in {os.getcwd()}, not in {get_original_cwd()} where it "
        f"was started: give absolute paths, e.g. {os.path.join('$PWD', path)})"
    )


def excepthook(kind, error, traceback):
    """``sys.excepthook``: ``error: MESSAGE`` for a :class:`ConfigurationError` unless
    ``TACO_FAIRSEQ_DEBUG=1``; everything else goes to the hook this one replaced."""
    if isinstance(error, ConfigurationError) and os.environ.get(DEBUG_VARIABLE) != "1":
        print(f"error: {error}", file=sys.stderr)
        return
    _previous_hook(kind, error, traceback)


def install_excepthook() -> None:
    """Make :func:`excepthook` ``sys.excepthook`` (once; the replaced hook stays in charge of
    all other exceptions)."""
    global _previous_hook
    if getattr(sys.excepthook, "__module__", None) != __name__:
        _previous_hook = sys.excepthook
        sys.excepthook = excepthook


_previous_hook = sys.excepthook
