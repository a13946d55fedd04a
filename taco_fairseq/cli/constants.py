"""The tools' constants a command's parser shows (choices, defaults), read without importing the
tools: a command imports its tools (and with them fairseq, torch or an extra) only in ``main()``
or the functions that use them, so that ``--help`` and a usage error answer at once, without
the extras installed (``tests/test_cli.py`` checks both)."""

import ast
import functools
from pathlib import Path

#: The ``taco_fairseq`` package directory.
PACKAGE_DIR = Path(__file__).resolve().parents[1]


@functools.lru_cache(maxsize=None)
def _literals(module: str) -> dict:
    """{name: value} of the top-level assignments of a literal in ``module``'s source."""
    path = PACKAGE_DIR.joinpath(*module.split(".")[1:]).with_suffix(".py")
    literals = {}
    for node in ast.parse(path.read_text(encoding="utf-8"), str(path)).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(
                node.targets[0], ast.Name):
            try:
                literals[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:  # not a literal
                continue
    return literals


def tool_constant(module: str, name: str):
    """``module.name`` (``module`` a ``taco_fairseq`` module such as
    ``"taco_fairseq.glue.probes"``), a literal (number, string, tuple, ...) its source assigns
    at the top level, read from the source without importing the module.

    Raises:
        KeyError: ``module`` assigns no literal ``name`` at its top level.
    """
    literals = _literals(module)
    if name not in literals:
        raise KeyError(f"{module} assigns no literal {name} at its top level")
    return literals[name]
