"""The command-line entry points: every console script of setup.py resolves to a
``main(argv=None)`` whose ``--help`` works, without fairseq, torch or an extra imported, and
every ``scripts/*.py`` is a shim of one; a command that needs an extra names it in one line; a
built (non-editable) wheel carries the recipes the tools read."""

import ast
import importlib.metadata
import json
import re
import runpy
import shutil
import subprocess
import sys
import zipfile

import pytest

from conftest import REPO

#: ``name = module:function`` entries of setup.py's console_scripts.
DECLARED = dict(re.findall(r'"(taco-[a-z-]+) = ([\w.]+:\w+)"',
                           (REPO / "setup.py").read_text(encoding="utf-8")))
SCRIPTS = sorted(p.name for p in (REPO / "scripts").glob("*.py"))


def test_the_installed_entry_points_are_the_declared_ones():
    installed = {ep.name: ep.value for ep in importlib.metadata.entry_points(
        group="console_scripts") if ep.name.startswith("taco-")}
    assert installed == DECLARED, "reinstall: pip install --no-deps -e ."
    assert len(DECLARED) >= 13


def _help_of(main, capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("name", sorted(DECLARED))
def test_every_console_script_resolves_and_has_help(name, capsys):
    module, function = DECLARED[name].split(":")
    assert function == "main"
    main = getattr(importlib.import_module(module), function)
    assert main.__code__.co_varnames[:1] == ("argv",) and main.__defaults__ == (None,)
    assert _help_of(main, capsys).startswith("usage:")


@pytest.mark.parametrize("name", sorted(DECLARED))
def test_every_console_script_runs_as_python_m(name):
    """``python -m MODULE`` runs ``main()`` (read from the source: ``if __name__ ==
    "__main__": main()`` at the end), not a silent import that exits 0."""
    module = DECLARED[name].split(":")[0]
    tree = ast.parse((REPO / (module.replace(".", "/") + ".py")).read_text(encoding="utf-8"))
    guards = [node for node in tree.body if isinstance(node, ast.If)
              and ast.unparse(node.test) in ("__name__ == '__main__'",
                                             "__name__ == \"__main__\"")]
    assert guards, f"{module} has no if __name__ == '__main__': main()"
    assert any(ast.unparse(stmt) in ("main()", "sys.exit(main())")
               for stmt in guards[-1].body)


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_script_is_a_shim_of_a_console_script(script, capsys, monkeypatch):
    # docs/architecture.md: the scripts/*.py of a checkout run the main() of a taco-* command
    source = (REPO / "scripts" / script).read_text(encoding="utf-8")
    assert re.findall(r"^from ([\w.]+) import main$", source, re.M) in (
        [value.split(":")[0]] for value in DECLARED.values())
    monkeypatch.setattr(sys, "argv", [script, "--help"])
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_path(str(REPO / "scripts" / script), run_name="__main__")
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.startswith("usage:")


@pytest.mark.slow
def test_a_wheel_carries_the_recipes_and_its_tools_find_them(tmp_path):
    """taco-glue and taco-compare read the hydra recipes; installed from a wheel (not
    editable), they must find them inside the package, not in a source checkout."""
    source = tmp_path / "source"  # a copy, so that no build/ of the checkout gets in
    shutil.copytree(REPO / "taco_fairseq", source / "taco_fairseq",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("setup.py", "setup.cfg", "README.md"):
        shutil.copy(REPO / name, source)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path / "wheel"), str(source)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = (tmp_path / "wheel").glob("taco_fairseq-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        archive.extractall(tmp_path / "site")
    recipes = {p.relative_to(REPO).as_posix() for p in (REPO / "taco_fairseq" / "config").glob(
        "*/*.yaml")}
    assert len(recipes) >= 30 and recipes <= names
    found = subprocess.run(
        [sys.executable, "-c", "from taco_fairseq.glue.recipes import load_recipe, recipe_path; "
         "from taco_fairseq.glue.tasks import get_task; "
         "from taco_fairseq.comparison.objectives import objective_args; "
         "print(recipe_path(get_task('RTE'), 'small')); "
         "print(load_recipe(recipe_path(get_task('RTE'), 'small'))['task']['_name']); "
         "print(objective_args('taco')[:2])"],
        capture_output=True, text=True, cwd=tmp_path, env={"PYTHONPATH": str(tmp_path / "site")})
    assert found.returncode == 0, found.stderr[-2000:]
    path, task, taco = found.stdout.splitlines()
    assert path.startswith(str(tmp_path / "site")) and task == "sentence_prediction"
    assert taco == "['--task', 'taco_masked_lm']"


@pytest.mark.parametrize("argv, message", [
    (["--check-lines", "0"], "argument --check-lines: must be > 0, got 0"),
    (["--atol", "-1"], "argument --atol: must be >= 0, got -1"),
    (["--atol", "nan"], "argument --atol: must be finite, got nan"),
    (["--atol", "inf"], "argument --atol: must be finite, got inf"),
    (["--check-lines", "x"], "argument --check-lines: invalid int value: 'x'"),
])
def test_count_and_tolerance_options_are_checked_by_argparse(argv, message, capsys, tmp_path):
    from taco_fairseq.cli import export_hf

    with pytest.raises(SystemExit) as exit_info:
        export_hf.main([str(tmp_path / "checkpoint.pt"), str(tmp_path / "hf"), *argv])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


#: What no ``--help`` may import: fairseq and torch (seconds), and what only running needs.
HEAVY = ("fairseq", "torch", "hydra", "numpy", "scipy", "sklearn", "sentencepiece", "matplotlib",
         "sentencex", "transformers")
#: A console script's ``--help`` in a fresh interpreter whose extras are missing; prints the exit
#: code and the modules of HEAVY it imported.
HELP_PROBE = """
import json, sys
for name in {missing!r}:
    sys.modules[name] = None  # as if not installed: importing it raises ModuleNotFoundError
sys.argv = [{name!r}, "--help"]
from {module} import main
try:
    main()
except SystemExit as e:
    code = e.code
print(json.dumps({{"code": code, "imported": [m for m in {heavy!r} if sys.modules.get(m)]}}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(DECLARED))
def test_help_imports_neither_fairseq_nor_torch_nor_an_extra(name):
    """``--help`` answers at once (fairseq takes 5 s to import, torch 3 s) and without the extras
    installed: the commands import their tools when they run."""
    from taco_fairseq.cli.extras import EXTRA_MODULES

    missing = [module for modules in EXTRA_MODULES.values() for module in modules]
    probe = HELP_PROBE.format(missing=missing, name=name, module=DECLARED[name].split(":")[0],
                              heavy=HEAVY)
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            cwd=REPO, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    *help_lines, last = result.stdout.splitlines()
    assert help_lines[0].startswith(f"usage: {name} ")
    assert json.loads(last) == {"code": 0, "imported": []}


def _text(tmp_path):
    path = tmp_path / "text.txt"
    path.write_text("A sentence of text.\n", encoding="utf-8")
    return str(path)


#: (command, its arguments given a tmp_path, the modules made missing, the error line's end).
NEEDS_EXTRAS = [
    ("taco-export-hf", lambda t: [str(t / "checkpoint.pt"), str(t / "hf"), "--check-text",
                                  _text(t)],
     ["transformers"], "the 'hf' extra (no module transformers): "
     "pip install -c constraints.txt -e '.[hf]'"),
    ("taco-analyze-context", lambda t: [str(t), "--corpus", _text(t), "--output",
                                        str(t / "out.csv")],
     ["sentencex"], "the 'analysis' extra (no module sentencex): "
     "pip install -c constraints.txt -e '.[analysis]'"),
    ("taco-analyze-wordsim", lambda t: [str(t), "--output", str(t / "out.csv")],
     ["matplotlib"], "the 'plot' extra (no module matplotlib): "
     "pip install -c constraints.txt -e '.[plot]'"),
    ("taco-analyze-dynamics", lambda t: [str(t), "--corpus", _text(t), "--output-dir", str(t)],
     ["sentencex", "matplotlib"], "the 'analysis' and 'plot' extras (no module sentencex, "
     "matplotlib): pip install -c constraints.txt -e '.[analysis,plot]'"),
    ("taco-analyze-probes", lambda t: [str(t), "--glue-data", str(t), "--output",
                                       str(t / "out.csv")],
     ["matplotlib"], "the 'plot' extra (no module matplotlib): "
     "pip install -c constraints.txt -e '.[plot]'"),
    ("taco-glue-sweep", lambda t: ["--run", f"MLM={t}", "--data", str(t), "--out", str(t)],
     ["matplotlib"], "the 'plot' extra (no module matplotlib): "
     "pip install -c constraints.txt -e '.[plot]'"),
    ("taco-compare", lambda t: ["--data", str(t), "--glue-data", str(t), "--out", str(t),
                                "--arch", "roberta_tiny", "--max-update", "2",
                                "--checkpoint-updates", "2", "--final-tasks", "RTE",
                                "--seeds", "1"],
     ["sentencex"], "the 'analysis' extra (no module sentencex): "
     "pip install -c constraints.txt -e '.[analysis]'"),
]


@pytest.mark.parametrize("name, argv, missing, needs", NEEDS_EXTRAS,
                         ids=[case[0] for case in NEEDS_EXTRAS])
def test_a_command_without_its_extra_names_it_in_one_line(name, argv, missing, needs,
                                                          monkeypatch, tmp_path):
    """Checked after the options, before any work: e.g. taco-glue-sweep draws its figure after
    hours of fine-tuning."""
    for module in missing:
        monkeypatch.setitem(sys.modules, module, None)  # as if not installed
    monkeypatch.setattr(sys, "argv", [name])  # the program name argparse shows
    module, _ = DECLARED[name].split(":")
    with pytest.raises(SystemExit) as exit_info:
        importlib.import_module(module).main(argv(tmp_path))
    assert exit_info.value.code == f"error: {name} needs {needs}"


def test_the_extras_the_commands_name_are_setup_py_s():
    from taco_fairseq.cli.extras import EXTRA_MODULES

    setup = ast.parse((REPO / "setup.py").read_text(encoding="utf-8"))
    (extras,) = [ast.literal_eval(node.value) for node in ast.walk(setup)
                 if isinstance(node, ast.keyword) and node.arg == "extras_require"]
    for extra, modules in EXTRA_MODULES.items():  # here each module's distribution is its name
        assert [requirement.split("==")[0] for requirement in extras[extra]] == list(modules)


def _tool_constants():
    """(module, name) of every ``tool_constant(module, name)`` call of the commands."""
    for path in sorted((REPO / "taco_fairseq" / "cli").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "tool_constant":
                yield tuple(ast.literal_eval(arg) for arg in node.args)


def test_the_constants_a_parser_reads_from_source_are_the_tools_values():
    from taco_fairseq.cli.constants import tool_constant

    used = sorted(set(_tool_constants()))
    assert len(used) >= 4
    for module, name in used:
        assert tool_constant(module, name) == getattr(importlib.import_module(module), name)
    with pytest.raises(KeyError, match="assigns no literal RECIPES_DIR"):
        tool_constant("taco_fairseq.glue.recipes", "RECIPES_DIR")  # a Path, not a literal
