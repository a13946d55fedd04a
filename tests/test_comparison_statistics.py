"""The comparison's statistics (taco_fairseq/comparison/statistics.py) on scores whose answers
are known by hand."""

import math

import numpy as np
import pytest

from taco_fairseq.comparison.statistics import (
    Score,
    ScoreTable,
    first_reach,
    improvement,
    paired_difference,
    speedup,
    speedup_at,
)


def scores(values):
    """Scores from ``{(objective, pretrain_seed, updates, task, seed): value}``."""
    return [Score(o, p, u, t, s, "accuracy", v, "accuracy", v)
            for (o, p, u, t, s), v in values.items()]


def grid(function, objectives=("mlm", "taco"), pretrain=(1, 2), updates=(10, 20, 40),
         tasks=("RTE", "MRPC"), seeds=(1, 2, 3)):
    return scores({(o, p, u, t, s): function(o, p, u, t, s) for o in objectives
                   for p in pretrain for u in updates for t in tasks for s in seeds})


def test_first_reach_interpolates_between_checkpoints():
    assert first_reach([10, 20, 40], [50, 60, 70], 65) == pytest.approx(30.0)
    assert first_reach([10, 20, 40], [50, 60, 70], 60) == 20.0
    assert first_reach([10, 20, 40], [50, 60, 70], 40) == 10.0  # above from the start
    assert first_reach([10, 20, 40], [50, 60, 70], 70.5) is None


def test_speedup_is_the_baselines_best_updates_over_the_candidates_reach():
    # baseline best 60 at 40 updates; candidate passes 60 halfway between 10 and 20 updates
    result = speedup_at([10, 20, 40], [50, 55, 60], [56, 64, 66])
    assert result["baseline_best"] == 60 and result["baseline_updates"] == 40
    assert result["candidate_updates"] == pytest.approx(15.0)
    assert result["speedup"] == pytest.approx(40 / 15)
    assert speedup_at([10, 20], [50, 60], [40, 45])["speedup"] is None


def test_averages_and_paired_difference_without_noise():
    """taco is 2 points above mlm on every run: the difference is 2 with a zero-width
    interval, and the GLUE average is the mean over tasks."""
    table = ScoreTable(grid(lambda o, p, u, t, s: u + (2 if o == "taco" else 0)
                            + (10 if t == "RTE" else 0)))
    assert table.curve_tasks() == ["RTE", "MRPC"]
    assert table.average("mlm", 20, ["RTE", "MRPC"]) == pytest.approx(25.0)
    d = paired_difference(table, "taco", "mlm", 20, ["RTE", "MRPC"], samples=200)
    assert d == pytest.approx({"difference": 2.0, "low": 2.0, "high": 2.0})
    rise = improvement(table, "mlm", 10, 40, ["RTE", "MRPC"], samples=200)
    assert rise["difference"] == pytest.approx(30.0) and rise["low"] == pytest.approx(30.0)


def test_bootstrap_interval_covers_the_seed_spread():
    """With seed noise of ±1 the interval of the difference is wider than 0 and contains the
    observed difference; resampling is seeded, so it is reproducible."""
    noise = {1: -1.0, 2: 0.0, 3: 1.0}
    table = ScoreTable(grid(lambda o, p, u, t, s: 50 + (o == "taco") * noise[s] * 2 + p))
    d = paired_difference(table, "taco", "mlm", 10, ["RTE"], samples=500)
    assert d["low"] < d["difference"] < d["high"]
    assert d["low"] >= -2 - 1e-9 and d["high"] <= 2 + 1e-9
    assert paired_difference(table, "taco", "mlm", 10, ["RTE"], samples=500) == d


def test_speedup_with_interval():
    """taco's curve is mlm's shifted to half the updates: mlm's best (40 updates) is reached
    by taco at 20: speed-up 2, in every resample (no noise)."""
    curve = {10: 50.0, 20: 60.0, 40: 70.0}
    taco = {10: 60.0, 20: 70.0, 40: 75.0}
    table = ScoreTable(grid(lambda o, p, u, t, s: (taco if o == "taco" else curve)[u]))
    result = speedup(table, "taco", "mlm", ["RTE", "MRPC"], samples=100)
    assert result["speedup"] == pytest.approx(2.0)
    assert result["low"] == pytest.approx(2.0) and result["not_reached"] == 0.0


def test_missing_runs_leave_a_task_out_of_the_curves_and_nan_correlations_count_as_zero():
    values = grid(lambda o, p, u, t, s: 50.0)
    values = [v for v in values if not (v.task == "MRPC" and v.updates == 10 and v.seed == 3)]
    values.append(Score("mlm", 1, 10, "STS-B", 1, "spearman", math.nan, "spearman", math.nan))
    table = ScoreTable(values)
    assert table.curve_tasks() == ["RTE"]
    assert table.cell("mlm", 10, "MRPC") is None
    assert table.complete_tasks(20) == ["RTE", "MRPC"]
    with pytest.raises(ValueError, match="no fine-tuning results"):
        ScoreTable([])
    nan_table = ScoreTable([Score("mlm", 1, 10, "STS-B", 1, "spearman", math.nan, "spearman",
                                  math.nan)])
    np.testing.assert_array_equal(nan_table.cell("mlm", 10, "STS-B"), [[0.0]])


def test_figures_of_a_partial_study_have_no_empty_legend(tmp_path):
    """A task whose runs are not all finished yet gets an empty panel, without matplotlib's
    "No artists with labels found to put in legend" warning."""
    import warnings

    from taco_fairseq.comparison.report import plot_figures

    scores = [Score(o, 1, 10, "RTE", s, "accuracy", 60.0 + s, "accuracy", 60.0 + s)
              for o in ("mlm", "taco") for s in (1, 2)]
    scores.append(Score("mlm", 1, 10, "CoLA", 1, "mcc", 20.0, "accuracy", 70.0))  # seed 2 to come
    table = ScoreTable(scores)
    assert table.cell("mlm", 10, "CoLA") is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        written = plot_figures(table, [], "mlm", tmp_path)
    assert (tmp_path / "tasks.png") in written and (tmp_path / "tasks.png").stat().st_size > 0
