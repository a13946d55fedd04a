"""docs/results/pilot/curves.py: the pilot's rows from fairseq json logs, and each run's exit."""

import csv
import importlib.util
import json

import pytest

from conftest import REPO


def _curves():
    path = REPO / "docs" / "results" / "pilot" / "curves.py"
    spec = importlib.util.spec_from_file_location("pilot_curves", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _log(path, validations):
    lines = ["2026-12-06 22:23:17 | INFO | fairseq_cli.train | start"]
    for update, loss, share, uniform in validations:
        record = {"epoch": 1, "valid_loss": str(loss), "valid_neighbour_share": str(share),
                  "valid_neighbour_share_uniform": str(uniform),
                  "valid_num_updates": str(update)}
        lines.append(f"2026-12-06 22:32:19 | INFO | valid | {json.dumps(record)}")
        lines.append(f"2026-12-06 22:32:20 | INFO | train_inner | {json.dumps({'loss': '1'})}")
    path.parent.mkdir(parents=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def test_rows_and_exit_of_each_run(tmp_path, capsys):
    curves = _curves()
    first = _log(tmp_path / "blocks32-seed1" / "train.log",
                 [(500, 9.5, 0.060, 0.061), (1000, 9.1, 0.065, 0.061), (1500, 8.2, 0.30, 0.061)])
    second = _log(tmp_path / "blocks128-seed3" / "train.log",
                  [(500, 9.6, 0.05, 0.055), (1000, 9.4, 0.054, 0.055)])
    table = tmp_path / "curves.csv"
    curves.main([str(first), str(second), "--csv", str(table)])
    out = capsys.readouterr().out
    assert "blocks32 seed 1: to 1500 updates, left the plateau at 1500" in out
    assert "blocks128 seed 3: to 1000 updates, on the plateau" in out
    rows = list(csv.DictReader(table.open()))
    assert [(r["recipe"], r["seed"], r["updates"]) for r in rows] == [
        ("blocks128", "3", "500"), ("blocks128", "3", "1000"),
        ("blocks32", "1", "500"), ("blocks32", "1", "1000"), ("blocks32", "1", "1500")]
    assert float(rows[-1]["share_ratio"]) == pytest.approx(0.30 / 0.061, abs=1e-3)
    # a run given again replaces its rows; the others are kept
    first.write_text(first.read_text().split("\n", 3)[0] + "\n")
    _log(tmp_path / "again" / "blocks32-seed1" / "train.log", [(500, 9.0, 0.2, 0.061)])
    curves.main([str(tmp_path / "again" / "blocks32-seed1" / "train.log"), "--csv", str(table)])
    rows = list(csv.DictReader(table.open()))
    assert [(r["recipe"], r["updates"]) for r in rows] == [
        ("blocks128", "500"), ("blocks128", "1000"), ("blocks32", "500")]


def test_a_log_outside_a_run_directory_is_refused(tmp_path):
    with pytest.raises(ValueError, match="RECIPE-seedSEED"):
        _curves().run_rows(_log(tmp_path / "run" / "train.log", [(500, 9.5, 0.06, 0.061)]))
