"""The command-line entry points: every console script of setup.py resolves to a
``main(argv=None)`` whose ``--help`` works, and every ``scripts/*.py`` is a shim of one; a built
(non-editable) wheel carries the recipes the tools read."""

import importlib.metadata
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
