"""The optional dependencies of the commands (``setup.py``'s ``extras_require``): a command that
needs one checks for it after parsing its options, before any work, and ends in one line that
names the extra to install; ``--help`` needs none."""

import importlib.util
import sys
from typing import List

#: The extras the commands need → the modules of each that the commands import.
EXTRA_MODULES = {
    "analysis": ("sentencex",),
    "plot": ("matplotlib",),
    "hf": ("transformers", "tokenizers", "safetensors"),
}


def missing_modules(extra: str) -> List[str]:
    """The modules of ``extra`` (:data:`EXTRA_MODULES`) that cannot be imported here."""
    return [module for module in EXTRA_MODULES[extra]
            if importlib.util.find_spec(module) is None]


def require_extras(command: str, *extras: str) -> None:
    """Exit (status 1) with ``error: COMMAND needs the 'EXTRA' extra ...: pip install ...`` when a
    module of one of ``extras`` is missing; return otherwise."""
    missing = {extra: modules for extra in extras if (modules := missing_modules(extra))}
    if not missing:
        return
    names = " and ".join(f"'{extra}'" for extra in missing)
    modules = ", ".join(module for found in missing.values() for module in found)
    sys.exit(f"error: {command} needs the {names} extra{'s' if len(missing) > 1 else ''} "
             f"(no module {modules}): pip install -c constraints.txt -e '.[{','.join(missing)}]'")
