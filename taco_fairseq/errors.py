"""Configuration errors. One (its message names the option or file and the fix) ends a program
that imports ``taco_fairseq`` with ``error: MESSAGE`` on stderr and status 1, no traceback
(hydra prints a ``CompactHydraException``'s message alone); ``TACO_FAIRSEQ_DEBUG=1``
(``HYDRA_FULL_ERROR=1``) shows the traceback."""

import os
import sys

from hydra.errors import CompactHydraException

#: Set to 1 to see the traceback of a configuration error.
DEBUG_VARIABLE = "TACO_FAIRSEQ_DEBUG"


class ConfigurationError(CompactHydraException):
    """A bad option, data directory or checkpoint found before training, or a condition the
    user fixes outside the run (a full disk)."""


class OptionError(ConfigurationError, ValueError):
    """A bad option value or combination (or a checkpoint or data-bin that does not fit)."""


class InputNotFoundError(ConfigurationError, FileNotFoundError):
    """A data directory or checkpoint named by an option does not exist."""


class NoSpaceError(ConfigurationError, OSError):
    """A checkpoint did not fit on the disk of its save directory (nothing cut is left)."""


def hydra_relative_path_hint(path) -> str:
    """`` (…)``: where a relative ``path`` went under ``fairseq-hydra-train``, which runs in
    its own directory; ``""`` for an absolute path or outside hydra."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.utils import get_original_cwd

    if path is None or os.path.isabs(path) or not HydraConfig.initialized():
        return ""
    return (f" (fairseq-hydra-train runs in {os.getcwd()}, not in {get_original_cwd()} where "
            f"it was started: give absolute paths, e.g. {os.path.join('$PWD', path)})")


def install_excepthook() -> None:
    """Make ``sys.excepthook`` print ``error: MESSAGE`` for a :class:`ConfigurationError` unless
    ``TACO_FAIRSEQ_DEBUG=1``, and pass everything else to the hook it replaces (once)."""
    previous = sys.excepthook
    if getattr(previous, "__module__", None) == __name__:
        return

    def excepthook(kind, error, traceback):
        if isinstance(error, ConfigurationError) and os.environ.get(DEBUG_VARIABLE) != "1":
            print(f"error: {error}", file=sys.stderr)
        else:
            previous(kind, error, traceback)

    sys.excepthook = excepthook
