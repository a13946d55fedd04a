"""docs/results/pos-study/analysis.py, the declared decision of the part-of-speech study
(PLAN.md), on made-up rows whose outcome is known, and rows.py, which gathers the study's rows
across sessions."""

import importlib.util

import pytest

from taco_fairseq.comparison.tables import write_checkpoints_csv

from conftest import REPO, measured_out


def _study_script(name):
    """docs/results/pos-study/<name>.py as a module."""
    path = REPO / "docs" / "results" / "pos-study" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"pos_study_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _analysis():
    return _study_script("analysis")


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


def test_an_interim_gate_gives_no_verdict_until_every_declared_seed_is_in():
    analysis = _analysis()
    blind = _rows(mlm_1k=62.0, mlm_20k=62.0, taco_7k=62.0)
    two_seeds = analysis.Study([r for r in blind if r["pretrain_seed"] <= 2])
    g = analysis.gate(two_seeds)
    assert g["evaluated"] and not g["passed"] and not g["final"]
    report = analysis.report(two_seeds)
    assert "Gate: **not passed with 2 of 5 seeds (interim, no verdict)**" in report
    assert "failed" not in report and "no TACO claim" not in report
    assert "Interim (2 of 5 seeds)" in report
    seeing = analysis.Study([r for r in _rows(taco_7k=69.8) if r["pretrain_seed"] <= 3])
    report = analysis.report(seeing)
    assert "Gate: **passed with 3 of 5 seeds (interim, no verdict)**" in report
    assert not analysis.primary(seeing)["final"]
    assert "supported" not in report and "Interim (3 of 5 seeds)" in report
    assert analysis.gate(analysis.Study(blind))["final"]  # the five seeds: the verdict
    assert "Gate: **failed**" in analysis.report(analysis.Study(blind))


def _rows_module():
    return _study_script("rows")


def _row(objective, seed, updates, value):
    return {"objective": objective, "pretrain_seed": seed, "updates": updates,
            "valid_mlm_loss": None if updates == 0 else 9.0, "pos_accuracy_ambiguous": value}


def test_a_rerun_run_replaces_all_its_rows_and_the_others_stay(tmp_path):
    rows = _rows_module()
    committed = [_row("mlm", 1, 0, 60.0), _row("mlm", 1, 500, 61.0), _row("mlm", 1, 14000, 70.0),
                 _row("taco", 1, 0, 60.0), _row("taco", 1, 500, 62.0)]
    part = measured_out(tmp_path / "part", [_row("mlm", 1, 0, 60.0), _row("mlm", 1, 500, 61.5),
                                     _row("mlm", 2, 0, 59.0)])
    merged = {rows.name_of(r): r["pos_accuracy_ambiguous"]
              for r in rows.merged(committed, {part: rows.part_rows(part)})}
    # mlm seed 1 is the rerun's (its 14,000 of the lost run is gone); taco seed 1 untouched;
    # the new initialization added
    assert merged == {"mlm-seed1@0": 60.0, "mlm-seed1@500": 61.5, "taco-seed1@0": 60.0,
                      "taco-seed1@500": 62.0, "mlm-seed2@0": 59.0}


def test_one_run_measured_in_two_parts_is_refused(tmp_path):
    rows = _rows_module()
    a = measured_out(tmp_path / "a", [_row("taco", 2, 500, 61.0)])
    b = measured_out(tmp_path / "b", [_row("taco", 2, 500, 61.2)])
    with pytest.raises(ValueError, match="taco seed 2 was measured in"):
        rows.merged([], {a: rows.part_rows(a), b: rows.part_rows(b)})


def test_missing_runs_restored_initializations_and_the_merge_command(tmp_path):
    rows = _rows_module()
    committed = [_row("mlm", 1, 0, 60.0), _row("mlm", 1, 20000, 70.0), _row("taco", 1, 7000, 72.0),
                 _row("taco", 2, 6000, 71.0)]
    missing = rows.missing(committed)
    assert "mlm-seed1" not in missing and "taco-seed1" not in missing
    assert "taco-seed2" in missing and len(missing) == 8
    part = tmp_path / "part"
    assert rows.restore(part, committed) == 1 and rows.restore(part, committed) == 0
    csv_path = tmp_path / "checkpoints.csv"
    write_checkpoints_csv(committed, csv_path)
    (part / "measures" / "taco-seed2@500.json").write_text(
        '{"objective": "taco", "pretrain_seed": 2, "updates": 500, "valid_mlm_loss": 9.5, '
        '"pos_accuracy_ambiguous": 65.0}')
    assert rows.main(["merge", str(part), "--committed", str(csv_path)]) == 0
    written = {rows.name_of(r) for r in rows.read_checkpoints_csv(csv_path)}
    assert "taco-seed2@6000" not in written and "taco-seed2@500" in written
    with pytest.raises(FileNotFoundError, match="no measures here"):
        rows.part_rows(tmp_path / "nothing")


def test_departure_is_the_first_checkpoint_at_the_threshold_and_the_table_names_the_rest(tmp_path):
    departure = _study_script("departure")
    shares = {"mlm": {0: 0.054, 1000: 0.089, 7000: 0.090, 20000: 0.5},
              "taco": {0: 0.054, 1000: 0.06, 7000: 0.08}}
    rows = [{"objective": o, "pretrain_seed": 1, "updates": u, "neighbour_attention_layer1": s,
             "pos_accuracy_ambiguous": 60.0 + u / 1000, "valid_mlm_loss": None if u == 0 else 9.0}
            for o, curve in shares.items() for u, s in curve.items()]
    runs = departure.curves(list(reversed(rows)))
    assert departure.departure(runs[("mlm", 1)]) == 7000
    assert departure.departure(runs[("taco", 1)]) is None
    csv_path = tmp_path / "checkpoints.csv"
    write_checkpoints_csv(rows, csv_path)
    table = departure.report(departure.read_checkpoints_csv(csv_path))
    assert "| mlm seed 1 | 7,000 | 0.500 | 60.00 → 80.00 at 20,000 | 9.00 |" in table
    assert "| taco seed 1 | not by 7,000 |" in table
    departure.main([str(csv_path), "--figure", str(tmp_path / "runs.png")])
    assert (tmp_path / "runs.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
