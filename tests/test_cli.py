"""The command-line entry points: every console script of setup.py resolves to a
``main(argv=None)`` whose ``--help`` works, and every ``scripts/*.py`` still runs."""

import importlib.metadata
import re
import runpy
import sys

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
def test_every_script_path_still_runs(script, capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", [script, "--help"])
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_path(str(REPO / "scripts" / script), run_name="__main__")
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.startswith("usage:")
