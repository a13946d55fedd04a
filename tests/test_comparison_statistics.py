"""The comparison's statistics (taco_fairseq/comparison/statistics.py) on scores whose answers
are known by hand."""

import itertools
import math

import numpy as np
import pytest

from scipy import stats

from taco_fairseq.comparison.report import verdict
from taco_fairseq.comparison.statistics import (
    MeasureTable,
    PrimaryEndpoint,
    Score,
    ScoreTable,
    glue_comparisons,
    holm,
    improvement,
    paired_difference,
    paired_test,
    speedup,
    t_interval,
)


def scores(values):
    """Scores from ``{(objective, pretrain_seed, updates, task, seed): value}``."""
    return [Score(o, p, u, t, s, "accuracy", v, "accuracy", v)
            for (o, p, u, t, s), v in values.items()]


def grid(function, objectives=("mlm", "taco"), pretrain=(1, 2), updates=(10, 20, 40),
         tasks=("RTE", "MRPC"), seeds=(1, 2, 3)):
    return scores({(o, p, u, t, s): function(o, p, u, t, s) for o in objectives
                   for p in pretrain for u in updates for t in tasks for s in seeds})


def test_averages_and_paired_difference_without_noise():
    """taco is 2 points above mlm on every run: the difference is 2 with a zero-width
    interval (p = 0, t's limit), and the GLUE average is the mean over tasks."""
    table = ScoreTable(grid(lambda o, p, u, t, s: u + (2 if o == "taco" else 0)
                            + (10 if t == "RTE" else 0)))
    assert table.curve_tasks() == ["RTE", "MRPC"]
    assert table.average("mlm", 20, ["RTE", "MRPC"]) == pytest.approx(25.0)
    d = paired_difference(table, "taco", "mlm", 20, ["RTE", "MRPC"])
    assert (d.n, d.difference, d.low, d.high, d.p) == (2, pytest.approx(2.0), pytest.approx(2.0),
                                                       pytest.approx(2.0), 0.0)
    assert (d.candidate, d.baseline) == (pytest.approx(27.0), pytest.approx(25.0))
    rise = improvement(table, "mlm", 10, 40, ["RTE", "MRPC"])
    assert rise.difference == pytest.approx(30.0) and rise.low == pytest.approx(30.0)


def test_the_difference_is_paired_by_pretraining_seed_after_averaging_the_finetuning_seeds():
    """Per pre-training seed: mean over fine-tuning seeds and tasks, then candidate − baseline;
    the t-interval is over the pre-training seeds (n − 1 degrees of freedom), not the runs."""
    shift = {1: 1.0, 2: 2.0, 3: 3.0, 4: 6.0}  # taco − mlm per pre-training seed
    noise = {1: -4.0, 2: 0.0, 3: 4.0}  # fine-tuning noise, the same for both: it averages out

    def value(o, p, u, t, s):
        return 50.0 + 10 * p + noise[s] + (shift[p] if o == "taco" else 0.0)

    table = ScoreTable(grid(value, pretrain=(1, 2, 3, 4)))
    assert table.seed_means("mlm", 10, ["RTE"]) == pytest.approx({1: 60, 2: 70, 3: 80, 4: 90})
    assert table.finetune_sd("mlm", 10, ["RTE"]) == pytest.approx(4.0)
    d = paired_difference(table, "taco", "mlm", 10, ["RTE", "MRPC"])
    # by hand: differences 1, 2, 3, 6: mean 3, sd √(14/3), se sd/2; t(0.975, 3) = 3.182446
    se = math.sqrt(14 / 3) / 2
    assert d.n == 4 and d.difference == pytest.approx(3.0)
    assert d.low == pytest.approx(3 - 3.182446 * se, abs=1e-5)
    assert d.high == pytest.approx(3 + 3.182446 * se, abs=1e-5)
    assert d.p == pytest.approx(2 * stats.t.sf(3 / se, 3))
    assert 0.05 < d.p < 0.10  # t = 2.78 with 3 degrees of freedom: not significant


def test_t_interval_is_scipys_and_needs_two_values():
    values = [0.3, -1.2, 2.5, 0.9, 1.4]
    low, high, p = t_interval(values)
    expected = stats.ttest_1samp(values, 0.0)
    assert (low, high) == pytest.approx(tuple(expected.confidence_interval(0.95)))
    assert p == pytest.approx(expected.pvalue)
    assert t_interval([2.0, 2.0, 2.0]) == (2.0, 2.0, 0.0)
    assert t_interval([0.0, 0.0]) == (0.0, 0.0, 1.0)
    for bad in ([1.0], [1.0, math.nan]):
        with pytest.raises(ValueError, match="at least 2 finite values"):
            t_interval(bad)


def test_one_pretraining_seed_is_not_tested_and_seeds_are_paired_by_name():
    single = paired_test({1: 60.0}, {1: 58.0})
    assert (single.n, single.difference, single.low, single.p, single.tested) == (
        1, 2.0, None, None, False)
    # seed 3 has no baseline and seed 4 a NaN: left out of the pairs
    pairs = paired_test({1: 3.0, 2: 5.0, 3: 100.0, 4: 1.0}, {2: 4.0, 1: 1.0, 4: math.nan})
    assert pairs.n == 2 and pairs.difference == pytest.approx(1.5)
    assert paired_test({1: 1.0}, {2: 1.0}) is None


def test_holm_on_a_known_example():
    """Holm (1979), as in the usual worked example: p = 0.01, 0.04, 0.03, 0.005 at α = 0.05
    rejects the first and the last; adjusted p = 0.03, 0.06, 0.06, 0.02."""
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])  # capped at 1
    assert holm([0.02]) == pytest.approx([0.02])
    assert holm([]) == []


def test_speedup_with_per_seed_values():
    """taco's curve is mlm's shifted to half the updates: mlm's best (40 updates) is reached
    by taco at 20: speed-up 2, on every pre-training seed's own curves too (no noise)."""
    curve = {10: 50.0, 20: 60.0, 40: 70.0}
    taco = {10: 60.0, 20: 70.0, 40: 75.0}
    table = ScoreTable(grid(lambda o, p, u, t, s: (taco if o == "taco" else curve)[u]))
    result = speedup(table, "taco", "mlm", ["RTE", "MRPC"])
    assert result["speedup"] == pytest.approx(2.0)
    assert result["per_seed"] == pytest.approx([2.0, 2.0])
    # seed 2's taco never reaches mlm's best: not reached there
    behind = ScoreTable(grid(lambda o, p, u, t, s: (taco if o == "taco" else curve)[u]
                             - (10 if o == "taco" and p == 2 else 0)))
    assert speedup(behind, "taco", "mlm", ["RTE"])["per_seed"] == [pytest.approx(2.0), None]


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

    from taco_fairseq.comparison.figures import plot_figures

    scores = [Score(o, 1, 10, "RTE", s, "accuracy", 60.0 + s, "accuracy", 60.0 + s)
              for o in ("mlm", "taco") for s in (1, 2)]
    scores.append(Score("mlm", 1, 10, "CoLA", 1, "mcc", 20.0, "accuracy", 70.0))  # seed 2 to come
    table = ScoreTable(scores)
    assert table.cell("mlm", 10, "CoLA") is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        written = plot_figures(table, [], "mlm", tmp_path)
    assert (tmp_path / "tasks.png") in written and (tmp_path / "tasks.png").stat().st_size > 0


# --- the instrument on simulated studies -------------------------------------------------------
#: A study's shape: 5 checkpoints × (2 tasks + their average) = 15 comparisons,
#: 3 fine-tuning seeds.
SIM_UPDATES = (1000, 2000, 3000, 4000, 5000)
SIM_TASKS = ("STS-B", "SST-2")


def simulated_study(rng, pretrain_seeds, effect):
    """Scores with a known truth: taco = mlm + ``effect`` points. A pre-training seed's effect
    (SD 2, shared by both objectives: same initialization and batches), an objective × seed ×
    task effect (SD 1, the encoder each run learns, the same at every checkpoint) and
    fine-tuning noise (SD 1.5 per run)."""
    shape = (2, pretrain_seeds, len(SIM_UPDATES), len(SIM_TASKS), 3)
    values = (60.0 + rng.normal(0, 2, (1, pretrain_seeds, 1, 1, 1))
              + rng.normal(0, 1, (2, pretrain_seeds, 1, len(SIM_TASKS), 1))
              + rng.normal(0, 1.5, shape))
    values[1] += effect
    keys = itertools.product(("mlm", "taco"), range(pretrain_seeds), SIM_UPDATES, SIM_TASKS,
                             range(3))
    return ScoreTable([Score(o, p, u, t, f, "accuracy", v, "accuracy", v)
                       for (o, p, u, t, f), v in zip(keys, values.ravel().tolist())])


def run_instrument(rng, pretrain_seeds, effect, repetitions):
    """Per repetition the instrument's own family of 15 GLUE comparisons (no primary
    endpoint set aside): the unadjusted p-values and the Holm-corrected verdicts."""
    p_values, verdicts = [], []
    for _ in range(repetitions):
        family = glue_comparisons(simulated_study(rng, pretrain_seeds, effect), "taco", "mlm")
        assert len(family) == 15
        p_values.append([c.test.p for c in family])
        verdicts.append([verdict(c.test, c.adjusted_p, "taco") for c in family])
    return np.array(p_values), verdicts


@pytest.mark.parametrize("pretrain_seeds", [3, 5])
def test_with_no_true_difference_the_false_positive_rates_are_nominal(pretrain_seeds):
    """No true difference: each comparison rejects at p ≤ 0.05 about 5% of the time, and the
    Holm-corrected family of 15 makes any "ahead"/"behind" verdict at most about 5% of the
    time. Tolerances: 3 standard errors; the per-comparison rate's from the spread of each
    study's rate over the repetitions (the 15 comparisons of one study are correlated, so they
    are not independent trials), the family-wise rate's binomial over the repetitions."""
    repetitions = 500
    p_values, verdicts = run_instrument(np.random.default_rng(23), pretrain_seeds, 0.0,
                                        repetitions)
    per_study = (p_values <= 0.05).mean(axis=1)
    se = per_study.std(ddof=1) / math.sqrt(repetitions)
    assert abs(per_study.mean() - 0.05) < 3 * se, (per_study.mean(), se)
    family_wise = np.mean([any(v != "no significant difference" for v in study)
                           for study in verdicts])
    assert family_wise <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / repetitions), family_wise


@pytest.mark.parametrize("pretrain_seeds", [3, 5])
def test_a_large_true_difference_is_found(pretrain_seeds):
    """taco = mlm + 8 points (6 SDs of the per-seed difference of the average): the primary
    endpoint (the average at the last checkpoint, tested alone) finds taco ahead nearly always
    (docs/results.md, "The instrument", has the power at smaller differences), and the
    Holm-corrected family never calls it behind."""
    rng = np.random.default_rng(5)
    primary = PrimaryEndpoint("glue-average", SIM_UPDATES[-1], SIM_TASKS)
    found = []
    for _ in range(60):
        table = simulated_study(rng, pretrain_seeds, 8.0)
        test = primary.test(table, MeasureTable([]), "taco", "mlm")
        found.append(verdict(test, test.p, "taco") == "taco ahead")
        assert not any(verdict(c.test, c.adjusted_p, "taco") == "taco behind"
                       for c in glue_comparisons(table, "taco", "mlm", primary))
    assert np.mean(found) >= 0.95


# --- the report --------------------------------------------------------------------------------
def measure_rows(pretrain=(1, 2, 3), probes=True):
    """Per-checkpoint measures: the initialization (updates 0, the same for both objectives),
    then taco with a lower masked-LM loss (by 1 bit ± 0.1 per seed), a higher attention share,
    and (``probes``) probe scores the same for both objectives."""
    rows = []
    for p in pretrain:
        for o in ("mlm", "taco"):
            for u in (0, 10, 20, 40):
                row = {"objective": o, "pretrain_seed": p, "updates": u,
                       "valid_mlm_loss": 12.0 - u / 10 - (o == "taco" and u > 0) * (1 + p / 10),
                       "neighbour_attention": 0.02 + (o == "taco" and u > 0) * (0.1 + p / 100),
                       "contextual_score": math.nan}
                if probes:
                    row.update({"probe_SST-2": 70.0 + p, "probe_average": 60.0 + p + u / 100})
                rows.append(row)
    return rows


def noisy_grid(pretrain=(1, 2, 3), effect=5.0):
    """taco = mlm + ``effect`` points, with seed noise."""
    noise = {1: -0.5, 2: 0.25, 3: 0.75, 4: -0.25}
    return ScoreTable(grid(lambda o, p, u, t, s: 50 + u / 10 + p * noise[s]
                           + (effect + noise[p] if o == "taco" else 0.0), pretrain=pretrain))


def test_the_wall_time_of_measures_beside_pretraining_is_not_given_as_0_minutes():
    """Checkpoint measures taken beside pre-training are in its minutes (the phase of that
    name times those measured after it): the report says so (before: "0.0")."""
    from taco_fairseq.comparison.report import markdown_report

    def wall_time(timings):
        report = markdown_report(noisy_grid(), measure_rows(), "mlm", "# h", timings,
                                 primary=PrimaryEndpoint("glue-average", 40, ("RTE",)))
        return report.split("## Wall time")[1].split("\n## ")[0].strip().splitlines()[2:]

    assert wall_time({"pre-training": 600.0, "checkpoint measures": 1.2, "fine-tuning": 90}) == [
        "| pre-training | 10.0 |",
        "| checkpoint measures | measured beside pre-training, not timed separately (in its "
        "minutes) |", "| fine-tuning | 1.5 |"]
    assert wall_time({"pre-training": 600.0, "checkpoint measures": 30.0})[1] == (
        "| checkpoint measures | 0.5 (those measured after pre-training; any beside it are in "
        "its minutes) |")
    assert wall_time({"checkpoint measures": 30.0}) == ["| checkpoint measures | 0.5 |"]


def test_the_report_opens_with_the_primary_endpoint_and_the_rest_is_exploratory():
    from taco_fairseq.comparison.report import markdown_report

    table = noisy_grid()
    primary = PrimaryEndpoint("glue-average", 40, ("RTE", "MRPC"))
    report = markdown_report(table, measure_rows(), "mlm", "# header", {"pre-training": 60.0},
                             primary=primary)
    head, rest = report.split("## Wall time")
    assert "## Primary endpoint: the GLUE dev average over RTE, MRPC (fine-tuned) at 40 updates" \
        in head
    assert "`--primary-endpoint glue-average`" in head
    row = next(line for line in head.splitlines() if line.startswith("| 40 | taco − mlm"))
    expected = paired_difference(table, "taco", "mlm", 40, ["RTE", "MRPC"])
    assert f"| 3 | {expected.baseline:.2f} | {expected.candidate:.2f} | " \
        f"{expected.difference:+.2f} | [{expected.low:+.2f}, {expected.high:+.2f}] |" in row
    assert row.endswith("| taco ahead |")
    assert "**Everything below is exploratory.**" in rest
    # the GLUE family leaves the primary out: 2 tasks at 3 checkpoints + 2 averages
    glue = rest.split("## Exploratory: taco − mlm at equal updates")[1].split("###")[0]
    assert len([line for line in glue.splitlines() if line.startswith("| ")]) - 1 == 8
    assert "| 40 | average |" not in glue and "| 40 | RTE |" in glue
    # a table per measure with a number; the initialization is not compared
    loss = rest.split("## Exploratory: valid_mlm_loss, taco − mlm (lower is better")[1]
    loss = loss.split("##")[0]
    assert ("| 0 | valid_mlm_loss | 3 | 12.0000 | 12.0000 | | | | | initialization: the same "
            "network, not compared |") in loss
    assert loss.count("taco ahead") == 3
    attention = rest.split("## Exploratory: neighbour_attention, taco − mlm (no better "
                           "direction")[1].split("##")[0]
    assert attention.count("| taco higher |") == 3
    assert "## Exploratory: probe_SST-2" in rest and "contextual_score, taco" not in rest
    raw = rest.split("## Per checkpoint")[1]
    assert "| valid_mlm_loss | neighbour_attention | probe_SST-2 | probe_average |" in raw
    assert "95% t-interval over the pre-training seeds" in rest.split("## Figures")[1]


def test_a_report_without_probes_and_a_probe_primary_endpoint():
    from taco_fairseq.comparison.report import markdown_report

    table = noisy_grid()
    primary = PrimaryEndpoint("probe-average", 40)
    report = markdown_report(table, measure_rows(probes=False), "mlm", "# h", {},
                             primary=primary)
    assert "not available: `probe_average` not in OUT/measures" in report.split("## Wall")[0]
    assert "probe_" not in report.split("## Wall")[1]
    report = markdown_report(table, measure_rows(), "mlm", "# h", {}, primary=primary)
    head, rest = report.split("## Wall time")
    assert "linear probes (`probe_average`) at 40 updates" in head
    assert "| 40 | taco − mlm | 3 | 62.4000 | 62.4000 | +0.0000 |" in head
    assert head.rstrip().endswith("| no significant difference |")
    family = rest.split("## Exploratory: probe_average, taco − mlm")[1].split("##")[0]
    assert "| 10 |" in family and "| 40 |" not in family  # the primary is not tested twice
    assert "| 40 | average |" in rest  # the GLUE average is exploratory now


def test_one_pretraining_seed_gives_no_verdict_only_description():
    from taco_fairseq.comparison.report import markdown_report

    table = noisy_grid(pretrain=(1,))
    report = markdown_report(table, measure_rows(pretrain=(1,)), "mlm", "# h", {})
    assert "ahead" not in report and "behind" not in report
    head = report.split("## Wall time")[0]
    assert "| 40 | taco − mlm | 1 |" in head and "fine-tuning SD 0.63 / 0.63" in head
    assert head.rstrip().endswith("| n = 1 pre-training seed: not tested |")
    assert "(n = 1 pre-training seed: not tested). **Whether GLUE moves" in report
    assert "**Not meaningful: mlm's GLUE average does not rise significantly over the run " \
        "(one pre-training seed: not tested)" in report


def test_the_speedup_is_meaningful_only_when_the_baseline_rises():
    from taco_fairseq.comparison.report import markdown_report

    rising = markdown_report(noisy_grid(), [], "mlm", "# h", {})
    assert "It rises significantly: the comparison is meaningful." in rising
    assert "speed-up **" in rising or "**not reached**" in rising
    assert "Per pre-training seed (on its own curves): " in rising
    assert "covers with probability 75%" in rising
    flat = ScoreTable(grid(lambda o, p, u, t, s: 50 + p * s / 10 + (o == "taco") * (u == 10),
                           pretrain=(1, 2, 3)))
    report = markdown_report(flat, [], "mlm", "# h", {})
    assert "**It does not rise significantly" in report
    assert "**Not meaningful: mlm's GLUE average does not rise significantly over the run, " \
        "so reaching its best says nothing about speed.**" in report


def test_a_glue_axis_spans_at_least_ten_points():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from taco_fairseq.comparison.figures import GLUE_AXIS_SPAN, _axes

    fig, ax = plt.subplots()
    ax.plot([1, 2], [50.2, 50.9])
    _axes(ax, "points", GLUE_AXIS_SPAN)
    low, high = ax.get_ylim()
    assert high - low == pytest.approx(10.0) and low < 50.2 and high > 50.9
    ax.plot([1, 2], [20.0, 80.0])  # a wide range is left as it is
    ax.relim()
    ax.autoscale()
    _axes(ax, "points", GLUE_AXIS_SPAN)
    assert ax.get_ylim()[1] - ax.get_ylim()[0] > 60
    plt.close(fig)


def test_figures_with_measures_and_several_pretraining_seeds(tmp_path):
    from taco_fairseq.comparison.figures import plot_figures

    written = plot_figures(noisy_grid(), measure_rows(), "mlm", tmp_path)
    assert [p.name for p in written] == ["glue_average.png", "difference.png", "tasks.png",
                                         "checkpoints.png"]
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in written)


# --- fine-tuning at the last checkpoint only, missing seeds, references ------------------------
def test_a_study_finetuned_at_the_last_checkpoint_only_reports_and_plots(tmp_path, monkeypatch):
    """--final-tasks without --tasks: scores at the last checkpoint only. The primary
    glue-average is over those tasks there; no curve, speed-up or rise is claimed; every figure
    drawn has data in every panel, and the report links only the figures written."""
    from taco_fairseq.comparison import figures as figures_module
    from taco_fairseq.comparison.figures import plot_figures
    from taco_fairseq.comparison.report import markdown_report

    table = ScoreTable(grid(lambda o, p, u, t, s: 50 + s + (3 + p / 4 if o == "taco" else 0),
                            pretrain=(1, 2, 3), updates=(40,)))
    saved = {}
    real_save = figures_module._save

    def save(fig, path):
        saved[path.name] = [ax.has_data() for ax in fig.axes if ax.axison]
        return real_save(fig, path)

    monkeypatch.setattr(figures_module, "_save", save)
    figures = plot_figures(table, measure_rows(), "mlm", tmp_path)
    assert [p.name for p in figures] == ["glue_average.png", "difference.png", "tasks.png",
                                         "checkpoints.png"]
    assert all(all(panels) and panels for panels in saved.values()), saved
    primary = PrimaryEndpoint("glue-average", 40, ("RTE", "MRPC"), seeds=(1, 2, 3))
    text = markdown_report(table, measure_rows(), "mlm", "# h", {}, primary=primary,
                           figures=figures[:3])
    head = text.split("## Wall time")[0]
    assert "## Primary endpoint: the GLUE dev average over RTE, MRPC (fine-tuned) at 40" in head
    assert head.rstrip().endswith("| taco ahead |")
    assert "Speed-up" not in text and "Does the baseline improve" not in text
    assert "![checkpoints](checkpoints.png)" not in text and "![tasks](tasks.png)" in text


def test_a_glue_average_primary_endpoint_needs_finetuned_tasks():
    with pytest.raises(ValueError, match="--primary-endpoint glue-average: no fine-tuned task"):
        PrimaryEndpoint("glue-average", 40, ())
    with pytest.raises(ValueError, match="choose one of glue-average, probe-average"):
        PrimaryEndpoint("glue", 40, ("RTE",))
    assert PrimaryEndpoint("probe-average", 40).tasks == ()


def test_a_primary_test_short_of_a_declared_seed_gives_no_verdict():
    """A pre-training seed whose probe average is not finite (or not measured) on one side is
    left out of the pair; the primary test then has fewer seeds than declared: the report shows
    n and the numbers but refuses the verdict, naming the missing seed."""
    from taco_fairseq.comparison.report import markdown_report

    rows = measure_rows(pretrain=(1, 2, 3, 4))
    for row in rows:
        row["probe_average"] += (row["objective"] == "taco") * (5 + row["pretrain_seed"] / 4)
        if (row["objective"], row["pretrain_seed"], row["updates"]) == ("taco", 2, 40):
            row["probe_average"] = math.nan
    primary = PrimaryEndpoint("probe-average", 40, seeds=(1, 2, 3, 4))
    table = noisy_grid(pretrain=(1, 2, 3, 4))
    test = primary.test(table, MeasureTable(rows), "taco", "mlm")
    assert (test.n, test.seeds, primary.missing(test)) == (3, (1, 3, 4), [2])
    head = markdown_report(table, rows, "mlm", "# h", {}, primary=primary).split("## Wall")[0]
    row = next(line for line in head.splitlines() if line.startswith("| 40 | taco − mlm"))
    assert row.startswith("| 40 | taco − mlm | 3 |")
    assert row.endswith("| no verdict: 3 of the 4 declared pre-training seeds (missing: 2) |")
    assert "**The primary test lacks declared pre-training seeds**" in head
    complete = PrimaryEndpoint("probe-average", 40, seeds=(1, 3, 4))
    head = markdown_report(table, rows, "mlm", "# h", {}, primary=complete).split("## Wall")[0]
    assert head.rstrip().endswith("| taco ahead |") and "lacks declared" not in head


def test_uniform_references_are_shown_but_not_compared():
    """neighbour_attention_uniform and attention_entropy_uniform depend on the held-out
    sentences only: the same for every checkpoint, so no TACO − MLM table tests them."""
    from taco_fairseq.comparison.report import markdown_report
    from taco_fairseq.comparison.statistics import is_reference, measure_comparisons

    rows = measure_rows()
    for row in rows:
        row.update(neighbour_attention_uniform=0.0156, attention_entropy_uniform=6.1)
    assert is_reference("attention_entropy_uniform") and not is_reference("neighbour_attention")
    assert measure_comparisons(MeasureTable(rows), "neighbour_attention_uniform", "taco",
                               "mlm") == []
    report = markdown_report(noisy_grid(), rows, "mlm", "# h", {})
    assert "## Exploratory: neighbour_attention," in report
    assert "## Exploratory: neighbour_attention_uniform" not in report
    assert "## Exploratory: attention_entropy_uniform" not in report
    assert "| attention_entropy_uniform |" in report.split("## Per checkpoint")[1]


def test_checkpoints_csv_leaves_a_missing_measure_empty(tmp_path):
    """No validation at update 0: its valid_mlm_loss (None, or NaN in rows measured before)
    is an empty cell, not 'nan'; csv readers get '' for it."""
    import csv

    from taco_fairseq.comparison.tables import write_checkpoints_csv

    rows = [{"objective": "mlm", "pretrain_seed": 1, "updates": 0, "valid_mlm_loss": None,
             "probe_RTE": 55.0},
            {"objective": "taco", "pretrain_seed": 1, "updates": 0,
             "valid_mlm_loss": math.nan, "probe_RTE": 55.0},
            {"objective": "taco", "pretrain_seed": 1, "updates": 10, "valid_mlm_loss": 9.25,
             "probe_RTE": 56.0}]
    write_checkpoints_csv(rows, tmp_path / "checkpoints.csv")
    assert "nan" not in (tmp_path / "checkpoints.csv").read_text().lower()
    with open(tmp_path / "checkpoints.csv", newline="") as f:
        read = list(csv.DictReader(f))
    assert [r["valid_mlm_loss"] for r in read] == ["", "", "9.2500"]
    assert [r["contextual_score"] for r in read] == ["", "", ""]
    assert read[2]["updates"] == "10" and read[2]["probe_RTE"] == "56.0000"



def test_what_is_not_a_finite_number_is_no_measure_in_checkpoints_csv(tmp_path):
    """One rule (statistics.is_finite_number) for the measure table, the CSV and the report: a
    bool (e.g. a flag in an OUT/measures row) is no measure, an empty cell that reads back as
    missing (before, the CSV held "True", which read_checkpoints_csv could not read back)."""
    from taco_fairseq.comparison.tables import read_checkpoints_csv, write_checkpoints_csv

    rows = [{"objective": "mlm", "pretrain_seed": 1, "updates": 10, "valid_mlm_loss": 9.25,
             "finished": True, "probe_RTE": float("inf")}]
    assert MeasureTable(rows).keys == ["valid_mlm_loss"]
    write_checkpoints_csv(rows, tmp_path / "checkpoints.csv")
    back = read_checkpoints_csv(tmp_path / "checkpoints.csv")
    assert back[0]["finished"] is None and back[0]["probe_RTE"] is None
    assert back[0]["valid_mlm_loss"] == pytest.approx(9.25)

# --- reports before any fine-tuning, and against another study ---------------------------------
def test_a_report_before_any_finetuning_is_of_the_measures(tmp_path):
    """No fine-tuning finished (table None): the primary probe average is tested, the measures
    get their Holm-corrected tables, the fine-tuning sections say none has finished, and only
    the figure of the measures is drawn; a glue-average primary endpoint gets no verdict."""
    from taco_fairseq.comparison.figures import plot_figures
    from taco_fairseq.comparison.report import NO_FINETUNING, markdown_report

    rows = measure_rows()
    for row in rows:
        row["probe_average"] += (row["objective"] == "taco") * (5 + row["pretrain_seed"] / 4)
    figures = plot_figures(None, rows, "mlm", tmp_path)
    assert [p.name for p in figures] == ["checkpoints.png"]
    assert not (tmp_path / "glue_average.png").exists()
    primary = PrimaryEndpoint("probe-average", 40, seeds=(1, 2, 3))
    report = markdown_report(None, rows, "mlm", "# h", {}, primary=primary, figures=figures)
    head, rest = report.split("## Wall time")
    row = next(line for line in head.splitlines() if line.startswith("| 40 | taco − mlm"))
    expected = paired_test(MeasureTable(rows).values("probe_average", "taco", 40),
                           MeasureTable(rows).values("probe_average", "mlm", 40))
    assert row.startswith(f"| 40 | taco − mlm | 3 | {expected.baseline:.4f} | "
                          f"{expected.candidate:.4f} | {expected.difference:+.4f} | "
                          f"[{expected.low:+.4f}, {expected.high:+.4f}] |")
    assert row.endswith("| taco ahead |")
    assert "## Dev scores\n\n" + NO_FINETUNING in rest
    assert "at equal updates, GLUE" not in rest and "Speed-up" not in rest
    loss = rest.split("## Exploratory: valid_mlm_loss, taco − mlm")[1].split("##")[0]
    assert loss.count("taco ahead") == 3
    assert "## Exploratory: probe_SST-2, taco − mlm" in rest
    figures_section = rest.split("## Figures")[1]
    assert "No GLUE figures: no fine-tuning has finished yet." in figures_section
    assert "![checkpoints](checkpoints.png)" in figures_section and "glue_average" not in (
        figures_section)

    glue = PrimaryEndpoint("glue-average", 40, ("RTE",), seeds=(1, 2, 3))
    head = markdown_report(None, rows, "mlm", "# h", {}, primary=glue).split("## Wall")[0]
    assert head.rstrip().endswith(
        "| 40 | taco − mlm | 0 | | | | | | | no verdict: no fine-tuning finished |")
    with pytest.raises(ValueError, match="needs its primary endpoint"):
        markdown_report(None, rows, "mlm", "# h", {})


@pytest.mark.parametrize("primary, table, line", [
    (PrimaryEndpoint("probe-average", 40), "## Exploratory: probe_average, taco − mlm",
     "`probe_average` at 40 updates is the primary endpoint, tested above: it is not in this "
     "table nor in its Holm correction."),
    (PrimaryEndpoint("glue-average", 40, ("RTE", "MRPC")),
     "## Exploratory: taco − mlm at equal updates, GLUE",
     "The GLUE average at 40 updates is the primary endpoint, tested above: it is not in this "
     "table nor in its Holm correction."),
])
def test_the_exploratory_table_says_why_it_leaves_the_primary_out(primary, table, line):
    from taco_fairseq.comparison.report import markdown_report

    report = markdown_report(noisy_grid(), measure_rows(), "mlm", "# h", {}, primary=primary)
    family = report.split(table)[1].split("\n## ")[0]
    assert line in family and report.count("is the primary endpoint, tested above") == 1


def reference_study(tmp_path):
    """A study's --out (mlm and taco, pre-training seeds 1-3, checkpoints 0/10/20/40) as its
    report leaves it: checkpoints.csv, summary.csv (RTE at 40 updates) and command.txt."""
    from taco_fairseq.comparison.tables import write_checkpoints_csv, write_summary_csv

    out = tmp_path / "study"
    out.mkdir()
    write_checkpoints_csv(measure_rows(), out / "checkpoints.csv")
    write_summary_csv(grid(lambda o, p, u, t, s: 50 + p + s + (o == "taco") * 2,
                           pretrain=(1, 2, 3), updates=(40,), tasks=("RTE",)),
                      out / "summary.csv")
    (out / "command.txt").write_text("taco-compare --out study\n")
    return out


def test_a_control_is_described_against_the_reference_studys_runs(tmp_path):
    """A TACO-only control of pre-training seed 1 against a study of seeds 1-3: per measure
    and checkpoint, the control's taco against the study's taco, then against its mlm, seed 1
    only, as description; the fine-tuned task too where both have it."""
    from taco_fairseq.comparison.report import markdown_report
    from taco_fairseq.comparison.tables import read_reference

    reference = read_reference(reference_study(tmp_path), [1], [10, 20, 40])
    assert {r["pretrain_seed"] for r in reference.measures} == {1}
    assert reference.command == "taco-compare --out study"
    control = [dict(r, valid_mlm_loss=r["valid_mlm_loss"] + 0.5, probe_average=70.0)
               for r in measure_rows(pretrain=(1,)) if r["objective"] == "taco"]
    for r in control:  # as read back from a checkpoints.csv: no validation at update 0
        r["valid_mlm_loss"] = None if r["updates"] == 0 else r["valid_mlm_loss"]
    table = ScoreTable(grid(lambda o, p, u, t, s: 60.0, objectives=("taco",), pretrain=(1,),
                            updates=(40,), tasks=("RTE",)))
    report = markdown_report(table, control, "taco", "# h", {}, reference=reference,
                             primary=PrimaryEndpoint("probe-average", 40, seeds=(1,)))
    section = report.split(f"## Against {reference.out} (description, no test)")[1].split(
        "## Per checkpoint")[0]
    assert "Reference command: `taco-compare --out study`" in section
    same, other = section.split("### this study's taco − the reference's taco")[1].split(
        "### this study's taco − the reference's mlm")
    study_loss = 12.0 - 20 / 10 - 1.1  # the study's taco, seed 1, at 20 updates
    assert (f"| 20 | valid_mlm_loss | 1 | {study_loss:.4f} | {study_loss + 0.5:.4f} | "
            "+0.5000 |  | - | - | description (n = 1): no test |") in same
    assert "| 20 | valid_mlm_loss | 1 | 10.0000 | 9.4000 | -0.6000 |" in other
    assert "| 0 | valid_mlm_loss |" not in same and "| 0 | neighbour_attention | 1 |" in same
    assert "| 40 | probe_average | 1 | 61.4000 | 70.0000 | +8.6000 |" in same
    # the study's taco, seed 1, on RTE: 50 + 1 + 2 (mean fine-tuning seed) + 2 = 55
    assert "| 40 | RTE (fine-tuned) | 1 | 55.00 | 60.00 | +5.00 |  | - | - |" in same
    assert "| 40 | RTE (fine-tuned) | 1 | 53.00 | 60.00 | +7.00 |" in other
    assert "ahead" not in section and "behind" not in section


@pytest.mark.parametrize("change, seeds, updates, message", [
    ("none", [2, 4], [10], "its checkpoints.csv has pre-training seed(s) 1, 2, 3, not 4 of "
     "--pretrain-seeds 2 4: runs are matched by pre-training seed"),
    ("none", [1], [250, 500], "its checkpoints.csv has checkpoints at 10, 20, 40, none at "
     "--checkpoint-updates 250 500: runs are matched on update counts"),
    ("no csv", [1], [10], "no checkpoints.csv (its report writes it: run taco-compare "
     "--report-only --out"),
    ("no dir", [1], [10], "no such directory"),
    ("other csv", [1], [10], "not the checkpoints.csv of a comparison (no column updates)"),
])
def test_a_reference_that_does_not_fit_is_refused(tmp_path, change, seeds, updates, message):
    from taco_fairseq.comparison.tables import read_reference

    out = reference_study(tmp_path)
    if change == "no csv":
        (out / "checkpoints.csv").unlink()
    elif change == "no dir":
        out = tmp_path / "nowhere"
    elif change == "other csv":
        (out / "checkpoints.csv").write_text("objective,pretrain_seed,step\nmlm,1,10\n")
    with pytest.raises(ValueError) as error:
        read_reference(out, seeds, updates)
    assert message in str(error.value)


def test_checkpoints_and_summary_csv_read_back_as_written(tmp_path):
    from taco_fairseq.comparison.tables import (
        read_checkpoints_csv,
        read_summary_csv,
        write_checkpoints_csv,
        write_summary_csv,
    )

    rows = measure_rows(pretrain=(1,))
    write_checkpoints_csv(rows, tmp_path / "checkpoints.csv")
    back = read_checkpoints_csv(tmp_path / "checkpoints.csv")
    assert [(r["objective"], r["pretrain_seed"], r["updates"]) for r in back] == sorted(
        (r["objective"], r["pretrain_seed"], r["updates"]) for r in rows)
    assert all(r["contextual_score"] is None for r in back)  # NaN: an empty cell
    assert back[1]["valid_mlm_loss"] == pytest.approx(11.0) and back[1]["updates"] == 10
    scores = grid(lambda o, p, u, t, s: 50.25 + s, pretrain=(1,), updates=(40,))
    write_summary_csv(scores, tmp_path / "summary.csv")
    assert sorted(read_summary_csv(tmp_path / "summary.csv"), key=str) == sorted(scores, key=str)
    (tmp_path / "summary.csv").write_text("objective,score\nmlm,1\n")
    with pytest.raises(ValueError, match="not the summary.csv of a comparison"):
        read_summary_csv(tmp_path / "summary.csv")


def test_a_study_of_one_objective_says_its_primary_endpoint_is_not_tested():
    from taco_fairseq.comparison.report import markdown_report

    rows = [r for r in measure_rows() if r["objective"] == "taco"]
    head = markdown_report(None, rows, "taco", "# h", {},
                           primary=PrimaryEndpoint("probe-average", 40)).split("## Wall")[0]
    assert "Not tested: this study has one objective (taco), nothing to compare it with here" \
        in head
    assert "| updates |" not in head


def test_the_probes_window_is_a_setting_not_a_measure():
    from taco_fairseq.comparison.statistics import MeasureTable

    rows = [{"objective": o, "pretrain_seed": 1, "updates": 10, "pos_accuracy": 80.0,
             "pos_window": 32} for o in ("mlm", "taco")]
    assert MeasureTable(rows).keys == ["pos_accuracy"]
