"""taco-fairseq: TACO pre-training for fairseq.

:func:`register` registers the task, criteria and architectures, allow-lists fairseq
checkpoints for weights-only loading, applies :mod:`.fairseq_patches`, installs the
:mod:`.errors` hook and silences fairseq's known hydra deprecation warnings. ``--user-dir
taco_fairseq`` (``common.user_dir`` under ``fairseq-hydra-train``) registers: fairseq imports
the package, and importing it after fairseq registers at once. Imported before fairseq (as the
``taco-*`` commands import it), the package imports nothing heavy, so that a command's
``--help`` answers at once; a later ``--user-dir taco_fairseq`` still registers (fairseq's
``import_user_module``, which skips a package imported before, is wrapped when fairseq is
imported), and the modules that use the plugin in-process without it (:mod:`.hub`,
:mod:`.glue.predict`) call :func:`register`, as must a program that imports ``taco_fairseq``
before fairseq and then uses the plugin's task, criteria or architectures without
``--user-dir``. It imports none of the tools.
"""

import functools
import importlib.util
import os
import sys
import warnings

__version__ = "0.1.0"

#: (category, message regex, module regex) of the hydra deprecation warnings every
#: ``fairseq-train`` start gives through fairseq's own hydra calls (ve-fairseq 0.12.3,
#: hydra-core 1.3: ``convert_namespace_to_omegaconf``); nothing a user can act on.
FAIRSEQ_HYDRA_WARNINGS = (
    (UserWarning, r"hydra\.experimental\.(initialize|compose)\(\) is no longer experimental",
     r"hydra\.experimental\.(initialize|compose)$"),
    (UserWarning, r"\s*The version_base parameter is not specified\.",
     r"hydra\.experimental\.initialize$"),
    (UserWarning, r"In 'config': Usage of deprecated keyword in package header "
     r"'# @package _group_'", r"hydra\.core\.default_element$"),
    # hydra attributes this one to the frame 11 levels above its own ("sys" when the stack is
    # shallower, as under fairseq-train): any module, the message alone is precise
    (UserWarning, r"\s*'config' is validated against ConfigStore schema with the same name\.",
     r""),
    (UserWarning, r"\s*The strict flag in the compose API is deprecated\.", r"hydra\.compose$"),
)

_registered = False


def silence_fairseq_hydra_warnings() -> None:
    """Ignore exactly the warnings of :data:`FAIRSEQ_HYDRA_WARNINGS` (idempotent: Python's
    ``filterwarnings`` replaces an equal filter); every other warning still shows."""
    for category, message, module in FAIRSEQ_HYDRA_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category, module=module)


def register() -> None:
    """Register the plugin with fairseq (idempotent): import the task, criteria and models
    (registering them and the weights-only allow-list), apply :mod:`.fairseq_patches`, install
    the :mod:`.errors` hook and :func:`silence_fairseq_hydra_warnings`. Imports fairseq."""
    global _registered
    if _registered:
        return
    from . import criterion, errors, fairseq_patches, models, task  # noqa: F401

    errors.install_excepthook()
    fairseq_patches.apply()
    silence_fairseq_hydra_warnings()
    _registered = True


def _registers_with_user_dir(import_user_module):
    """fairseq's ``utils.import_user_module``, made to :func:`register` when ``--user-dir``
    (``common.user_dir``) names this package: fairseq leaves a package imported before alone."""

    @functools.wraps(import_user_module)
    def wrapped(args):
        import_user_module(args)  # raises for another package of this name
        user_dir = getattr(args, "user_dir", None)
        if user_dir and os.path.basename(os.path.abspath(user_dir)) == __name__:
            register()

    return wrapped


class _UserDirHook:
    """A ``sys.meta_path`` finder that finds nothing: when ``fairseq.utils`` is imported after
    this package, it makes its loader wrap ``import_user_module`` once the module is executed
    (:func:`_registers_with_user_dir`), and removes itself."""

    def find_spec(self, name, path=None, target=None):
        if name != "fairseq.utils":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            module.import_user_module = _registers_with_user_dir(module.import_user_module)

        spec.loader.exec_module = exec_module  # this module's own loader
        return spec


if "fairseq" in sys.modules:  # --user-dir: fairseq's import_user_module imports the package
    register()
elif not any(isinstance(finder, _UserDirHook) for finder in sys.meta_path):
    sys.meta_path.insert(0, _UserDirHook())
