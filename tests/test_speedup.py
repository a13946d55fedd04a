"""The speed-up (paper §4.2; taco_fairseq/glue/speedup.py) on curves whose answers are known by
hand, and the same number from ``taco-glue-sweep``'s code path and ``taco-compare``'s."""

import pytest

from taco_fairseq.comparison import statistics
from taco_fairseq.comparison.study import scores_of
from taco_fairseq.glue import sweep
from taco_fairseq.glue.recipes import Hyperparameters
from taco_fairseq.glue.speedup import curve_speedup, first_reach
from taco_fairseq.glue.summary import summarize


def test_first_reach_interpolates_between_checkpoints():
    assert first_reach([10, 20, 40], [50, 60, 70], 65) == pytest.approx(30.0)
    assert first_reach([10, 20, 40], [50, 60, 70], 60) == 20.0
    assert first_reach([10, 20, 40], [50, 60, 70], 40) == 10.0  # above from the start
    assert first_reach([10, 20, 40], [50, 60, 70], 70.5) is None
    assert first_reach([10, 20], [50, float("nan")], 55) is None  # NaN reaches nothing
    assert first_reach([], [], 55) is None


def test_speedup_is_the_baselines_best_updates_over_the_candidates_reach():
    # baseline best 60 at 40; candidate crosses 60 between 10 (56) and 20 (64): at 15
    result = curve_speedup([10, 20, 40], [50, 55, 60], [10, 20, 40], [56, 64, 66])
    assert result["baseline_best"] == 60 and result["baseline_updates"] == 40
    assert result["candidate_updates"] == pytest.approx(15.0)
    assert result["speedup"] == pytest.approx(40 / 15)
    assert curve_speedup([10, 20], [50, 60], [10, 20], [40, 45])["speedup"] is None
    # the baseline's first checkpoint with its best: 20, not 40
    assert curve_speedup([10, 20, 40], [50, 60, 60], [10, 20], [50, 70])["baseline_updates"] == 20


def test_the_candidate_is_read_on_its_own_checkpoints():
    """A sweep's runs may be saved at other intervals: the candidate (every 500 updates)
    crosses the baseline's best (60 at 4000) between 1000 (58) and 1500 (62): at 1250."""
    result = curve_speedup([1000, 2000, 4000], [50, 55, 60], [500, 1000, 1500], [54, 58, 62])
    assert result["candidate_updates"] == pytest.approx(1250.0)
    assert result["speedup"] == pytest.approx(4000 / 1250)


#: GLUE dev scores (points) of each objective at each pre-training update count:
#: (RTE accuracy, CoLA MCC, CoLA accuracy). GLUE average (RTE acc, CoLA MCC): mlm 30, 34, 38,
#: 37 (best 38 at 4000), taco 33, 40, 42, 43: reaches 38 at 1000 + 5/7 · 1000. Paper's average
#: (RTE acc, CoLA acc): mlm 55, 59, 62, 61 (best 62 at 4000), taco 57, 63, 65, 66: reaches 62
#: at 1000 + 5/6 · 1000. The first checkpoint at or above would say 2000 (speed-up 2) for both.
CURVES = {
    "mlm": {1000: (50, 10, 60), 2000: (54, 14, 64), 4000: (58, 18, 66), 8000: (57, 17, 65)},
    "taco": {1000: (52, 14, 62), 2000: (58, 22, 68), 4000: (60, 24, 70), 8000: (61, 25, 71)},
}
POINT = Hyperparameters(32, 5e-5, 4)


def _results():
    """The ``metrics.json`` contents of fine-tuning checkpoints ``<objective>-seed1@<updates>``
    (a name both commands read) on RTE and CoLA, two fine-tuning seeds 1 point below and above
    the curves' values."""
    results = []
    for objective, curve in CURVES.items():
        for updates, (rte, mcc, cola) in curve.items():
            for seed, noise in ((1, -1.0), (2, +1.0)):
                settings = {"checkpoint": f"{objective}-seed1@{updates}", "seed": seed,
                            "batch_size": POINT.batch_size, "lr": POINT.lr,
                            "epochs": POINT.epochs}
                results += [
                    {"settings": dict(settings, task="RTE"),
                     "dev": {"RTE": {"accuracy": rte + noise}}},
                    {"settings": dict(settings, task="CoLA"),
                     "dev": {"CoLA": {"mcc": mcc + noise, "accuracy": cola + noise}}}]
    return results


@pytest.mark.parametrize("metric, reach", [("glue", 1000 + 5 / 7 * 1000),
                                           ("paper", 1000 + 5 / 6 * 1000)])
def test_glue_sweep_and_compare_give_the_same_speedup(metric, reach):
    """The same fine-tuning results read as ``taco-glue-sweep`` reads them (summary cells,
    :func:`sweep.sweep_curves`, :func:`sweep.speedup`) and as ``taco-compare`` does
    (:func:`scores_of`, :class:`statistics.ScoreTable`, :func:`statistics.speedup` over the
    curve tasks, as the report calls it): one speed-up, interpolated."""
    results = _results()
    curves = sweep.sweep_curves(summarize(results))
    from_sweep = sweep.speedup(curves["mlm-seed1"], curves["taco-seed1"], metric)
    table = statistics.ScoreTable(scores_of(results, {"RTE": POINT, "CoLA": POINT}),
                                  paper=metric == "paper")
    from_compare = statistics.speedup(table, "taco", "mlm", table.curve_tasks())
    assert table.curve_tasks() == ["RTE", "CoLA"]
    assert from_sweep["baseline_updates"] == from_compare["baseline_updates"] == 4000
    assert from_sweep["candidate_updates"] == pytest.approx(reach)
    assert from_compare["candidate_updates"] == pytest.approx(reach)
    assert from_sweep["baseline_best"] == pytest.approx(from_compare["baseline_best"])
    assert from_sweep["speedup"] == pytest.approx(from_compare["speedup"])
    assert from_sweep["speedup"] == pytest.approx(4000 / reach)
    assert sweep.format_speedup("taco", "mlm", from_sweep).endswith(
        f"first reaches it at {reach:.0f} updates (interpolated): speedup {4000 / reach:.2f}x")
