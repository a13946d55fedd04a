"""docs/results/pos-study/analysis.py, the declared decision of the part-of-speech study
(PLAN.md), on made-up rows whose outcome is known."""

import importlib.util

import pytest

from taco_fairseq.comparison.tables import write_checkpoints_csv

from conftest import REPO


def _analysis():
    path = REPO / "docs" / "results" / "pos-study" / "analysis.py"
    spec = importlib.util.spec_from_file_location("pos_study_analysis", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rows(init=60.0, mlm_1k=62.0, mlm_20k=70.0, taco_7k=69.5, noise=0.2):
    """Five seeds; each seed's values shifted by a seed-dependent offset, and TACO's by
    ``noise`` × (seed − 3) around ``taco_7k``."""
    rows = []
    for seed in range(1, 6):
        shift = 0.5 * seed
        for objective, points in (("mlm", {0: init, 1000: mlm_1k, 20000: mlm_20k}),
                                  ("taco", {0: init, 1000: mlm_1k, 7000: taco_7k})):
            for updates, value in points.items():
                wobble = noise * (seed - 3) * (objective == "taco" and updates == 7000)
                rows.append({"objective": objective, "pretrain_seed": seed, "updates": updates,
                             "pos_accuracy_ambiguous": value + shift + wobble,
                             "pos_accuracy": value + shift + wobble})
    return rows


@pytest.mark.parametrize("values, decision", [
    ({"taco_7k": 69.8}, "supported"),  # D ≈ −0.2, margin −1.0
    ({"taco_7k": 69.5, "noise": 0.05}, "supported (within the margin"),  # U < 0 too
    ({"taco_7k": 66.0}, "refuted"),  # D ≈ −4 < 0, below the margin
    ({"taco_7k": 69.0, "noise": 1.0}, "inconclusive"),  # L below the margin, U above 0
])
def test_the_declared_decision(tmp_path, values, decision):
    analysis = _analysis()
    path = tmp_path / "checkpoints.csv"
    write_checkpoints_csv(_rows(**values), path)
    study = analysis.Study(analysis.read_checkpoints_csv(path))
    assert analysis.gate(study)["passed"]
    assert analysis.primary(study)["decision"].startswith(decision)
    assert analysis.primary(study)["G"] == pytest.approx(10.0)
    assert "Gate: **passed**" in analysis.report(study)


def test_a_blind_measure_fails_the_gate_and_no_claim_is_made(tmp_path):
    analysis = _analysis()
    path = tmp_path / "checkpoints.csv"
    write_checkpoints_csv(_rows(mlm_1k=62.0, mlm_20k=62.0, taco_7k=62.0), path)
    study = analysis.Study(analysis.read_checkpoints_csv(path))
    assert not analysis.gate(study)["passed"]
    assert "no TACO claim is made" in analysis.report(study)


def test_the_updates_taco_needs_are_interpolated_per_seed():
    analysis = _analysis()
    rows = [{"objective": "mlm", "pretrain_seed": 1, "updates": 20000,
             "pos_accuracy_ambiguous": 70.0},
            *({"objective": "taco", "pretrain_seed": 1, "updates": u,
               "pos_accuracy_ambiguous": v} for u, v in ((0, 60.0), (4000, 68.0), (6000, 72.0))),
            {"objective": "mlm", "pretrain_seed": 2, "updates": 20000,
             "pos_accuracy_ambiguous": 80.0},
            {"objective": "taco", "pretrain_seed": 2, "updates": 7000,
             "pos_accuracy_ambiguous": 75.0}]
    assert analysis.speedups(analysis.Study(rows)) == {1: pytest.approx(5000.0), 2: None}


def test_a_gate_without_its_checkpoints_is_not_evaluated_and_the_report_says_interim():
    analysis = _analysis()
    rows = [r for r in _rows() if not (r["objective"] == "mlm" and r["updates"] == 20000
                                       and r["pretrain_seed"] > 1)]
    study = analysis.Study(rows)
    assert not analysis.gate(study)["evaluated"] and not analysis.gate(study)["passed"]
    report = analysis.report(study)
    assert "Gate: **not evaluated yet**" in report and "no TACO claim" not in report
    assert "Seeds analysed: [1] of the declared [1, 2, 3, 4, 5] (interim" in report
