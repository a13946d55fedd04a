"""docs/results/promise-study/analysis.py, the declared decision of the promise study (its
PLAN.md), on made-up rows whose outcome is known: the two gates, Q1 and Q2 with Holm, the
described speed-up, the refusal of incomplete rows and the power calculation. Fast: no fairseq,
no torch."""

import ast
import json
import math
import runpy
from types import SimpleNamespace

import numpy as np
import pytest
from scipy import stats

from taco_fairseq.comparison.tables import write_checkpoints_csv

from conftest import REPO, measured_out


def _load():
    """docs/results/promise-study/analysis.py's names, the script run by path (it is in no
    package) without its ``__main__`` part."""
    path = REPO / "docs" / "results" / "promise-study" / "analysis.py"
    return SimpleNamespace(**runpy.run_path(str(path)))


#: The script, run once: the made-up rows are built on its update counts, so that they follow
#: a change of the plan's constants (test_the_constants_are_the_declared_ones pins them).
ANALYSIS = _load()
N, B, TACO_END, BRANCH_END, EARLY = (ANALYSIS.N, ANALYSIS.B, ANALYSIS.TACO_END,
                                     ANALYSIS.BRANCH_END, ANALYSIS.GATE_B_EARLY)
#: The made-up checkpoints besides those: TACO's (and MLM's) one before TACO_END, the branch's
#: between B and BRANCH_END, MLM's (and TACO's) between GATE_B_EARLY and TACO_BEFORE, and MLM's
#: between BRANCH_END and N.
TACO_BEFORE = TACO_END - 500
BRANCH_MID = (B + BRANCH_END) // 2
MIDDLE = (EARLY + TACO_BEFORE) // 2
LATE = (BRANCH_END + N) // 2
assert 0 < EARLY < MIDDLE < TACO_BEFORE < TACO_END < B < BRANCH_MID < BRANCH_END < LATE < N, (
    "the made-up rows assume 0 < GATE_B_EARLY < TACO_END − 500 < TACO_END < B < BRANCH_END < N"
    " with room between")

SEEDS = (6, 7, 8, 9, 10, 11)
#: A fixed pattern over the six seeds with mean 0 and SD 1: ``mean + sd * PATTERN`` has that
#: mean and SD exactly, so each test's t statistics are known.
_RAW = np.array([-1.2, 0.8, -0.4, 1.4, 0.2, -0.8])
PATTERN = (_RAW - _RAW.mean()) / _RAW.std(ddof=1)
#: (pos_accuracy_ambiguous, mlm_loss_wikitext2, neighbour_share) of each arm's checkpoints
#: (the validation loss is the WikiText-2 loss; none at update 0): MLM leaves the plateau by
#: TACO_BEFORE updates (share 0.6 against a uniform 0.087, 7.5 bits), well before B.
CURVES = {
    "mlm": {0: (60, 10.0, 0.06), EARLY: (62, 9.3, 0.06), MIDDLE: (66, 8.4, 0.3),
            TACO_BEFORE: (70, 7.5, 0.6), B: (72, 7.0, 0.7), BRANCH_END: (74, 6.6, 0.75),
            LATE: (75, 6.4, 0.75), N: (76, 6.3, 0.75)},
    "taco": {0: (60, 10.0, 0.06), EARLY: (68, 8.0, 0.5), MIDDLE: (73, 7.0, 0.7),
             TACO_BEFORE: (75.5, 6.5, 0.8), TACO_END: (76.5, 6.2, 0.8)},
    "taco-branch": {BRANCH_MID: (75, 6.5, 0.8), BRANCH_END: (75.5, 6.4, 0.8)},
}


@pytest.fixture(scope="module")
def analysis():
    """docs/results/promise-study/analysis.py's names (:data:`ANALYSIS`)."""
    return ANALYSIS


def _rows(q1=(0.5, 0.6, -0.1, 0.08), q2=(-0.5, 2.0, -0.05, 0.08), early=(62.0, 1.0)):
    """Six seeds on :data:`CURVES`, each seed's values shifted by its own offset (0.3 points,
    0.02 bits per seed), TACO's and the branch's by 0.2 points and 0.01 bits × PATTERN more
    (so that they reach MLM's values at different updates); the endpoints set so that, per
    seed, D = TACO(TACO_END) − MLM(N) is ``mean + sd · PATTERN`` with ``q1`` = (POS mean,
    POS SD, loss mean, loss SD), the same for the branch at BRANCH_END with ``q2``, and
    MLM(GATE_B_EARLY)'s POS is ``early`` = (mean, SD) plus the seed's offset."""
    rows = []
    for i, seed in enumerate(SEEDS):
        shift = seed - 8
        for objective, curve in CURVES.items():
            wobble = 0 if objective == "mlm" else PATTERN[i]
            for updates, (pos, loss, share) in curve.items():
                loss += 0.02 * shift + 0.01 * wobble * (updates > 0)
                rows.append({"objective": objective, "pretrain_seed": seed, "updates": updates,
                             "pos_accuracy_ambiguous": pos + 0.3 * shift
                             + 0.2 * wobble * (updates > 0),
                             "mlm_loss_wikitext2": loss,
                             "valid_mlm_loss": None if updates == 0 else loss,
                             "neighbour_share": share, "neighbour_share_uniform": 0.087})
        mlm_pos, mlm_loss = (v + d * shift for v, d in zip(CURVES["mlm"][N], (0.3, 0.02)))
        for objective, updates, (pos_d, pos_sd, loss_d, loss_sd) in (
                ("taco", TACO_END, q1), ("taco-branch", BRANCH_END, q2)):
            _set(rows, objective, seed, updates, pos_accuracy_ambiguous=mlm_pos + pos_d
                 + pos_sd * PATTERN[i], mlm_loss_wikitext2=mlm_loss + loss_d
                 + loss_sd * PATTERN[::-1][i])
        _set(rows, "mlm", seed, EARLY,
             pos_accuracy_ambiguous=early[0] + 0.3 * shift + early[1] * PATTERN[i])
    return rows


def _set(rows, objective, seed, updates, **values):
    """Sets ``values`` in the row of that checkpoint (added when there is none)."""
    for row in rows:
        if (row["objective"], row["pretrain_seed"], row["updates"]) == (objective, seed,
                                                                         updates):
            row.update(values)
            return
    rows.append({"objective": objective, "pretrain_seed": seed, "updates": updates, **values})


def _verdicts(analysis, rows):
    """{question: verdict} of ``rows`` (both gates passing)."""
    return {q.name: q.verdict for q in analysis.questions(analysis.Study(rows))}


def test_the_constants_are_the_declared_ones(analysis):
    """The numbers fixed by PLAN.md; EXIT_RATIO the one of taco_fairseq/neighbour_attention.py
    (read from its source: importing it imports fairseq and torch)."""
    assert (analysis.N, analysis.TACO_END, analysis.B, analysis.BRANCH_END,
            analysis.GATE_B_EARLY) == (10500, 3500, 4500, 6500, 1000)
    assert analysis.TACO_END == analysis.N // 3
    assert analysis.BRANCH_END == analysis.B + (analysis.N - analysis.B) // 3
    assert analysis.EXIT_RATIO == 1.5
    source = (REPO / "taco_fairseq" / "neighbour_attention.py").read_text(encoding="utf-8")
    declared = [ast.literal_eval(node.value) for node in ast.parse(source).body
                if isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "EXIT_RATIO" for t in node.targets)]
    assert declared == [analysis.EXIT_RATIO]
    assert (analysis.PLATEAU_EXIT_LOSS, analysis.ALPHA, analysis.Q_ALPHA, analysis.POS_MARGIN,
            analysis.LOSS_MARGIN, analysis.POWER) == (8.5, 0.05, 0.025, 1.0, 0.15, 0.8)


def test_both_gates_pass_q1_is_supported_and_q2_inconclusive(analysis, tmp_path, capsys):
    """(a) TACO(TACO_END) non-inferior on both measures; the branch's POS too spread to say."""
    rows = _rows()
    study = analysis.Study(rows)
    exits, passed = analysis.gate_a(study)
    assert passed and [e.seed for e in exits] == list(SEEDS)
    assert exits[0].ratio == pytest.approx(0.7 / 0.087)
    test, passed = analysis.gate_b(study)
    assert passed and test.difference == pytest.approx(14.0) and test.n == 6
    q1, q2 = analysis.questions(study)
    assert (q1.verdict, q2.verdict) == ("supported", "inconclusive")
    pos, loss = q1.tests
    assert pos.difference == pytest.approx(0.5) and loss.difference == pytest.approx(-0.1)
    # one-sided t of the non-inferiority on POS: (D + margin) / (sd / √n), 5 degrees of freedom
    assert pos.p_noninferior == pytest.approx(stats.t.sf(1.5 / (0.6 / math.sqrt(6)), 5))
    # loss: lower is better, so the margin is above: H0 D ≥ +0.15
    assert loss.p_noninferior == pytest.approx(stats.t.sf(0.25 / (0.08 / math.sqrt(6)), 5))
    assert q1.p == max(pos.p_noninferior, loss.p_noninferior)  # both required
    assert (q1.level, q2.level) == (0.0125, 0.025)
    assert pos.confidence == pytest.approx(0.975)
    half = stats.t.ppf(1 - 0.0125, 5) * 0.6 / math.sqrt(6)
    assert (pos.low, pos.high) == (pytest.approx(0.5 - half), pytest.approx(0.5 + half))
    path = tmp_path / "checkpoints.csv"
    write_checkpoints_csv(rows, path)
    assert analysis.main(["--csv", str(path)]) == 0
    out = capsys.readouterr().out
    assert "Gate A: **passed**" in out and "Gate B: **passed**" in out
    assert "- Q1: p = " in out and "**supported**" in out and "**inconclusive**" in out
    assert "no claim" not in out


@pytest.mark.parametrize("seed_row", [
    {"neighbour_share": 0.12},  # ratio 1.38 < 1.5: still on the plateau
    {"valid_mlm_loss": 8.6},    # the share left, the loss did not
])
def test_gate_a_failing_in_one_seed_makes_no_claim(analysis, capsys, tmp_path, seed_row):
    """(b) one seed's MLM(B) has not left the plateau: no claim, still the description."""
    rows = _rows()
    _set(rows, "mlm", 8, B, **seed_row)
    study = analysis.Study(rows)
    exits, passed = analysis.gate_a(study)
    assert not passed and [e.seed for e in exits if not e.passed] == [8]
    report = analysis.report(study)
    assert "Gate A: **failed** (seeds 8)" in report
    assert "Gate A failed: **no claim is made**" in report
    assert "- Q1: p" not in report and "supported" not in report
    assert "## The speed-up" in report and "### At equal updates" in report
    path = tmp_path / "checkpoints.csv"
    write_checkpoints_csv(rows, path)
    assert analysis.main(["--csv", str(path)]) == 0  # a failed gate is a result
    assert "no claim is made" in capsys.readouterr().out


@pytest.mark.parametrize("early", [
    (75.5, 3.0),  # MLM(N) − MLM(GATE_B_EARLY) = +0.5 ± 3: not significant
    (77.0, 0.5),  # −1.0, significant, but the wrong way
])
def test_gate_b_failing_makes_no_claim(analysis, early):
    """(c) the measure does not see MLM's training although Gate A passes."""
    study = analysis.Study(_rows(early=early))
    assert analysis.gate_a(study)[1]
    test, passed = analysis.gate_b(study)
    assert not passed and test.difference == pytest.approx(76 - early[0])
    report = analysis.report(study)
    assert "Gate A: **passed**" in report and "Gate B: **failed**" in report
    assert "Gate B failed: **no claim is made**" in report and "- Q1: p" not in report


@pytest.mark.parametrize("q1", [
    (-3.0, 0.6, -0.1, 0.08),  # POS 3 points below, far beyond the 1-point margin
    (0.5, 0.6, 0.4, 0.08),    # the loss 0.4 bits above, beyond 0.15 bits
])
def test_worse_than_the_margin_on_either_measure_is_refuted(analysis, q1):
    """(d) Q1 refuted at its Holm level (here the second, 0.025: Q2's p is smaller)."""
    q1_result, q2_result = analysis.questions(analysis.Study(_rows(q1=q1)))
    assert q1_result.verdict == "refuted" and q2_result.verdict == "inconclusive"
    assert q1_result.level == 0.025 and q2_result.level == 0.0125
    assert min(t.p_worse for t in q1_result.tests) < 0.001
    # worse, but within the margin and spread: only inconclusive
    assert _verdicts(analysis, _rows(q1=(-0.5, 2.0, -0.1, 0.08)))["Q1"] == "inconclusive"


def test_holm_levels_step_down(analysis):
    """(e) the smaller p against 0.0125, the larger against 0.025, and only after the first."""
    assert analysis.holm_levels([0.02, 0.01]) == ([0.025, 0.0125], [True, True])
    assert analysis.holm_levels([0.01, 0.02]) == ([0.0125, 0.025], [True, True])
    assert analysis.holm_levels([0.015, 0.02]) == ([0.0125, 0.025], [False, False])
    assert analysis.holm_levels([0.02, 0.5]) == ([0.0125, 0.025], [False, False])
    assert analysis.holm_levels([0.001, 0.5]) == ([0.0125, 0.025], [True, False])


def _q_with_p(p):
    """(POS mean, POS SD, loss mean, loss SD) of a question whose p is ``p``: D = 0 on POS
    with the SD that puts its one-sided t at p, the loss far inside its margin."""
    return (0.0, 1.0 * math.sqrt(6) / stats.t.isf(p, 5), -0.1, 0.01)


@pytest.mark.parametrize("q2, verdicts", [
    ((0.5, 0.3, -0.05, 0.08), ("supported", "supported")),  # Q2 first (p tiny), Q1 at 0.025
    ((-0.5, 2.0, -0.05, 0.08), ("inconclusive", "inconclusive")),  # Q1 first, at 0.0125
    (_q_with_p(0.02), ("inconclusive", "inconclusive")),  # 0.02 < 0.025, but step-down stops
])
def test_holm_orders_the_questions_by_their_p(analysis, q2, verdicts):
    """(e) Q1 has p = 0.018: supported only when Q2's p is smaller and rejected first."""
    q1, q2_result = analysis.questions(analysis.Study(_rows(q1=_q_with_p(0.018), q2=q2)))
    assert q1.p == pytest.approx(0.018)
    assert (q1.verdict, q2_result.verdict) == verdicts


def _reach(updates, values, target):
    """Where the line through two checkpoints ``updates`` with ``values`` crosses ``target``
    (the interpolation, done by hand)."""
    (u0, u1), (v0, v1) = updates, values
    return u0 + (target - v0) / (v1 - v0) * (u1 - u0)


def test_the_speed_up_is_interpolated_and_censored(analysis):
    """(f) seed 6 reaches MLM(N) half-way between TACO's last two checkpoints and half-way
    between the branch's; seed 7 at 4/5 of both intervals, the branch's between MLM(B), its
    start, and its BRANCH_MID; seed 8 never."""
    rows = [r for r in _rows() if r["pretrain_seed"] in (6, 7, 8)]
    pos = {6: ((74, 78), (75, 77)), 7: ((72, 77), (77, 78)), 8: ((74, 75), (74, 75))}
    for seed, (taco, branch) in pos.items():
        _set(rows, "mlm", seed, N, pos_accuracy_ambiguous=76.0, mlm_loss_wikitext2=6.3)
        _set(rows, "mlm", seed, B, pos_accuracy_ambiguous=72.0)
        for updates, value in zip((TACO_BEFORE, TACO_END), taco):
            _set(rows, "taco", seed, updates, pos_accuracy_ambiguous=value)
        for updates, value in zip((BRANCH_MID, BRANCH_END), branch):
            _set(rows, "taco-branch", seed, updates, pos_accuracy_ambiguous=value)
    _set(rows, "taco", 6, TACO_BEFORE, mlm_loss_wikitext2=6.5)
    _set(rows, "taco", 6, TACO_END, mlm_loss_wikitext2=6.1)
    # by hand, from the rows just set (every earlier checkpoint is below 76 points)
    taco_6 = _reach((TACO_BEFORE, TACO_END), (74, 78), 76)
    branch_6 = _reach((BRANCH_MID, BRANCH_END), (75, 77), 76)
    taco_7 = _reach((TACO_BEFORE, TACO_END), (72, 77), 76)
    branch_7 = _reach((B, BRANCH_MID), (72, 77), 76)
    assert (taco_6, branch_6) == (TACO_BEFORE + 250, BRANCH_MID + (BRANCH_END - BRANCH_MID) / 2)
    assert (taco_7, branch_7) == (TACO_BEFORE + 400, B + 0.8 * (BRANCH_MID - B))
    study = analysis.Study(rows)
    pos = analysis.reaches(study, "pos_accuracy_ambiguous")
    assert [(r.seed, r.taco, r.branch) for r in pos] == [
        (6, pytest.approx(taco_6), pytest.approx(branch_6)),
        (7, pytest.approx(taco_7), pytest.approx(branch_7)), (8, None, None)]
    assert pos[0].taco_ratio == pytest.approx(N / taco_6)
    assert pos[0].branch_ratio == pytest.approx(N / branch_6)
    assert pos[0].branch_ratio_after == pytest.approx((N - B) / (branch_6 - B))
    assert pos[1].branch_ratio_after == pytest.approx((N - B) / (branch_7 - B))
    assert pos[2].taco_ratio is None and pos[2].branch_ratio_after is None
    # the loss: lower is better, reached going down (6.5 → 6.1 crosses 6.3 half-way)
    assert analysis.reaches(study, "mlm_loss_wikitext2")[0].taco == pytest.approx(
        _reach((TACO_BEFORE, TACO_END), (6.5, 6.1), 6.3))
    summary = analysis.summarize([r.taco_ratio for r in pos])
    logs = np.log([N / taco_6, N / taco_7])
    half = stats.t.ppf(0.975, 1) * logs.std(ddof=1) / math.sqrt(2)
    assert (summary.reached, summary.censored) == (2, 1)
    assert summary.mean == pytest.approx(math.exp(logs.mean()))
    assert (summary.low, summary.high) == (pytest.approx(math.exp(logs.mean() - half)),
                                           pytest.approx(math.exp(logs.mean() + half)))
    assert analysis.summarize([None, None]).mean is None
    assert analysis.summarize([2.0, math.inf, None]).at_start == 1
    report = analysis.report(study)
    assert f"| 8 | 76.00 | not reached by {TACO_END:,} |" in report
    assert (f"| 6 | 76.00 | {taco_6:,.0f} | {N / taco_6:.2f}× | {branch_6:,.0f} | "
            f"{N / branch_6:.2f}× | {(N - B) / (branch_6 - B):.2f}× |") in report
    assert "reached by 2, censored (not reached) 1" in report
    curves = {u: (taco, branch) for u, taco, branch
              in analysis.equal_updates(study, "pos_accuracy_ambiguous")}
    # the seeds' mean offset is 0.3 × mean(6, 7, 8 − 8) = −0.3 points
    assert 0 not in curves and B not in curves and curves[BRANCH_END][0] is None
    assert curves[TACO_BEFORE] == (
        (3, pytest.approx((74 + 72 + 74) / 3 - (CURVES["mlm"][TACO_BEFORE][0] - 0.3))), None)
    assert curves[BRANCH_END][1] == (
        3, pytest.approx((77 + 78 + 75) / 3 - (CURVES["mlm"][BRANCH_END][0] - 0.3)))


def test_a_seed_that_has_not_finished_is_left_out_and_listed(analysis, tmp_path, capsys):
    """(g) PLAN.md, "How it is run": the decision is on the seeds that finished all three
    runs; a seed lacking a row or value is left out of every analysis and the report names
    each gap; with no seed finished, or rows that are wrong, one clear error, exit 1."""
    rows = [r for r in _rows() if (r["objective"], r["pretrain_seed"], r["updates"])
            != ("taco", 9, TACO_END)]
    _set(rows, "mlm", 7, B, neighbour_share=None)
    study = analysis.Study(rows)
    assert study.seeds == [s for s in SEEDS if s not in (7, 9)]
    assert study.unfinished == {7: [f"mlm at {B:,} updates: no neighbour_share"],
                                9: [f"taco at {TACO_END:,} updates: no row"]}
    assert 7 not in study.values(analysis.POS, "mlm", N)  # out of every analysis
    path = tmp_path / "checkpoints.csv"
    write_checkpoints_csv(rows, path)
    assert analysis.main(["--csv", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"n = {len(SEEDS) - 2} of the 13 declared" in out
    assert f"- seed 9: taco at {TACO_END:,} updates: no row" in out
    assert f"| 7 |" not in out.split("## Gate A")[1]
    only_seven = [r for r in rows if r["pretrain_seed"] == 7]
    with pytest.raises(ValueError, match=f"no seed finished all three runs; seed 7 lacks mlm "
                       f"at {B:,} updates: no neighbour_share"):
        analysis.Study(only_seven)
    write_checkpoints_csv(only_seven, path)
    assert analysis.main(["--csv", str(path)]) == 1
    assert "no seed finished all three runs" in capsys.readouterr().err
    with pytest.raises(ValueError, match="no seed"):
        analysis.Study([])
    with pytest.raises(ValueError,
                       match=f"objective 'tacco'.*mlm seed 6 at {B:,} updates: 2 rows"):
        analysis.Study(_rows() + [{"objective": "tacco", "pretrain_seed": 6, "updates": 0},
                                  {"objective": "mlm", "pretrain_seed": 6, "updates": B}])


def test_one_seed_is_described_and_nothing_is_tested(analysis):
    """PLAN.md, "How it is run": the report of the seeds finished so far says how many of the
    declared it analyses; with one seed no paired test exists, so Gate B, Q1 and Q2 are not
    tested, while Gate A and the values are described."""
    rows = [r for r in _rows() if r["pretrain_seed"] == 6]
    report = analysis.report(analysis.Study(rows))
    assert "n = 1 of the 13 declared, 6–18): **interim**" in report
    assert "Not tested: a paired test needs 2 seeds, 1 analysed." in report
    assert "supported" not in report and "refuted" not in report
    assert "| 6 |" in report.split("## Gate A")[1].split("## Gate B")[0]
    study = analysis.Study(rows)
    d1 = (study.value(analysis.POS, "taco", TACO_END, 6) - study.value(analysis.POS, "mlm", N, 6))
    assert f"| {d1:+.2f} |" in report.split("## Per seed")[1]
    every = analysis.report(analysis.Study(_rows()))
    assert "**interim**" in every  # the made-up rows have fewer than the 13 declared seeds


def test_the_curves_figure_draws_each_run_and_the_branch_from_mlm_at_b(analysis, tmp_path,
                                                                       capsys):
    """``analysis.py curves``: a run's curve stops at its arm's end, the branch's starts at
    MLM(B), the checkpoint it continues, and the share panel is share / uniform."""
    study = analysis.Study(_rows())
    updates, values = analysis.curve_points(study, analysis.POS, "taco-branch", 8)
    assert updates == [B, BRANCH_MID, BRANCH_END]
    assert values[0] == study.value(analysis.POS, "mlm", B, 8)
    updates, ratios = analysis.curve_points(study, (analysis.SHARE, analysis.UNIFORM), "mlm", 8)
    assert updates[-1] == N and ratios[-1] == pytest.approx(0.75 / 0.087)
    assert analysis.curve_points(study, analysis.POS, "taco", 8)[0][-1] == TACO_END
    csv = tmp_path / "checkpoints.csv"
    write_checkpoints_csv(_rows(), csv)
    figure = tmp_path / "curves.png"
    assert analysis.main(["--csv", str(csv), "curves", "--figure", str(figure)]) == 0
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"wrote {figure}" in capsys.readouterr().out


def test_power_is_the_product_of_the_noncentral_t_powers(analysis, capsys):
    """(h) against scipy's noncentral t directly and a published case."""
    # G*Power, one-sample t, d = 0.5, two-sided α = 0.05 (one-sided 0.025), power 0.8: n = 34
    assert analysis.seeds_for_power(2.0, 1e-6, level=0.025) == 34
    n, df = 7, 6
    critical = stats.t.ppf(1 - 0.0125, df)
    direct = (stats.nct.sf(critical, df, 1.0 * math.sqrt(n) / 0.56)
              * stats.nct.sf(critical, df, 0.15 * math.sqrt(n) / 0.085))
    assert analysis.q_power(n, 0.56, 0.085) == pytest.approx(direct)
    n = analysis.seeds_for_power(0.56, 0.085)
    assert analysis.q_power(n, 0.56, 0.085) >= 0.8 > analysis.q_power(n - 1, 0.56, 0.085)
    # a true loss difference of +0.05 bits leaves 0.10 of the 0.15 bits' room: more seeds
    assert analysis.seeds_for_power(0.56, 0.085, true_loss=0.05) > n
    # large n: the normal approximation ((z₁₋ₐ + z_power) · sd / margin)² plus z₁₋ₐ² / 2 for
    # the t distribution (Guenther 1981, The American Statistician 35:243), 953.0
    z = stats.norm.isf(0.0125)
    approximation = ((z + stats.norm.isf(0.2)) * 10 / 1.0) ** 2 + z ** 2 / 2
    assert abs(analysis.seeds_for_power(10.0, 1e-6) - approximation) < 1.5
    with pytest.raises(ValueError, match="at or beyond the margin"):
        analysis.seeds_for_power(0.56, 0.085, true_pos=-1.0)
    assert analysis.main(["power", "--sd-pos", "0.56", "--sd-loss", "0.085"]) == 0
    assert capsys.readouterr().out.startswith(f"n = {n} pre-training seeds: power ")


def _rows_script():
    return SimpleNamespace(**runpy.run_path(str(REPO / "docs/results/promise-study/rows.py")))


def _row(objective, seed, updates, loss):
    return {"objective": objective, "pretrain_seed": seed, "updates": updates,
            "valid_mlm_loss": None if updates == 0 else loss, "pos_accuracy_ambiguous": 70.123456}


def test_rows_merged_as_measured_and_a_lost_runs_rows_kept_apart(tmp_path):
    rows = _rows_script()
    committed, lost = tmp_path / "checkpoints.csv", tmp_path / "lost.csv"
    first = measured_out(tmp_path / "seed6", [_row("mlm", 6, 0, None), _row("mlm", 6, 500, 9.123456)])
    assert rows.merge([first], committed, lost) == 2
    # the same session, more rows of the run: nothing is lost (the CSV's rounding is no change)
    (first / "measures" / "mlm-seed6@1000.json").write_text(
        '{"objective": "mlm", "pretrain_seed": 6, "updates": 1000, "valid_mlm_loss": 8.5}')
    assert rows.merge([first], committed, lost) == 3 and not lost.exists()
    # the run was lost; its rerun (another machine's floating point) replaces all its rows
    rerun = measured_out(tmp_path / "rerun", [_row("mlm", 6, 0, None), _row("mlm", 6, 500, 9.2)])
    assert rows.merge([rerun], committed, lost) == 2
    kept = {(r["updates"], r["valid_mlm_loss"]) for r in rows.read_checkpoints_csv(committed)}
    assert kept == {(0, None), (500, 9.2)}
    moved = {(r["updates"], r["valid_mlm_loss"]) for r in rows.read_checkpoints_csv(lost)}
    assert moved == {(500, 9.1235), (1000, 8.5)}
    assert rows.missing([_row("mlm", 6, 10500, 6.0)])[:2] == ["taco-seed6", "taco-branch-seed6"]


def test_rows_followed_are_committed_as_they_come_until_the_seed_is_done(tmp_path):
    """``rows.py follow``: each round merges the seed's new rows and commits the CSV alone (a
    file the user changed beside it stays uncommitted), and it stops once the seed's three
    runs have their last rows."""
    import subprocess

    rows = _rows_script()
    repo = tmp_path / "repo"
    repo.mkdir()
    git = lambda *args: subprocess.run(["git", *args], cwd=repo, check=True,
                                       capture_output=True, text=True).stdout
    git("init", "-q")
    git("config", "user.email", "t@example.org")
    git("config", "user.name", "t")
    (repo / "notes.md").write_text("a user's work in progress\n")
    committed, lost = repo / "checkpoints.csv", repo / "lost.csv"
    out = measured_out(tmp_path / "seed7", [_row("mlm", 7, 0, None), _row("mlm", 7, 500, 9.0)])
    ends = [_row(o, 7, last, 6.5) for o, last in rows.LAST_UPDATES.items()]
    rounds = []

    def sleep(seconds):  # the runs go on between rounds: the last rows come in round 3
        rounds.append(seconds)
        if len(rounds) == 2:
            for row in ends:
                (out / "measures" / f"{rows.checkpoint_name(row)}.json").write_text(
                    json.dumps(row))

    assert rows.follow(out, 7, 60, committed, lost, sleep) == 2  # round 2 had nothing new
    assert rounds == [60, 60]
    log = git("log", "--format=%s").splitlines()
    assert log == ["promise-study: seed 7's rows as measured (5 rows)",
                   "promise-study: seed 7's rows as measured (2 rows)"]
    assert git("status", "--porcelain") == "?? notes.md\n"
    with pytest.raises(SystemExit) as error:  # follow reads the seed from run.sh's OUT/seedS
        rows.main(["follow", str(tmp_path / "elsewhere")])
    assert error.value.code == 2


def test_posthoc_describes_exits_mlms_reach_and_peaks(analysis, monkeypatch):
    """docs/results/promise-study/posthoc.py on made-up rows: the first checkpoints past the
    exit ratio, MLM's interpolated updates to TACO(TACO_END)'s values (against numpy's
    interpolation of MLM's rising curve), its part-of-speech peak and the share after B."""
    monkeypatch.syspath_prepend(str(REPO / "docs" / "results" / "promise-study"))
    posthoc = SimpleNamespace(**runpy.run_path(
        str(REPO / "docs" / "results" / "promise-study" / "posthoc.py")))
    study = analysis.Study(_rows(q1=(-3.0, 0.6, 0.3, 0.08)))
    for i, seed in enumerate(SEEDS):
        assert posthoc.first_exit(study, "mlm", seed) == pytest.approx(
            (MIDDLE, 0.3, 0.3 / 0.087, 8.4 + 0.02 * (seed - 8)))
        assert posthoc.first_exit(study, "taco", seed)[0] == EARLY
        for key in ("pos_accuracy_ambiguous", "mlm_loss_wikitext2"):
            updates, values = study.curve(key, "mlm", seed, N)
            sign = 1 if key.startswith("pos") else -1
            target = study.value(key, "taco", TACO_END, seed)
            assert posthoc.mlm_reach(study, key, seed, target) == pytest.approx(
                np.interp(sign * target, sign * np.array(values), updates))
            assert TACO_BEFORE < posthoc.mlm_reach(study, key, seed, target) < N
            # without the checkpoint MLM first reaches it at, the line to the next one
            reach = posthoc.mlm_reach(study, key, seed, target)
            after = min(u for u in updates if u >= reach)
            kept = [i for i, u in enumerate(updates) if u != after]
            assert posthoc.mlm_reach(study, key, seed, target, without=(after,)) == (
                pytest.approx(np.interp(sign * target, sign * np.array(values)[kept],
                                        np.array(updates)[kept])))
            assert posthoc.mlm_reach(study, key, seed, target, without=(after,)) != (
                pytest.approx(reach))
    assert posthoc.mlm_reach(study, "pos_accuracy_ambiguous", 8, 99.0) is None
    text = posthoc.report(study)
    branch_minus_mlm = (study.value("pos_accuracy_ambiguous", "taco-branch", BRANCH_END, 7)
                        - study.value("pos_accuracy_ambiguous", "mlm", BRANCH_END, 7))
    assert f"## At {BRANCH_END:,} updates: branch − MLM" in text
    assert f"\n| 7 | {branch_minus_mlm:+.2f} | " in text
    assert f"| 8 | 76.00 | {N:,} |" in text  # MLM's POS is highest at N in every seed
    assert f"| {B:,} | {0.7 / 0.087:.2f} | 6 |  |  |" in text
    assert f"| {BRANCH_MID:,} |  |  | {0.8 / 0.087:.2f} | 6 |" in text  # no MLM checkpoint
    assert f"| {BRANCH_END:,} | {0.75 / 0.087:.2f} | 6 | {0.8 / 0.087:.2f} | 6 |" in text
