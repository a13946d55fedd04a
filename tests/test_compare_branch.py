"""taco-compare's branch (``--branch-update B``): an objective continuing the baseline's run from
its checkpoint at B with the baseline's optimizer state, schedule and data position, and the
fairseq patch that lets the optimizer state cross the change of criterion
(:func:`taco_fairseq.resume.keep_optimizer_across_objectives`)."""

import json
import logging
import re

import pytest
import torch

from taco_fairseq.comparison import pretraining
from taco_fairseq.comparison.pretraining import (
    PretrainRun,
    PretrainSettings,
    pretrain,
    pretrain_args,
    validation_metrics,
)
from taco_fairseq.resume import keep_optimizer_across_objectives

from conftest import SHARED, run_fairseq, train_args


def _settings(**changes) -> PretrainSettings:
    values = dict(data=SHARED, arch="roberta_tiny", max_update=40,
                  checkpoint_updates=(10, 20, 30, 40), warmup_updates=1,
                  objective_max_update=(("taco", 20), ("taco-branch", 30)), branch=("mlm", 20))
    values.update(changes)
    return PretrainSettings(**values)


def test_a_branch_keeps_the_checkpoints_after_its_start():
    settings = _settings()
    assert settings.checkpoint_updates_of("mlm") == (10, 20, 30, 40)
    assert settings.checkpoint_updates_of("taco") == (10, 20)
    assert settings.checkpoint_updates_of("taco-branch") == (30,)
    assert settings.max_update_of("taco-branch") == 30
    branch = PretrainRun("taco-branch", 3)
    assert (branch.is_branch, branch.recipe, branch.name) == (True, "taco", "taco-branch-seed3")
    assert settings.branch_source(branch) == (PretrainRun("mlm", 3), 20)
    with pytest.raises(ValueError, match="taco-seed3 is not a branch"):
        settings.branch_source(PretrainRun("taco", 3))


@pytest.mark.parametrize("changes, message", [
    (dict(branch=("mlm", 25)), "--branch-update 25 is not among --checkpoint-updates"),
    (dict(objective_max_update=(("taco-branch", 20),)),
     "--objective-max-update taco-branch=20: not after --branch-update 20"),
    (dict(objective_max_update=(("mlm", 20),)), "the baseline mlm stops at 20"),
])
def test_branch_settings_that_cannot_run_are_refused(changes, message):
    with pytest.raises(ValueError, match=message):
        _settings(**changes)


def test_a_branch_continues_the_baselines_checkpoint_on_its_own_recipe(tmp_path):
    settings = _settings()
    pretrain_dir = tmp_path / "pretrain"
    branch_dir = pretrain_dir / "taco-branch-seed1"
    args = pretrain_args(PretrainRun("taco-branch", 1), settings, branch_dir)
    assert args[args.index("--task") + 1] == "taco_masked_lm"
    assert args[args.index("--criterion") + 1] == "taco"
    assert args[args.index("--max-update") + 1] == "30"
    assert args[args.index("--total-num-update") + 1] == "40"  # the baseline's schedule
    assert "--tc-allow-changed-objective" in args
    # before the baseline has saved it, its epoch is not known
    expected = pretrain_dir / "mlm-seed1" / "checkpoints" / "checkpoint_*_20.pt"
    assert args[args.index("--continue-once") + 1] == str(expected)
    saved = pretrain_dir / "mlm-seed1" / "checkpoints" / "checkpoint_2_20.pt"
    saved.parent.mkdir(parents=True)
    saved.write_bytes(b"")
    args = pretrain_args(PretrainRun("taco-branch", 1), settings, branch_dir)
    assert args[args.index("--continue-once") + 1] == str(saved)
    for run in (PretrainRun("mlm", 1), PretrainRun("taco", 1)):
        args = pretrain_args(run, settings, pretrain_dir / run.name)
        assert "--continue-once" not in args and "--tc-allow-changed-objective" not in args


def test_a_branch_waits_for_its_start_while_the_baseline_trains(tmp_path, monkeypatch):
    settings = _settings()
    branch = PretrainRun("taco-branch", 1)
    with pytest.raises(RuntimeError, match=r"taco-branch-seed1 starts from mlm-seed1's "
                       r"checkpoint at 20 updates, which does not exist .*pre-train mlm-seed1"):
        pretrain(branch, settings, tmp_path)
    assert not (tmp_path / "pretrain" / branch.name).exists()  # nothing started

    monkeypatch.setattr(pretraining, "BRANCH_POLL_SECONDS", 0.0)
    looks = []

    def baseline_running():  # the baseline saves its checkpoint at the second look
        looks.append(1)
        if len(looks) == 2:
            saved = tmp_path / "pretrain" / "mlm-seed1" / "checkpoints" / "checkpoint_1_20.pt"
            saved.parent.mkdir(parents=True)
            saved.write_bytes(b"")
        return True

    trained = []
    monkeypatch.setattr(pretraining, "_train", lambda run, *args: trained.append(run))
    pretrain(branch, settings, tmp_path, source_running=baseline_running)
    assert trained == [branch] and len(looks) == 2

    # the baseline saves B and ends between the branch's two looks: no false error
    other = PretrainRun("taco-branch", 2)
    saved = tmp_path / "pretrain" / "mlm-seed2" / "checkpoints" / "checkpoint_1_20.pt"

    def baseline_just_ended():
        saved.parent.mkdir(parents=True)
        saved.write_bytes(b"")
        return False

    pretrain(other, settings, tmp_path, source_running=baseline_just_ended)
    assert trained == [branch, other]


def test_the_last_checkpoint_of_a_branch_is_finetuned_on_the_final_tasks(tmp_path, monkeypatch):
    """Phase 4 fine-tunes each run's last checkpoint on --final-tasks, a branch's too."""
    from taco_fairseq.comparison import study
    from taco_fairseq.comparison.study import StudyCheckpoint, StudyOptions
    from taco_fairseq.glue.recipes import Hyperparameters

    options = StudyOptions(out=tmp_path, objectives=["mlm", "taco"], pretrain_seeds=[1],
                           settings=_settings(), glue_data=tmp_path, tasks=[],
                           final_tasks=["RTE"], seeds=[1], points=[])
    found = [StudyCheckpoint(run, u, tmp_path / f"{run.name}@{u}.pt") for run in options.runs
             for u in options.settings.checkpoint_updates_of(run.objective)]
    queued = []
    monkeypatch.setattr(study, "run_all", lambda runs, *args: queued.extend(runs) or [])
    study.finetune_all(options, found, {"RTE": Hyperparameters(32, 1e-5, 1)})
    assert sorted(r.checkpoint.name for r in queued) == [
        "mlm-seed1@40", "taco-branch-seed1@30", "taco-seed1@20"]


def test_the_study_runs_a_branch_of_every_objective_but_the_baseline(tmp_path, monkeypatch):
    from taco_fairseq.comparison import study
    from taco_fairseq.comparison.study import StudyOptions

    options = StudyOptions(out=tmp_path, objectives=["mlm", "taco"], pretrain_seeds=[1, 2],
                           settings=_settings(), glue_data=tmp_path, tasks=[], seeds=[],
                           points=[])
    assert options.arms == ["mlm", "taco", "taco-branch"]
    assert [r.name for r in options.runs] == ["mlm-seed1", "mlm-seed2", "taco-seed1",
                                              "taco-seed2", "taco-branch-seed1",
                                              "taco-branch-seed2"]
    saved = []
    monkeypatch.setattr(study, "save_initialization",
                        lambda run, settings, run_dir: saved.append(run.name) or run_dir)
    initial = study.initial_checkpoints(options)
    assert [c.name for c in initial] == ["mlm-seed1@0", "mlm-seed2@0", "taco-seed1@0",
                                         "taco-seed2@0"]
    assert not any("branch" in name for name in saved)


def test_a_branch_continued_from_another_update_names_the_option_the_user_gave(tmp_path):
    """A rerun with another --branch-update changes the branch's --continue-once, which the
    user never typed: the error names both."""
    from taco_fairseq.comparison.pretraining import check_same_options, pretrain_args

    branch = PretrainRun("taco-branch", 1)
    run_dir = tmp_path / "pretrain" / branch.name
    run_dir.mkdir(parents=True)
    started = pretrain_args(branch, _settings(), run_dir)
    (run_dir / "train.log").write_text("# fairseq-train " + " ".join(started) + "\n")
    with pytest.raises(ValueError, match=r"--continue-once .*_20\.pt → .*_10\.pt, from "
                       r"taco-compare's --branch-update"):
        check_same_options(run_dir, pretrain_args(branch, _settings(branch=("mlm", 10)),
                                                  run_dir))


def test_the_report_lists_the_arms_in_their_declared_order_however_the_rows_come(tmp_path):
    """A run hands the report its rows as they were measured, --report-only as they are read
    back (by file name: taco-branch before taco); both give one report, the branch last."""
    from taco_fairseq.comparison.run import write_report
    from taco_fairseq.comparison.study import StudyOptions

    options = StudyOptions(out=tmp_path, objectives=["mlm", "taco"], pretrain_seeds=[1, 2, 3],
                           settings=_settings(), glue_data=tmp_path, tasks=[], seeds=[],
                           points=[], primary_endpoint="pos-ambiguous")
    rows = [{"objective": o, "pretrain_seed": s, "updates": u,
             "pos_accuracy_ambiguous": 70.0 + s * s + u / 10 + len(o)}
            for o in options.arms for s in options.pretrain_seeds
            for u in options.settings.checkpoint_updates_of(o)]
    reports = []
    by_file_name = sorted(rows, key=lambda r: f"{r['objective']}-seed{r['pretrain_seed']}")
    assert by_file_name[0]["objective"] == "mlm" and by_file_name[-1]["objective"] == "taco"
    for order in (rows, by_file_name):
        write_report(options, ["Command: `taco-compare`"], order, [], {})
        reports.append((tmp_path / "report.md").read_text())
    assert reports[0] == reports[1]
    primary = reports[0].split("## Wall time")[0]
    assert primary.index("taco@20 − mlm@40") < primary.index("taco-branch@30 − mlm@40")


def test_the_neighbour_share_of_each_validation_is_read_from_the_log(tmp_path):
    records = [
        {"epoch": 1, "valid_loss": "9.1", "valid_neighbour_share": "0.06",
         "valid_neighbour_share_uniform": "0.0614", "valid_num_updates": "500"},
        {"epoch": 1, "valid_loss": "9.0", "valid_num_updates": "1000"},  # --no-neighbour-share
        {"epoch": 1, "valid_mlm_loss": "7.5", "valid_loss": "8.9",
         "valid_neighbour_share": "0.3", "valid_neighbour_share_uniform": "0.0614",
         "valid_num_updates": "1500"},
    ]
    (tmp_path / "train.log").write_text("".join(
        f"2026-12-07 01:00:00 | INFO | valid | {json.dumps(r)}\n" for r in records))
    assert validation_metrics(tmp_path) == {
        500: {"valid_mlm_loss": 9.1, "neighbour_share": 0.06, "neighbour_share_uniform": 0.0614},
        1000: {"valid_mlm_loss": 9.0},
        1500: {"valid_mlm_loss": 7.5, "neighbour_share": 0.3, "neighbour_share_uniform": 0.0614},
    }


class TacoLoss(torch.nn.Module):
    """Stands for a criterion without parameters (named as the plugin's)."""


class WithParameters(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(1))


def test_the_optimizer_state_crosses_a_change_of_criterion_without_parameters(caplog):
    state = {"optimizer_history": [{"criterion_name": "MlmLoss", "num_updates": 20}]}
    with caplog.at_level(logging.WARNING):
        keep_optimizer_across_objectives(state, TacoLoss())
    assert state["optimizer_history"][-1] == {"criterion_name": "TacoLoss", "num_updates": 20}
    assert "saved with criterion MlmLoss, continue with TacoLoss" in caplog.text
    # a criterion with parameters of its own is left to fairseq's check
    state = {"optimizer_history": [{"criterion_name": "MlmLoss", "num_updates": 20}]}
    keep_optimizer_across_objectives(state, WithParameters())
    assert state["optimizer_history"][-1]["criterion_name"] == "MlmLoss"
    keep_optimizer_across_objectives({"optimizer_history": []}, TacoLoss())  # nothing to do


@pytest.mark.slow
def test_taco_continues_an_mlm_run_with_its_optimizer_schedule_and_data(tiny_databin, tmp_path):
    """fairseq-train refuses another criterion's optimizer state ("Criterion does not match");
    with --tc-allow-changed-objective, TACO continues an MLM checkpoint as MLM itself would:
    Adam's step count and the learning rate at every update go on from the checkpoint's."""
    mlm = ["--task", "masked_lm", "--criterion", "mlm"]
    mlm_dir, branch_dir = tmp_path / "mlm", tmp_path / "branch"
    run_fairseq("fairseq-train", *train_args(tiny_databin, mlm_dir, *mlm,
                                             "--max-update", "10", "--log-interval", "1"))
    start = mlm_dir / "checkpoint_1_10.pt"
    assert start.is_file()
    refused = run_fairseq("fairseq-train", *train_args(
        tiny_databin, branch_dir, "--continue-once", start, "--log-interval", "1"), check=False)
    assert refused.returncode != 0 and "another objective" in refused.stdout
    branch = run_fairseq("fairseq-train", *train_args(
        tiny_databin, branch_dir, "--continue-once", start, "--tc-allow-changed-objective",
        "--log-interval", "1"))
    assert f"Loaded checkpoint {start} (epoch 1 @ 10 updates)" in branch.stdout
    # MLM itself, continued from the same checkpoint
    continued = run_fairseq("fairseq-train", *train_args(
        tiny_databin, mlm_dir, *mlm, "--max-update", "20", "--log-interval", "1"))

    def records(output):
        return [json.loads(line.split("| train_inner | ", 1)[1])
                for line in output.splitlines() if "| train_inner |" in line]

    def lr_by_update(output):
        return {int(r["num_updates"]): r["lr"] for r in records(output)}

    def logged(output, update, key):
        (value,) = [r[key] for r in records(output) if int(r["num_updates"]) == update]
        return value

    assert set(lr_by_update(branch.stdout)) == set(range(11, 21))
    assert lr_by_update(branch.stdout) == lr_by_update(continued.stdout)
    # the data position: update 11, computed from the checkpoint's weights before any TACO
    # step, sees the same batch, masks and dropout as MLM's own update 11
    assert (logged(branch.stdout, 11, "mlm_loss") == logged(continued.stdout, 11, "mlm_loss")
            != logged(continued.stdout, 12, "mlm_loss"))
    saved = torch.load(branch_dir / "checkpoint_last.pt", weights_only=False)
    adam_steps = {int(s["step"]) for s in saved["last_optimizer_state"]["state"].values()}
    assert adam_steps == {20}  # 10 of MLM's, 10 of TACO's: the moments were kept
    assert saved["optimizer_history"][-1]["criterion_name"] == "TacoLoss"


def _branch_argv(tmp_path, *extra):
    data = tmp_path / "bin"
    data.mkdir(exist_ok=True)
    (data / "dict.txt").write_text("a 1\n")
    return [str(a) for a in (
        "--data", data, "--glue-data", tmp_path / "glue", "--out", tmp_path / "out",
        "--arch", "roberta_tiny", "--max-update", "40", "--checkpoint-updates", "10", "20", "30",
        "40", "--no-probes", "--primary-endpoint", "pos-ambiguous",
        "--conllu-train", SHARED / "data/ud-english-ewt/en_ewt-ud-dev.conllu",
        "--conllu-test", SHARED / "data/ud-english-ewt/en_ewt-ud-test.conllu", *extra)]


def test_the_branch_options_are_read_and_recorded(tmp_path):
    from taco_fairseq.cli import compare
    from taco_fairseq.comparison.record import StudyRecord, read_record

    options, _ = compare.parse_options(_branch_argv(
        tmp_path, "--objectives", "mlm", "taco", "--branch-update", "20",
        "--objective-max-update", "taco=20", "taco-branch=30"))
    assert options.settings.branch == ("mlm", 20)
    assert options.settings.objective_max_update == (("taco", 20), ("taco-branch", 30))
    assert options.arms == ["mlm", "taco", "taco-branch"]
    (tmp_path / "out").mkdir()
    record = StudyRecord(options, "taco-compare ...")
    record.write()
    recorded = read_record(tmp_path / "out", None).options.settings
    assert (recorded.branch, recorded.objective_max_update) == (("mlm", 20), (("taco", 20),
                                                                             ("taco-branch", 30)))


@pytest.mark.parametrize("extra, message", [
    (["--objectives", "mlm", "--branch-update", "20"],
     "--branch-update with one objective \\(mlm\\)"),
    (["--objectives", "mlm", "mlm_tp", "--branch-update", "20"],
     "objective mlm_tp is not of the taco_masked_lm task"),
    (["--objectives", "mlm", "taco", "--branch-update", "25"],
     "--branch-update 25 is not among --checkpoint-updates"),
    (["--objectives", "mlm", "taco", "--objective-max-update", "taco-branch=30"],
     "taco-branch is not among the runs' objectives mlm taco \\(a branch: add --branch-update"),
    (["--objectives", "mlm", "taco_untied", "--branch-update", "20"],
     "objective taco_untied builds another model than the baseline mlm"),
    (["--objectives", "mlm", "taco_frozen_embeddings", "--branch-update", "20"],
     "objective taco_frozen_embeddings builds another model"),
    (["--objectives", "mlm", "taco", "--branch-update", "20", "--",
      "--tc-allow-changed-objective"], "--tc-allow-changed-objective after -- would override"),
])
def test_branch_options_that_cannot_run_are_named_before_anything_runs(tmp_path, capsys, extra,
                                                                       message):
    from taco_fairseq.cli import compare

    with pytest.raises(SystemExit):
        compare.parse_options(_branch_argv(tmp_path, *extra))
    last = capsys.readouterr().err.strip().splitlines()[-1]  # after argparse's usage
    assert re.search(f"error: .*{message}", last), last


def test_ctrl_c_ends_taco_compare_in_one_line(tmp_path, monkeypatch, capsys):
    from taco_fairseq.cli import compare
    from taco_fairseq.comparison import run

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(run, "run_study", interrupted)
    with pytest.raises(SystemExit) as stop:
        compare.main(_branch_argv(tmp_path, "--objectives", "mlm", "taco"))
    assert stop.value.code == 130
    err = capsys.readouterr().err.strip()
    assert err.splitlines()[-1].startswith("taco-compare: interrupted; run the same command "
                                           "again to continue the study in")
    assert "Traceback" not in err
