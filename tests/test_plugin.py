"""What ``import taco_fairseq`` (and ``--user-dir taco_fairseq``) loads: the plugin modules and
their registrations, none of the tools."""

import ast
import json
import subprocess
import sys

import pytest

from conftest import REPO

TOOLS = ("prep", "glue", "analysis", "hf_export", "comparison", "cli")
#: What each tool package may import besides the plugin: imports flow cli → tools → plugin,
#: and among the tools one way, from the GLUE and comparison tools down to ``prep`` (GLUE data
#: preparation, ``glue/databin.py``, builds on prep's binarizer and dictionary check; prep
#: knows nothing of GLUE).
TOOL_IMPORTS = {
    "prep": set(),
    "analysis": {"prep"},
    "hf_export": {"prep"},
    "glue": {"prep", "analysis"},
    "comparison": {"glue", "analysis"},
    "cli": set(TOOLS) - {"cli"},
}


def _layer(module: str) -> str:
    """``taco_fairseq.glue.runner`` → ``glue``; a module of the plugin → ``plugin``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in TOOLS else "plugin"


def _imported_modules(path):
    """The ``taco_fairseq`` modules ``path`` imports anywhere (also inside functions), relative
    imports resolved."""
    package = ".".join(path.relative_to(REPO).with_suffix("").parts)
    if path.name != "__init__.py":
        package = package.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            names = [f"{base}.{alias.name}" for alias in node.names]  # a module or a name in it
        else:
            continue
        yield from (n for n in names if n.split(".")[0] == "taco_fairseq")


def _layer_imports():
    """(importing module, its layer, imported module, its layer) over every module."""
    for path in sorted((REPO / "taco_fairseq").rglob("*.py")):
        module = ".".join(path.relative_to(REPO).with_suffix("").parts)
        for imported in _imported_modules(path):
            yield module, _layer(module), imported, _layer(imported)


def test_imports_flow_from_the_commands_through_the_tools_to_the_plugin():
    edges = {(layer, target): f"{m} imports {i}" for m, layer, i, target in _layer_imports()}
    wrong = sorted(example for (layer, target), example in edges.items()
                   if target not in (layer, "plugin")
                   and (layer == "plugin" or target not in TOOL_IMPORTS[layer]))
    assert wrong == []  # e.g. prep importing glue, glue/ or analysis/ importing cli/
    assert {("glue", "prep"), ("cli", "glue"), ("prep", "plugin")} <= set(edges)  # seen


@pytest.mark.slow
def test_import_loads_only_the_plugin_and_registers_everything():
    script = """
import json, sys
import fairseq  # as under --user-dir: fairseq imports the package
import taco_fairseq
from fairseq.criterions import CRITERION_REGISTRY
from fairseq.models import ARCH_MODEL_REGISTRY
from fairseq.tasks import TASK_REGISTRY
print(json.dumps({
    "modules": sorted(m for m in sys.modules if m.startswith("taco_fairseq")),
    "task": "taco_masked_lm" in TASK_REGISTRY,
    "criteria": [c for c in ("taco", "mlm", "sentence_prediction_summable")
                 if c in CRITERION_REGISTRY],
    "archs": [a for a in ("roberta_tiny", "roberta_mini", "roberta_small", "roberta_medium")
              if a in ARCH_MODEL_REGISTRY],
}))
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            cwd=REPO, check=True)
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    tools = [m for m in loaded["modules"] if m.split(".")[1:2] and m.split(".")[1] in TOOLS]
    assert tools == []
    on_demand = {"taco_fairseq.hub", "taco_fairseq.logs"}  # imported by the tools
    assert on_demand.isdisjoint(loaded["modules"])
    assert {"taco_fairseq.task", "taco_fairseq.criterion", "taco_fairseq.models",
            "taco_fairseq.loss"} <= set(loaded["modules"])
    assert loaded["task"] and len(loaded["criteria"]) == 3 and len(loaded["archs"]) == 4


@pytest.mark.slow
def test_read_ahead_threads_are_stopped_at_exit():
    # fairseq's BufferedIterator collates ahead in a daemon thread; one still inside torch when
    # the interpreter finalizes aborts the process (status 134). The first exit hook below
    # runs after the plugin's (atexit is last in, first out) and sees what is left alive.
    script = """
import atexit, threading, time
from fairseq.data import iterators
atexit.register(lambda: print("alive at exit:", any(
    isinstance(t, iterators.BackgroundConsumer) and t.is_alive() for t in threading.enumerate())))
import taco_fairseq

class Slow(list):
    def __iter__(self):
        for i in range(1000):
            time.sleep(0.01)
            yield i

itr = iterators.BufferedIterator(4, Slow(range(1000)))
assert next(itr) == 0 and itr._consumer.is_alive()
"""
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "alive at exit: False"


def test_a_read_ahead_thread_still_busy_after_the_timeout_is_named(caplog):
    import threading

    from fairseq.data import iterators

    from taco_fairseq import fairseq_patches

    release = threading.Event()

    def stuck():  # a collate that does not return within the timeout
        release.wait(60)
        yield 0

    itr = iterators.BufferedIterator(2, [0])
    itr._iterable = stuck()
    itr._create_consumer()
    try:
        fairseq_patches._stop_read_ahead(timeout=0.2)
        assert itr._consumer.is_alive()
        assert f"read-ahead thread {itr._consumer.name} is still collating after 0.2 s" in (
            caplog.text)
    finally:
        release.set()
        itr._consumer.join(10)
    assert not itr._consumer.is_alive()
