"""The GLUE runner end to end: a tiny TACO checkpoint fine-tuned on RTE, MRPC, CoLA and STS-B
for a few updates; saved predictions align with the TSV files and give the reported metrics;
finished runs are skipped; test-set predictions; bad checkpoints are errors."""

import dataclasses
import json
import math
import re
from pathlib import Path

import pytest
import torch
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from fairseq import options

from conftest import USER_DIR, run_fairseq, run_script
from taco_fairseq.analysis.training_log import parse_json_log
from taco_fairseq.metadata import DICTIONARY_KEY, SENTENCEPIECE_KEY
from taco_fairseq.glue.databin import GluePrepOptions, prepare_glue
from taco_fairseq.cli.glue_options import parse_update_caps
from taco_fairseq.glue.predict import FinetunedModel, read_predictions
from taco_fairseq.glue.pretrained import (
    PretrainedCheckpoint,
    check_compatible,
    inspect_checkpoint,
)
from taco_fairseq.glue.recipes import (
    RECIPES_DIR,
    SIZES,
    Hyperparameters,
    default_point,
    finetune_args,
    load_recipe,
    recipe_path,
    selection_metric,
)
from taco_fairseq.glue.runner import RunnerOptions, plan_runs, run_all, run_settings
from taco_fairseq.glue.tasks import TASKS as GLUE_TASKS
from taco_fairseq.glue.tasks import get_task, get_tasks
from taco_fairseq.glue.tsv import read_split

TASKS = ("RTE", "MRPC", "CoLA", "STS-B")
POINT = "bs16_lr0.001_ep1"


def independent(metric, predicted, gold):
    """scikit-learn / scipy on the saved predictions, in points."""
    return 100 * {
        "accuracy": lambda: accuracy_score(gold, predicted),
        "f1": lambda: f1_score(gold, predicted, pos_label="1"),
        "mcc": lambda: matthews_corrcoef(gold, predicted),
        "pearson": lambda: pearsonr(predicted, gold)[0],
        "spearman": lambda: spearmanr(predicted, gold)[0],
    }[metric]()


def test_runner_end_to_end(glue_databin, glue_data, trained_checkpoint, tmp_path):
    out = tmp_path / "runs"
    args = ["--checkpoints", f"tiny={trained_checkpoint / 'checkpoint_last.pt'}",
            "--data", glue_databin, "--out", out, "--tasks", *TASKS, "--seeds", "1",
            "--batch-sizes", "16", "--lrs", "1e-3", "--epochs", "1", "--cpu",
            "--", "--max-update", "3", "--num-workers", "0"]
    result = run_script("run_glue.py", *args)
    assert result.returncode == 0, result.stderr[-3000:]

    for name in TASKS:
        task = get_task(name)
        run_dir = out / "tiny" / name / POINT / "seed1"
        metrics = json.loads((run_dir / "metrics.json").read_text())
        assert metrics["settings"]["task"] == name and metrics["pretraining_updates"] == 20
        assert "--restore-file" in metrics["command"]
        column = task.eval_sets[0].column
        predictions = read_predictions(run_dir / f"predictions_{column}.tsv", task.regression)
        # aligned with the dev file: row i of the predictions is row i of dev.tsv
        dev = read_split(glue_data / name / task.splits["valid"].file, task.splits["valid"],
                         task.labels)
        assert predictions.indices == [str(i) for i in range(len(dev))]
        expected_gold = [float(x) for x in dev.labels] if task.regression else dev.labels
        assert predictions.gold == expected_gold
        for metric in task.metrics:
            value = independent(metric, predictions.predicted, predictions.gold)
            assert metrics["dev"][column][metric] == pytest.approx(value, rel=1e-12), metric
        # the selection metric fairseq logged, rounded to 0.1 points, agrees
        metric = selection_metric(task)
        selected = metrics["fairseq_valid"][f"valid_{metric}"]
        assert selected == pytest.approx(metrics["dev"][column][metric], abs=0.05)
        assert (run_dir / "checkpoint_best.pt").is_file()

    table = [line for line in result.stdout.splitlines() if line.startswith("|")]
    assert len(table) == 3
    assert table[0].startswith("| checkpoint | RTE (acc) | MRPC (F1) | CoLA (acc) | STS-B ")
    assert table[2].startswith("| tiny |") and (out / "summary.csv").is_file()
    assert (out / "summary.md").read_text().strip() == "\n".join(table)

    # started again: every run is finished, nothing is trained
    log = out / "tiny" / "RTE" / POINT / "seed1" / "train.log"
    before = log.stat().st_mtime_ns
    again = run_script("run_glue.py", *args)
    assert again.returncode == 0 and again.stdout.count("(finished before)") == 4
    assert log.stat().st_mtime_ns == before

    submission = tmp_path / "submission"
    result = run_script("predict_glue_test.py", out, "--output-dir", submission, "--cpu")
    assert result.returncode == 0, result.stderr[-3000:]
    for name, rows in (("RTE", 3000), ("MRPC", 1725), ("CoLA", 1063), ("STS-B", 1379)):
        task = get_task(name)
        lines = (submission / f"{name}.tsv").read_text().splitlines()
        assert lines[0] == "index\tprediction" and len(lines) == rows + 1
        test = read_split(glue_data / name / "test.tsv", task.splits["test"], task.labels)
        assert [line.split("\t")[0] for line in lines[1:]] == test.indices
        values = [line.split("\t")[1] for line in lines[1:]]
        if task.regression:
            assert all(float(v) == float(v) for v in values)
        else:
            assert set(values) <= set(task.labels)


def _finished_run(out, checkpoint, task_name, value):
    """A run's ``metrics.json`` under ``out`` as the runner writes it (every metric ``value``),
    with the single grid point POINT and seed 1; returns its contents."""
    task = get_task(task_name)
    result = {"settings": {"checkpoint": checkpoint, "task": task.name, "batch_size": 16,
                           "lr": 1e-3, "epochs": 1, "seed": 1},
              "dev": {e.column: {m: value for m in task.metrics} for e in task.eval_sets}}
    run_dir = out / checkpoint / task.name / POINT / "seed1"
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.json").write_text(json.dumps(result))
    return result


def test_the_summary_of_a_call_covers_every_finished_run_under_out(tmp_path, monkeypatch, capsys):
    """A second call into the same --out (TACO on MRPC) summarizes the first call's runs (TACO
    and MLM on CoLA) too, as taco-glue-summary OUT does."""
    from taco_fairseq.cli import glue
    from taco_fairseq.glue import runner

    out = tmp_path / "runs"
    for checkpoint in ("TACO", "MLM"):
        _finished_run(out, checkpoint, "CoLA", 50.0)

    def run_all(runs, options, jobs):  # the runs of this call finish with 70 points
        return [_finished_run(out, r.checkpoint.name, r.task.name, 70.0) for r in runs]

    monkeypatch.setattr(runner, "run_all", run_all)  # taco-glue imports it when it runs
    (tmp_path / "glue" / "MRPC").mkdir(parents=True)  # prepared, as far as taco-glue looks
    (tmp_path / "glue" / "MRPC" / "prep_info.json").write_text("{}")
    glue.main(["--checkpoints", f"TACO={tmp_path / 'taco.pt'}", "--data", str(tmp_path / "glue"),
               "--out", str(out), "--tasks", "MRPC", "--seeds", "1", "--batch-sizes", "16",
               "--lrs", "1e-3", "--epochs", "1"])
    table = (out / "summary.md").read_text().splitlines()
    assert table[0].startswith("| checkpoint | MRPC (F1) | CoLA (acc) | CoLA (MCC) |")
    assert table[2].startswith("| MLM | - | 50.00 (50.00) | 50.00 (50.00) |")  # path order
    assert table[3].startswith("| TACO | 70.00 (70.00) | 50.00 (50.00) | 50.00 (50.00) |")
    printed = capsys.readouterr().out
    assert f"summary of the 3 finished runs under {out} (1 of this call)" in printed
    assert "\n".join(table) in printed
    with open(out / "summary.csv") as f:
        assert {line.split(",")[0] for line in f.readlines()[1:]} == {"TACO", "MLM"}


def test_changed_settings_in_a_finished_run_directory_are_an_error(tmp_path, trained_checkpoint,
                                                                   glue_databin):
    run_dir = tmp_path / "tiny" / "RTE" / "bs16_lr0.001_ep1" / "seed1"
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.json").write_text(json.dumps({"settings": {"seed": 7}}))
    runs = plan_runs([PretrainedCheckpoint("tiny", trained_checkpoint / "checkpoint_last.pt")],
                     get_tasks(["RTE"]), [1], [Hyperparameters(16, 1e-3, 1)])
    with pytest.raises(ValueError, match=r"holds a finished run with other settings \(batch_size: "
                       r"None then, 16 now; .*; seed: 7 then, 1 now; task: None then, 'RTE' now\)"):
        run_all(runs, RunnerOptions(data_dir=glue_databin, out_dir=tmp_path))


def finished_rte_run(tmp_path, trained_checkpoint, glue_databin, pretraining_updates):
    """The plan of one RTE run of the tiny checkpoint, and its metrics.json as a small-recipe
    run made when the checkpoint had ``pretraining_updates``."""
    runs = plan_runs([PretrainedCheckpoint("tiny", trained_checkpoint / "checkpoint_last.pt")],
                     get_tasks(["RTE"]), [1], [Hyperparameters(16, 1e-3, 1)])
    settings = run_settings(runs[0], RunnerOptions(data_dir=glue_databin, out_dir=tmp_path))
    run_dir = tmp_path / runs[0].relative_dir
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.json").write_text(json.dumps(
        {"settings": settings, "pretraining_updates": pretraining_updates}))
    return runs, settings


def test_a_finished_run_of_a_checkpoint_that_has_changed_since_is_an_error(
        tmp_path, trained_checkpoint, glue_databin):
    """The same checkpoint path (e.g. checkpoint_last.pt of a run that went on) with more
    updates than when the run was made is not taken for the finished run."""
    runs, _ = finished_rte_run(tmp_path, trained_checkpoint, glue_databin, 10)
    with pytest.raises(ValueError, match=r"holds a finished run of .*checkpoint_last.pt when it "
                       r"had 10 pre-training updates; it has 20 now"):
        run_all(runs, RunnerOptions(data_dir=glue_databin, out_dir=tmp_path))


def test_a_finished_run_of_another_recipe_is_not_reused(tmp_path, trained_checkpoint,
                                                        glue_databin):
    """A --recipe base run where a small run (recorded without a recipe) finished is an error,
    not the small run's result."""
    runs, settings = finished_rte_run(tmp_path, trained_checkpoint, glue_databin, 20)
    assert "recipe" not in settings  # as the runs made before it was recorded
    with pytest.raises(ValueError, match=r"holds a finished run with other settings \(recipe: "
                       r"'small' then, 'base' now\)"):
        run_all(runs, RunnerOptions(data_dir=glue_databin, out_dir=tmp_path, recipe="base"))


def rte_with(databin, tmp_path, dict_lines):
    """A tiny RTE prepared with ``databin``, then given a modified ``input0/dict.txt`` (the
    preparation itself refuses a dict.txt that does not fit its SentencePiece model)."""
    glue = tmp_path / "glue" / "RTE"
    glue.mkdir(parents=True)
    for name in ("train.tsv", "dev.tsv"):
        (glue / name).write_text("index\tsentence1\tsentence2\tlabel\n0\tA b.\tC d.\tentailment\n")
    prepare_glue(GluePrepOptions(glue_dir=tmp_path / "glue", pretraining_data=databin,
                                 destdir=tmp_path / "bin"))
    (tmp_path / "bin" / "RTE" / "input0" / "dict.txt").write_text("".join(dict_lines))
    return tmp_path / "bin"


def check(trained_checkpoint, data_dir, tmp_path, checkpoint_file="checkpoint_last.pt",
          pretraining_data=None):
    runs = plan_runs([PretrainedCheckpoint("tiny", trained_checkpoint / checkpoint_file)],
                     get_tasks(["RTE"]), [1], [Hyperparameters(16, 1e-3, 1)])
    run_all(runs, RunnerOptions(data_dir=data_dir, out_dir=tmp_path / "runs",
                                pretraining_data=pretraining_data))


def test_a_dictionary_that_differs_from_the_checkpoints_is_an_error(
        tiny_databin, trained_checkpoint, tmp_path):
    lines = (tiny_databin / "dict.txt").read_text().splitlines(keepends=True)
    swapped = lines[:10] + [lines[11], lines[10]] + lines[12:]  # same size, two ids swapped
    data = rte_with(tiny_databin, tmp_path / "swapped", swapped)
    with pytest.raises(ValueError, match=(
            r"trained with another dictionary \(2001 symbols\) than "
            rf"{re.escape(str(data / 'RTE' / 'input0' / 'dict.txt'))} \(2001 symbols\).* "
            "Prepare the GLUE data with the data-bin the checkpoint was pre-trained on")):
        check(trained_checkpoint, data, tmp_path)
    data = rte_with(tiny_databin, tmp_path / "shorter", lines[:-1])
    with pytest.raises(ValueError, match=r"another dictionary \(2001 symbols\) than .* \(2000"):
        check(trained_checkpoint, data, tmp_path)
    # the right dict.txt, encoded with another SentencePiece model (as prep_info.json records)
    data = rte_with(tiny_databin, tmp_path / "other-model", lines)
    info = json.loads((data / "RTE" / "prep_info.json").read_text())
    info["sentencepiece_sha256"] = "0" * 64
    (data / "RTE" / "prep_info.json").write_text(json.dumps(info))
    with pytest.raises(ValueError, match=(
            r"trained with another SentencePiece model than .*/sentencepiece.bpe.model \(which "
            rf"encoded {re.escape(str(data / 'RTE'))}\)")):
        check(trained_checkpoint, data, tmp_path)
    assert not (tmp_path / "runs").exists()  # nothing started
    result = run_script("run_glue.py", "--checkpoints", trained_checkpoint / "checkpoint_last.pt",
                        "--data", data, "--out", tmp_path / "runs", "--tasks", "RTE", "--dry-run")
    assert result.returncode == 1 and "another SentencePiece model" in result.stderr


def test_finetuned_checkpoints_record_and_check_the_fingerprints(
        tiny_databin, trained_checkpoint, glue_databin, tmp_path):
    """A fine-tuning records the pre-training checkpoint's dictionary and SentencePiece
    fingerprints, so that the loaders of fine-tuned checkpoints can check them too."""
    pretrained = trained_checkpoint / "checkpoint_last.pt"
    run_fairseq(
        "fairseq-train", glue_databin / "RTE", "--user-dir", USER_DIR, "--task",
        "sentence_prediction", "--criterion", "sentence_prediction_summable", "--num-classes",
        "2", "--init-token", "0", "--separator-token", "2", "--arch", "roberta_tiny",
        "--max-positions", "64", "--shorten-method", "truncate", "--restore-file", pretrained,
        "--reset-optimizer", "--reset-dataloader", "--reset-meters", "--optimizer", "adam",
        "--lr", "1e-5", "--batch-size", "8", "--max-update", "1", "--cpu", "--num-workers", "0",
        "--disable-validation", "--save-dir", tmp_path / "run")
    recorded = torch.load(pretrained, weights_only=True)["task_state"]
    finetuned = tmp_path / "run" / "checkpoint_last.pt"
    state = torch.load(finetuned, weights_only=True)["task_state"]
    for key in (DICTIONARY_KEY, SENTENCEPIECE_KEY):
        assert state[key] == recorded[key], key
    FinetunedModel(finetuned, glue_databin / "RTE", cpu=True)  # its own data: loads
    lines = (tiny_databin / "dict.txt").read_text().splitlines(keepends=True)
    swapped = rte_with(tiny_databin, tmp_path / "swapped", lines[:10] + [lines[11], lines[10]]
                       + lines[12:])
    with pytest.raises(ValueError, match=rf"{re.escape(str(finetuned))} was trained with another "
                                         r"dictionary \(2001 symbols\)"):
        FinetunedModel(finetuned, swapped / "RTE", cpu=True)


def test_preparation_checks_the_data_bin_against_the_checkpoint(tiny_databin, trained_checkpoint,
                                                               glue_data, tmp_path):
    lines = (tiny_databin / "dict.txt").read_text().splitlines(keepends=True)
    other = tmp_path / "other-databin"
    other.mkdir()
    (other / "sentencepiece.bpe.model").symlink_to(tiny_databin / "sentencepiece.bpe.model")
    (other / "dict.txt").write_text("".join(lines[:10] + [lines[11], lines[10]] + lines[12:]))
    result = run_script("prepare_glue.py", "--glue-dir", glue_data, "--tasks", "RTE",
                        "--pretraining-data", other, "--destdir", tmp_path / "bin",
                        "--checkpoint", trained_checkpoint / "checkpoint_last.pt")
    assert result.returncode == 1
    assert f"was trained with another dictionary (2001 symbols) than {other / 'dict.txt'}" in (
        result.stderr)
    assert "Give the data-bin it was pre-trained on as --pretraining-data." in result.stderr
    assert not (tmp_path / "bin").exists()


def test_without_the_pretraining_data_only_the_size_is_checked(glue_databin, trained_checkpoint,
                                                              tmp_path, caplog):
    """A checkpoint without a dictionary fingerprint (e.g. fairseq's masked_lm)."""
    checkpoint = tmp_path / "stock.pt"
    state = torch.load(trained_checkpoint / "checkpoint_last.pt", weights_only=True)
    del state["task_state"]
    torch.save(state, checkpoint)
    info = inspect_checkpoint(checkpoint)
    assert (info.arch, info.max_positions, info.embedding_rows, info.num_updates) == (
        "roberta_tiny", 64, 2001, 20)
    moved = dataclasses.replace(info, data=tmp_path / "gone")  # the recorded data-bin is gone
    check_compatible(checkpoint, moved, glue_databin / "RTE", pretraining_data=None)
    assert "only the dictionary size matched" in caplog.text


def test_a_given_pretraining_data_must_be_the_checkpoints(tiny_databin, glue_databin,
                                                         trained_checkpoint, tmp_path):
    checkpoint = trained_checkpoint / "checkpoint_last.pt"
    info = inspect_checkpoint(checkpoint)
    check_compatible(checkpoint, info, glue_databin / "RTE", pretraining_data=tiny_databin)
    with pytest.raises(FileNotFoundError, match=rf"--pretraining-data {re.escape(str(tmp_path))}: "
                       "no dict.txt there"):
        check_compatible(checkpoint, info, glue_databin / "RTE", pretraining_data=tmp_path)
    lines = (tiny_databin / "dict.txt").read_text().splitlines(keepends=True)
    (tmp_path / "dict.txt").write_text("".join(lines[:10] + [lines[11], lines[10]] + lines[12:]))
    with pytest.raises(ValueError, match=r"another dictionary \(2001 symbols\) than "
                       r"--pretraining-data's .*dict.txt \(2001 symbols\).*Give the data-bin it "
                       "was pre-trained on, or leave --pretraining-data out"):
        check_compatible(checkpoint, info, glue_databin / "RTE", pretraining_data=tmp_path)


def test_checkpoint_names():
    assert PretrainedCheckpoint.parse("TACO=a/b.pt") == PretrainedCheckpoint("TACO", Path("a/b.pt"))
    assert PretrainedCheckpoint.parse("runs/taco_small/checkpoint_1_5000.pt").name == \
        "taco_small-checkpoint_1_5000"
    # names are directory names
    assert PretrainedCheckpoint.parse("my run/x=y.pt") == PretrainedCheckpoint("my-run-x",
                                                                               Path("y.pt"))


def test_missing_or_unreadable_checkpoints_are_errors(glue_databin, trained_checkpoint,
                                                      tmp_path):
    with pytest.raises(FileNotFoundError, match="random weights"):
        check(trained_checkpoint, glue_databin, tmp_path, checkpoint_file="checkpoint_9_999.pt")
    with pytest.raises(FileNotFoundError, match="is a directory; give a checkpoint file"):
        check(trained_checkpoint, glue_databin, tmp_path, checkpoint_file="")  # the save dir
    (tmp_path / "garbage.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="cannot be read as a checkpoint"):
        check(tmp_path, glue_databin, tmp_path, checkpoint_file="garbage.pt")
    assert not (tmp_path / "runs").exists()
    result = run_script("run_glue.py", "--checkpoints", tmp_path / "nothing.pt", "--data",
                        glue_databin, "--out", tmp_path / "runs", "--tasks", "RTE")
    assert result.returncode == 1 and "random weights" in result.stderr


def test_a_cap_of_a_task_that_is_not_finetuned_is_an_error(glue_databin, trained_checkpoint,
                                                           tmp_path):
    result = run_script("run_glue.py", "--checkpoints", trained_checkpoint / "checkpoint_last.pt",
                        "--data", glue_databin, "--out", tmp_path / "runs", "--tasks", "RTE",
                        "--max-updates", "SST-2=10", "--dry-run")
    assert result.returncode == 1
    assert result.stderr.strip() == ("error: --max-updates caps SST-2, which is not fine-tuned "
                                      "(not in --tasks: RTE)")
    with pytest.raises(ValueError, match=r"--max-updates caps RTE twice \(RTE=10, rte=20\)"):
        parse_update_caps(["RTE=10", "rte=20"], get_tasks(["RTE"]))
    result = run_script("run_glue.py", "--checkpoints", trained_checkpoint / "checkpoint_last.pt",
                        "--data", glue_databin, "--out", tmp_path / "runs", "--tasks", "RTE",
                        "--max-updates", "RTE=7", "--max-updates", "RTE=8", "--dry-run")
    assert result.returncode == 1  # two flags as one list, not the last flag silently
    assert result.stderr.strip() == "error: --max-updates caps RTE twice (RTE=7, RTE=8)"
    assert not (tmp_path / "runs").exists()


def test_caps_per_task_and_fairseqs_max_update_together_are_an_error(
        glue_databin, trained_checkpoint, tmp_path):
    result = run_script("run_glue.py", "--checkpoints", trained_checkpoint / "checkpoint_last.pt",
                        "--data", glue_databin, "--out", tmp_path / "runs", "--tasks", "RTE",
                        "--max-updates", "RTE=10", "--dry-run", "--", "--max-update", "5")
    assert result.returncode == 1
    assert result.stderr.strip().startswith(
        "error: caps per task (TASK=N) and fairseq's --max-update among the fairseq options")
    for fairseq_args in (["--max-update=5"], ["--max-update", "5"], ["--total-num-update", "5"]):
        with pytest.raises(ValueError, match="both cap the updates"):
            RunnerOptions(tmp_path, tmp_path, fairseq_args=fairseq_args, max_updates={"RTE": 10})
    # either alone is allowed
    RunnerOptions(tmp_path, tmp_path, fairseq_args=["--max-update", "5"])
    RunnerOptions(tmp_path, tmp_path, fairseq_args=["--weight-decay", "0"],
                  max_updates={"RTE": 10})
    assert not (tmp_path / "runs").exists()


def test_fp16_without_cuda_is_an_error_naming_cpu_before_any_run_directory(
        glue_databin, trained_checkpoint, tmp_path, monkeypatch):
    """taco-glue -- --fp16 on a machine without CUDA: one line naming --fp16 and taco-glue's
    --cpu, and nothing written (before: fairseq's error at the end of a failed run's log, in
    a run directory left behind)."""
    from taco_fairseq.cli import glue

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as error:
        glue.main(["--checkpoints", str(trained_checkpoint / "checkpoint_last.pt"), "--data",
                   str(glue_databin), "--out", str(tmp_path / "runs"), "--tasks", "RTE",
                   "--seeds", "1", "--", "--fp16"])
    assert str(error.value) == (
        "error: -- --fp16: this machine has no CUDA GPU, which --fp16 needs (fairseq's "
        "FP16Optimizer); leave it out and give --cpu to fine-tune and predict on the CPU, in "
        "float32")
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("option, fairseq_args", [
    ("--seed", ["--seed", "7"]), ("--lr", ["--lr=1e-3"]), ("--batch-size", ["--batch-size", "8"]),
    ("--max-sentences", ["--max-sentences", "8"]), ("--max-epoch", ["--max-epoch", "2"]),
    ("--save-dir", ["--save-dir", "x"]), ("-a", ["--fp16", "-a", "roberta_base"]),
    ("-a", ["-aroberta_base"]), ("--update-freq", ["--update-freq", "2"]),
    ("--best-checkpoint-metric", ["--best-checkpoint-metric", "loss"]),
    ("--maximize-best-checkpoint-metric", ["--maximize-best-checkpoint-metric"])])
def test_fairseq_options_the_runner_sets_per_run_are_an_error(option, fairseq_args, tmp_path):
    """They would override the runner's value while the run's directory names the runner's."""
    with pytest.raises(ValueError, match=f"^{option} among the fairseq options would override "
                       "the value the runner sets for each run"):
        RunnerOptions(tmp_path, tmp_path, fairseq_args=fairseq_args)
    RunnerOptions(tmp_path, tmp_path, fairseq_args=["--fp16", "--weight-decay", "0.01"])


def test_a_seed_or_grid_point_given_twice_is_an_error(tmp_path):
    checkpoint = [PretrainedCheckpoint("tiny", tmp_path / "checkpoint.pt")]
    point = Hyperparameters(16, 1e-3, 1)
    for seeds, points, repeated in (
            ([1, 2, 1], [point], "seeds given twice: 1"),
            ([1], [point, point], f"grid points given twice: {point.label}")):
        with pytest.raises(ValueError, match=f"^{re.escape(repeated)} "):
            plan_runs(checkpoint, get_tasks(["RTE"]), seeds, points)
    assert len(plan_runs(checkpoint, get_tasks(["RTE", "CoLA"]), [1, 2], [point])) == 4


def test_grid_options_that_would_be_ignored_are_an_error():
    from taco_fairseq.cli.glue import build_parser, grid_points

    def points(*argv):
        return grid_points(build_parser().parse_args(
            ["--checkpoints", "c.pt", "--data", "d", "--out", "o", *argv]))

    with pytest.raises(ValueError, match="--grid chooses the grid points itself: leave out --lrs"):
        points("--grid", "--lrs", "1e-4")
    with pytest.raises(ValueError, match="--sample-grid 100: the grid has 32 points"):
        points("--sample-grid", "100")
    assert len(points("--grid")) == 32 and len(points("--sample-grid", "6")) == 6
    assert len(points("--lrs", "1e-4", "2e-4")) == 2


def test_data_without_prepared_tasks_is_an_error_with_the_fix(tmp_path):
    from taco_fairseq.cli.glue import build_parser
    from taco_fairseq.cli.glue_options import selected_tasks

    def error(data):
        args = build_parser().parse_args(["--checkpoints", "c.pt", "--data", str(data), "--out",
                                          "o"])
        with pytest.raises(FileNotFoundError) as raised:
            selected_tasks(args)
        return str(raised.value)

    assert error(tmp_path / "nope") == (f"no prepared GLUE task in {tmp_path / 'nope'} (no such "
                                        "directory); --data is the --destdir of "
                                        "taco-prepare-glue")
    (tmp_path / "bin" / "RTE").mkdir(parents=True)
    assert f"in {tmp_path / 'bin' / 'RTE'}: give its parent, {tmp_path / 'bin'};" in error(
        tmp_path / "bin" / "RTE")


def test_unprepared_tasks_in_data_are_named_with_the_command_that_prepares_them(tmp_path):
    """taco-glue --data D --tasks RTE where D does not exist, holds GLUE's TSV files (the
    shared ../shared/data/glue layout) or an RTE without prep_info.json: one line naming
    --data, D, the tasks and the taco-prepare-glue command, before anything is written
    (before: "D/RTE/prep_info.json not found: prepare the task with taco-prepare-glue first",
    naming neither --data nor how; the TSV files' directory would have been the one to
    prepare)."""
    from taco_fairseq.cli import glue

    def error(data, *tasks):
        with pytest.raises(SystemExit) as raised:
            glue.main(["--checkpoints", str(tmp_path / "c.pt"), "--data", str(data), "--out",
                       str(tmp_path / "runs"), "--seeds", "1", *tasks])
        assert not (tmp_path / "runs").exists()
        return str(raised.value)

    assert error(tmp_path / "nope", "--tasks", "RTE") == (
        f"error: --data {tmp_path / 'nope'}: no such directory; prepare RTE there with "
        f"taco-prepare-glue --glue-dir GLUE --pretraining-data DATA_BIN --destdir "
        f"{tmp_path / 'nope'} --tasks RTE, or give as --data the --destdir of an earlier "
        "taco-prepare-glue")
    raw = tmp_path / "glue"
    for task in ("RTE", "CoLA"):
        (raw / task).mkdir(parents=True)
        (raw / task / "train.tsv").write_text("index\tsentence1\tsentence2\tlabel\n")
    assert error(raw) == (
        f"error: --data {raw}: it holds GLUE's TSV files of RTE CoLA, not prepared ones (no "
        f"prep_info.json); prepare them with taco-prepare-glue --glue-dir {raw} "
        "--pretraining-data DATA_BIN --destdir DESTDIR --tasks RTE CoLA and give DESTDIR as "
        "--data")
    (tmp_path / "bin" / "RTE").mkdir(parents=True)
    (tmp_path / "bin" / "CoLA").mkdir()
    (tmp_path / "bin" / "CoLA" / "prep_info.json").write_text("{}")
    assert error(tmp_path / "bin", "--tasks", "CoLA", "RTE") == (
        f"error: --data {tmp_path / 'bin'}: RTE not prepared (no prep_info.json); prepare RTE "
        f"there with taco-prepare-glue --glue-dir GLUE --pretraining-data DATA_BIN --destdir "
        f"{tmp_path / 'bin'} --tasks RTE, or give as --data the --destdir of an earlier "
        "taco-prepare-glue")


def test_negative_seeds_are_an_error(capsys):
    from taco_fairseq.cli.glue import build_parser

    with pytest.raises(SystemExit):  # fairseq's numpy seeding needs seeds >= 0
        build_parser().parse_args(["--checkpoints", "c.pt", "--data", "d", "--out", "o",
                                   "--seeds", "1", "-1"])
    assert "argument --seeds: must be >= 0, got -1" in capsys.readouterr().err


@pytest.mark.slow
def test_checkpoint_sweep_refuses_a_run_label_given_twice(tmp_path):
    result = run_script("glue_checkpoint_sweep.py", "--run", f"TACO={tmp_path}", "--run",
                        f"TACO={tmp_path}", "--baseline", "TACO", "--data", tmp_path, "--out",
                        tmp_path / "sweep")
    assert result.returncode == 1
    assert result.stderr.strip() == ("error: --run TACO is given twice; give each run its own "
                                     "LABEL")


def test_checkpoint_sweep_command(glue_databin, trained_checkpoint, tmp_path):
    """The 10- and 20-update checkpoints of the tiny TACO run, fine-tuned on RTE: one run
    directory per checkpoint, the CSV and the figure (speedups: tests/test_glue_metrics.py)."""
    out = tmp_path / "sweep"
    result = run_script(
        "glue_checkpoint_sweep.py", "--run", f"TACO={trained_checkpoint}", "--baseline", "TACO",
        "--data", glue_databin, "--out", out, "--tasks", "RTE", "--seeds", "1", "--cpu",
        "--", "--max-update", "2", "--num-workers", "0",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = (out / "sweep.csv").read_text().splitlines()
    assert rows[0] == "run,updates,glue_avg_paper,glue_avg_mcc_for_cola,columns"
    assert [r.split(",")[:2] for r in rows[1:]] == [["TACO", "10"], ["TACO", "20"]]
    assert (out / "sweep.png").read_bytes()[:4] == b"\x89PNG"
    for updates in (10, 20):
        metrics = json.loads((out / f"TACO@{updates}" / "RTE" / "bs32_lr5e-05_ep4" / "seed1"
                              / "metrics.json").read_text())
        assert metrics["pretraining_updates"] == updates


def parsed_args(task, size="small", **run):
    """fairseq's parse of the runner's command line for ``task`` with the ``size`` recipe."""
    run = dict(dict(arch="roberta_tiny", max_positions=64, train_rows=1000,
                    hyper=default_point(size), seed=7, save_dir=Path("SAVE"),
                    user_dir=Path(USER_DIR)), **run)
    args = finetune_args(task, Path("DATA"), Path("CKPT"), size=size, **run)
    return options.parse_args_and_arch(options.get_training_parser(), args)


def leaves(tree, prefix=""):
    for key, value in tree.items():
        if isinstance(value, dict):
            yield from leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("task_name", list(GLUE_TASKS))
def test_the_command_line_is_the_recipe_with_the_runs_values(task_name, size):
    """Every field of the task's YAML recipe reaches fairseq unchanged, except the run's own
    values (data, checkpoint, architecture, positions, grid point, schedule length, seed)."""
    task = GLUE_TASKS[task_name]
    hyper = Hyperparameters(64, 2e-5, 3)
    parsed = parsed_args(task, size, hyper=hyper, train_rows=10000)
    total = 3 * math.ceil(10000 / 64)
    run = {"common.user_dir": USER_DIR, "common.seed": 7, "task.data": "DATA",
           "task.max_positions": 64, "checkpoint.restore_file": "CKPT",
           "checkpoint.save_dir": "SAVE", "model._name": "roberta_tiny",
           "dataset.batch_size": 64, "optimization.lr": [2e-5], "optimization.max_epoch": 3,
           "lr_scheduler.total_num_update": total}
    checked = 0
    for key, value in leaves(load_recipe(recipe_path(task, size))):
        group, name = key.split(".")
        if name == "_name":
            got = parsed.arch if group == "model" else getattr(parsed, group)
        else:
            got = getattr(parsed, name)
        value = run.get(key, value)
        if isinstance(value, float) or isinstance(got, float):
            assert math.isclose(float(value), float(got)), key
        elif isinstance(value, list):
            assert list(value) == list(got), key
        else:
            assert str(value) == str(got), (key, value, got)
        checked += 1
    assert checked >= 30  # every field of the recipe, not a few
    assert parsed.max_update == 0 and parsed.warmup_updates == 100


def test_the_recipes_select_on_the_papers_metric_except_pearson_for_sts_b():
    assert {name: selection_metric(task) for name, task in GLUE_TASKS.items()} == {
        "MNLI": "accuracy", "QNLI": "accuracy", "QQP": "f1", "RTE": "accuracy",
        "SST-2": "accuracy", "MRPC": "f1", "CoLA": "mcc", "STS-B": "pearson"}
    assert default_point("small") == Hyperparameters(32, 5e-5, 4)
    assert default_point("base") == Hyperparameters(32, 3e-5, 6)
    with pytest.raises(ValueError, match="known sizes: small, base"):
        recipe_path(GLUE_TASKS["RTE"], "large")
    with pytest.raises(ValueError, match="known sizes: small, base"):
        default_point("large")


def test_an_update_cap_shortens_the_schedule_with_the_run():
    """``max_updates`` (--max-updates SST-2=N): fairseq stops at the cap and the learning rate
    decays to 0 there, not at the 4 epochs the cap cuts short; a run no longer than the warm-up
    warms up over a tenth of it, so that its learning rate decays too."""
    sst2, rows = GLUE_TASKS["SST-2"], 67349
    full = parsed_args(sst2, train_rows=rows)
    capped = parsed_args(sst2, train_rows=rows, max_updates=500)
    assert int(full.total_num_update) == 4 * math.ceil(rows / 32) and full.max_update == 0
    assert int(capped.total_num_update) == 500 and capped.max_update == 500
    assert capped.warmup_updates == full.warmup_updates == 100
    small = parsed_args(GLUE_TASKS["RTE"], train_rows=2490, max_updates=10**6)
    assert int(small.total_num_update) == small.max_update == 4 * math.ceil(2490 / 32)
    tiny = parsed_args(GLUE_TASKS["RTE"], train_rows=40, hyper=Hyperparameters(16, 1e-3, 1))
    assert int(tiny.total_num_update) == 3 and tiny.warmup_updates == 1
    for cap, warmup in ((10, 1), (100, 10), (101, 100)):
        short = parsed_args(sst2, train_rows=rows, max_updates=cap)
        assert (int(short.total_num_update), short.warmup_updates) == (cap, warmup)


def test_a_recipe_runs_with_fairseq_hydra_train(glue_databin, trained_checkpoint, tmp_path):
    result = run_fairseq(
        "fairseq-hydra-train", "--config-dir", RECIPES_DIR, "--config-name", "cola_small",
        f"task.data={glue_databin / 'CoLA'}", f"common.user_dir={USER_DIR}",
        f"checkpoint.restore_file={trained_checkpoint / 'checkpoint_last.pt'}",
        # the tiny test checkpoint instead of BERT-small
        "model._name=roberta_tiny", "task.max_positions=64", "optimization.max_update=2",
        "common.cpu=true", "dataset.num_workers=0", f"checkpoint.save_dir={tmp_path}",
        f"hydra.run.dir={tmp_path / 'hydra'}",
    )
    assert "Loaded checkpoint" in result.stdout
    valid = [r for r in parse_json_log(result.stdout.splitlines()) if r["kind"] == "valid"]
    assert valid and "valid_mcc" in valid[-1]
    assert (tmp_path / "checkpoint_best.pt").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("config_dir, config_name, given, missing", [
    (RECIPES_DIR.parent / "pretraining", "taco_small", ["task.data=DATA"], "common.user_dir"),
    (RECIPES_DIR, "rte_small", ["task.data=DATA", f"common.user_dir={USER_DIR}"],
     "checkpoint.restore_file"),
])
def test_a_recipe_without_a_required_value_stops_naming_it(config_dir, config_name, given,
                                                           missing, tmp_path):
    """Without common.user_dir fairseq said "Could not infer task type"; without
    checkpoint.restore_file a GLUE recipe fine-tuned from random weights."""
    result = run_fairseq(
        "fairseq-hydra-train", "--config-dir", config_dir, "--config-name", config_name, *given,
        f"checkpoint.save_dir={tmp_path}", f"hydra.run.dir={tmp_path / 'hydra'}", check=False)
    assert result.returncode != 0
    assert "Interpolation key 'mandatory_value_missing' not found" in result.stdout
    assert f"full_key: {missing}" in result.stdout
    assert "Could not infer task type" not in result.stdout and "train_inner" not in result.stdout


def test_a_missing_finetuned_checkpoint_names_delete_checkpoints(tmp_path):
    from taco_fairseq.glue.predict import FinetunedModel

    with pytest.raises(FileNotFoundError, match=r"checkpoint_best.pt not found \(runs made with "
                       "--delete-checkpoints keep none\\)"):
        FinetunedModel(tmp_path / "checkpoint_best.pt", tmp_path)
