"""Exact resume: a run interrupted mid-epoch and restarted from checkpoint_last.pt continues with
the same batches, masks, dropout and TACO samples as an uninterrupted run."""

import dataclasses
import json
import logging
import os
import re
import shutil

import pytest
import torch

from conftest import (ONE_THREAD, RECIPES, REPO, USER_DIR, fairseq_setup, run_fairseq,
                      train_args)
import taco_fairseq  # noqa: F401  (weights-only loading of fairseq checkpoints)
from taco_fairseq.errors import OptionError
from taco_fairseq.resume import checkpoint_to_load, restore_config
from taco_fairseq.save_dir import LOCK_FILE

#: logged per update; everything but timings
LOGGED = ("loss", "mlm_loss", "tc_loss", "tc_accuracy", "tc_anchors", "tc_skipped", "ppl",
          "wpb", "bsz", "gnorm", "lr")


def _run(databin, save_dir, max_update, output=None):
    """Adam with warm-up and decay, dropout 0.1, --update-freq 2 and a data-loading worker
    process (the update-totals read-ahead), a checkpoint every 3 updates (mid-epoch), one thread
(bitwise-reproducible reductions from process to process: :data:`conftest.ONE_THREAD`). Returns
    the logged records by update; ``output`` (a list) gets fairseq-train's output."""
    out = run_fairseq("fairseq-train", *train_args(
        databin, save_dir, "--max-update", max_update, "--update-freq", "2", "--num-workers",
        "1", "--log-interval", "1", "--save-interval-updates", "3", "--disable-validation",
        "--dropout", "0.1", "--attention-dropout", "0.1", "--seed", "7"), env=ONE_THREAD)
    if output is not None:
        output.append(out.stdout)
    return {int(r["num_updates"]): r for r in (
        json.loads(line.split("train_inner | ")[1])
        for line in out.stdout.splitlines() if "train_inner | " in line)}


def _cut_short(path):
    """What a kill during fairseq's copy to checkpoint_last.pt leaves: the file's first half."""
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.slow
def test_interrupted_run_continues_as_the_uninterrupted_one(tiny_databin, tmp_path):
    whole = _run(tiny_databin, tmp_path / "whole", 6)
    first = _run(tiny_databin, tmp_path / "interrupted", 3)
    state = torch.load(tmp_path / "interrupted" / "checkpoint_last.pt", weights_only=True)
    assert state["extra_state"]["train_iterator"]["iterations_in_epoch"] == 6  # mid-epoch
    resumed = _run(tiny_databin, tmp_path / "interrupted", 6)

    assert sorted(whole) == [1, 2, 3, 4, 5, 6]
    assert sorted(first) == [1, 2, 3] and sorted(resumed) == [4, 5, 6]
    for update in range(1, 7):
        got = (first if update <= 3 else resumed)[update]
        assert {k: got[k] for k in LOGGED} == {k: whole[update][k] for k in LOGGED}, update
    # and bit for bit the same weights and optimizer state at the end
    _assert_same_state(tmp_path / "whole", tmp_path / "interrupted")

    # killed while saving update 6: checkpoint_1_6.pt and checkpoint_last.pt are cut short;
    # the rerun resumes from checkpoint_1_3.pt (with a warning) and trains 4-6 as before
    interrupted = tmp_path / "interrupted"
    for name in ("checkpoint_1_6.pt", "checkpoint_last.pt"):
        _cut_short(interrupted / name)
    output = []
    rerun = _run(tiny_databin, interrupted, 6, output)
    assert (f"{interrupted / 'checkpoint_last.pt'} cannot be read (cut short, e.g. by a kill "
            f"while fairseq copied it): resuming from {interrupted / 'checkpoint_1_3.pt'}, the "
            "intact checkpoint with the most updates (3)") in output[0]
    assert sorted(rerun) == [4, 5, 6]
    for update in range(4, 7):
        assert {k: rerun[update][k] for k in LOGGED} == {k: whole[update][k] for k in LOGGED}
    _assert_same_state(tmp_path / "whole", interrupted)  # checkpoint_last.pt is whole again


def _assert_same_state(run_a, run_b):
    a = torch.load(run_a / "checkpoint_last.pt", weights_only=True)
    b = torch.load(run_b / "checkpoint_last.pt", weights_only=True)
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name
    for key, value in a["last_optimizer_state"]["state"].items():
        for name, saved in value.items():
            other = b["last_optimizer_state"]["state"][key][name]
            assert torch.equal(saved, other) if torch.is_tensor(saved) else saved == other


def test_unreadable_checkpoint_last_picks_the_newest_intact_checkpoint(trained_checkpoint,
                                                                       tiny_databin, tmp_path,
                                                                       caplog):
    """The run of 20 updates saved checkpoint_1_10.pt, checkpoint_1_20.pt and _last.pt."""
    for name in ("checkpoint_1_10.pt", "checkpoint_1_20.pt", "checkpoint_last.pt"):
        shutil.copy(trained_checkpoint / name, tmp_path / name)
    _cut_short(tmp_path / "checkpoint_last.pt")
    with caplog.at_level(logging.WARNING):
        cfg, _, _, _ = fairseq_setup(tiny_databin, "--save-dir", str(tmp_path))
    assert checkpoint_to_load(cfg.checkpoint) == str(tmp_path / "checkpoint_1_20.pt")
    assert "resuming from" in caplog.text
    assert (tmp_path / "checkpoint_last.pt").stat().st_size > 0  # left in place
    # fairseq loads checkpoint_last.pt whenever it exists: the config must name the intact one,
    # also when --continue-once (or --finetune-from-model) names that same file
    for option in ([], ["--continue-once", str(tmp_path / "checkpoint_1_20.pt")],
                   ["--finetune-from-model", str(tmp_path / "checkpoint_1_20.pt")]):
        cfg, task, model, _ = fairseq_setup(tiny_databin, "--save-dir", str(tmp_path), *option)
        restored = restore_config(cfg.checkpoint, task, model, cfg.criterion)
        assert restored.restore_file == str(tmp_path / "checkpoint_1_20.pt"), option
        assert restored.finetune_from_model is None
    _cut_short(tmp_path / "checkpoint_1_20.pt")
    assert checkpoint_to_load(cfg.checkpoint) == str(tmp_path / "checkpoint_1_10.pt")
    _cut_short(tmp_path / "checkpoint_1_10.pt")
    with pytest.raises(ValueError, match=(
            rf"{re.escape(str(tmp_path / 'checkpoint_last.pt'))} cannot be read .* has no intact "
            r"checkpoint_<epoch>_<updates>.pt or checkpoint<epoch>.pt to resume from. Move .* "
            "away to start from scratch")):
        fairseq_setup(tiny_databin, "--save-dir", str(tmp_path))


def test_deciding_a_resume_reads_each_checkpoint_once(trained_checkpoint, tiny_databin,
                                                      tmp_path, monkeypatch):
    """Deciding what to resume from loads checkpoint_last.pt (or the newest intact numbered
    checkpoint) once, for both the readability check and the checks of
    :func:`restore_config`."""
    from taco_fairseq import resume

    for name in ("checkpoint_1_10.pt", "checkpoint_1_20.pt", "checkpoint_last.pt"):
        shutil.copy(trained_checkpoint / name, tmp_path / name)
    cfg, task, model, _ = fairseq_setup(tiny_databin, "--save-dir", str(tmp_path))
    loaded, load_lazily = [], resume.load_lazily

    def counting_load(path):
        loaded.append(path)
        return load_lazily(path)

    monkeypatch.setattr(resume, "load_lazily", counting_load)
    restore_config(cfg.checkpoint, task, model, cfg.criterion)
    assert loaded == [str(tmp_path / "checkpoint_last.pt")]
    _cut_short(tmp_path / "checkpoint_last.pt")
    loaded.clear()
    restored = restore_config(cfg.checkpoint, task, model, cfg.criterion)
    assert restored.restore_file == str(tmp_path / "checkpoint_1_20.pt")
    assert sorted(loaded) == sorted(str(tmp_path / name) for name in (
        "checkpoint_last.pt", "checkpoint_1_10.pt", "checkpoint_1_20.pt"))


def _resumable_copy(trained_checkpoint, save_dir):
    """``save_dir`` holding the 20-update run's checkpoint_last.pt."""
    save_dir.mkdir()
    shutil.copy(trained_checkpoint / "checkpoint_last.pt", save_dir / "checkpoint_last.pt")
    return save_dir


@pytest.mark.parametrize("changed, message", [
    (["--tc-negatives", "20"], "--tc-negatives 50 in the checkpoint, 20 in this run"),
    (["--tc-window", "7"], "--tc-window 5 in the checkpoint, 7 in this run"),
    (["--tc-temperature", "0.1", "--tc-positions", "masked"],
     "--tc-positions all in the checkpoint, masked in this run; --tc-temperature 0.07 in the "
     "checkpoint, 0.1 in this run"),
    (["--mask-prob", "0.3"], "--mask-prob 0.15 in the checkpoint, 0.3 in this run"),
    (["--tc-embedding", "token"], "--tc-embedding layer-output in the checkpoint, token in this"),
])
def test_a_resume_with_another_objective_is_refused(trained_checkpoint, tiny_databin, tmp_path,
                                                    changed, message):
    """A resume with another value of an objective option stops, naming the option and both
    values (it does not continue from checkpoint_last.pt with the new value)."""
    save_dir = _resumable_copy(trained_checkpoint, tmp_path / "run")
    fairseq_setup(tiny_databin, "--save-dir", str(save_dir))  # the same objective resumes
    with pytest.raises(OptionError, match=(
            rf"{re.escape(str(save_dir / 'checkpoint_last.pt'))} \(update 20\) was trained with "
            rf"another objective than this run's: {re.escape(message)}.*add "
            "--tc-allow-changed-objective")):
        fairseq_setup(tiny_databin, "--save-dir", str(save_dir), *changed)


def test_a_changed_objective_resumes_when_the_user_says_so(trained_checkpoint, tiny_databin,
                                                           tmp_path, caplog):
    save_dir = _resumable_copy(trained_checkpoint, tmp_path / "run")
    with caplog.at_level(logging.WARNING):
        fairseq_setup(tiny_databin, "--save-dir", str(save_dir), "--tc-negatives", "20",
                      "--tc-allow-changed-objective")
    assert ("--tc-allow-changed-objective: resuming " f"{save_dir / 'checkpoint_last.pt'} "
            "(update 20) with another objective: --tc-negatives 50 in the checkpoint, 20 in "
            "this run") in caplog.text
    # starting from the checkpoint's weights at update 0 is a new run, not a resume
    fairseq_setup(tiny_databin, "--save-dir", str(tmp_path / "new"), "--restore-file",
                  str(save_dir / "checkpoint_last.pt"), "--reset-optimizer", "--tc-window", "7")
    fairseq_setup(tiny_databin, "--save-dir", str(tmp_path / "fine"), "--finetune-from-model",
                  str(save_dir / "checkpoint_last.pt"), "--criterion", "mlm")


def test_changing_the_criterion_is_a_changed_objective(trained_checkpoint, tiny_databin,
                                                       tmp_path):
    save_dir = _resumable_copy(trained_checkpoint, tmp_path / "run")
    with pytest.raises(OptionError, match="--criterion taco in the checkpoint, mlm in this run"):
        fairseq_setup(tiny_databin, "--save-dir", str(save_dir), "--criterion", "mlm")


def test_every_option_of_the_objective_is_compared():
    """Each option of the task and criteria is either compared on resume or named as not
    defining the objective, and a new TC option is compared without being listed anywhere."""
    from fairseq.dataclass import FairseqDataclass

    from taco_fairseq.criterion import MlmConfig, TacoConfig
    from taco_fairseq.resume import NOT_OBJECTIVE_OPTIONS, objective_options
    from taco_fairseq.task import TacoMaskedLMConfig

    def own(config, base):
        return {f.name for f in dataclasses.fields(config)} - {
            f.name for f in dataclasses.fields(base)} - {"tpu"}  # tpu: fairseq's common.tpu

    task_options = {f.name for f in dataclasses.fields(TacoMaskedLMConfig)
                    if f.name.startswith(("tc_", "mask_", "leave_", "random_", "freq_"))}
    assert {"tc_window", "tc_negatives", "mask_prob", "random_token_prob"} <= task_options
    compared = set(objective_options("task", TacoMaskedLMConfig())) - {"_name"}
    assert compared == task_options - set(NOT_OBJECTIVE_OPTIONS)
    for config in (TacoConfig, MlmConfig):
        compared = set(objective_options("criterion", config())) - {"_name"}
        assert compared == own(config, FairseqDataclass) - set(NOT_OBJECTIVE_OPTIONS)

    @dataclasses.dataclass
    class WithANewRule(TacoMaskedLMConfig):
        tc_positive_rule: str = "window"

    assert "tc_positive_rule" in objective_options("task", WithANewRule())
    assert "tc_allow_changed_objective" not in objective_options("task", WithANewRule())


@pytest.mark.parametrize("saved, here, changed", [
    ({"tc_detach_keys": True}, {}, []),  # a checkpoint from before tc_key_gradients
    ({"tc_detach_keys": False}, {"tc_key_gradients": True}, []),
    ({"tc_key_gradients": True, "tc_detach_keys": True}, {"tc_detach_keys": False}, []),
    ({}, {"tc_key_gradients": True}, []),  # a checkpoint that records neither: not compared
    ({"tc_detach_keys": True}, {"tc_key_gradients": True},
     [("--tc-key-gradients", False, True)]),
    ({"tc_detach_keys": False}, {}, [("--tc-key-gradients", True, False)]),
])
def test_key_gradients_are_compared_whichever_spelling_set_them(saved, here, changed):
    """tc_key_gradients and its deprecated negation tc_detach_keys are compared as one option,
    in the checkpoint (which may record either) and in this run."""
    from taco_fairseq.criterion import TacoConfig
    from taco_fairseq.resume import changed_objective_options
    from taco_fairseq.task import TacoMaskedLMConfig

    task_cfg = TacoMaskedLMConfig()
    criterion = {**dataclasses.asdict(TacoConfig()), "tc_key_gradients": None,
                 "tc_detach_keys": None, **saved}
    state = {"cfg": {"task": dataclasses.asdict(task_cfg), "criterion": criterion}}
    assert changed_objective_options(state, task_cfg, TacoConfig(**here)) == changed


def test_a_finished_run_started_again_leaves_its_checkpoints_as_they_are(trained_checkpoint,
                                                                       tiny_databin, tmp_path):
    """fairseq-train on a run that has reached --max-update stops without training and leaves
    checkpoint_last.pt and checkpoint_best.pt as they are (fairseq alone trains update 21
    past --max-update 20 and overwrites them); a higher --max-update trains on."""
    save_dir = tmp_path / "run"
    shutil.copytree(trained_checkpoint, save_dir)
    def checkpoints():  # the run's lock file (taco_fairseq.save_dir) is not a checkpoint
        return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in save_dir.iterdir()
                if p.name != LOCK_FILE}

    before = checkpoints()
    assert {"checkpoint_last.pt", "checkpoint_best.pt"} <= set(before)
    out = run_fairseq("fairseq-train", *train_args(tiny_databin, save_dir))
    assert "done training: the checkpoint loaded holds 20 updates, --max-update is 20" in (
        out.stdout)
    after = checkpoints()
    assert after == before
    # one more update is asked for: it trains on
    run_fairseq("fairseq-train", *train_args(tiny_databin, save_dir, "--max-update", "21"))
    state = torch.load(save_dir / "checkpoint_last.pt", weights_only=True)
    assert state["optimizer_history"][-1]["num_updates"] == 21


#: The 20-update run of ``trained_checkpoint``: one worker, --batch-size 8, --update-freq 1.
PER_UPDATE = "(8 sequences per update in the checkpoint, 16 in this run)"


@pytest.mark.parametrize("objective", [[], ["--task", "masked_lm", "--criterion", "masked_lm"]],
                         ids=["taco_masked_lm", "masked_lm"])
@pytest.mark.parametrize("changed, message", [
    (["--batch-size", "16"], f"--batch-size 8 in the checkpoint, 16 in this run {PER_UPDATE}"),
    (["--update-freq", "2"], f"--update-freq 1 in the checkpoint, 2 in this run {PER_UPDATE}"),
    (["--distributed-world-size", "2"],
     f"--distributed-world-size 1 in the checkpoint, 2 in this run {PER_UPDATE}"),
    (["--distributed-world-size", "2", "--update-freq", "2", "--batch-size", "2"],  # 8 again
     "--distributed-world-size 1 in the checkpoint, 2 in this run; --batch-size 8 in the "
     "checkpoint, 2 in this run; --update-freq 1 in the checkpoint, 2 in this run"),
])
def test_a_resume_with_other_batches_is_refused_unless_allowed(trained_checkpoint, tiny_databin,
                                                               tmp_path, caplog, objective,
                                                               changed, message):
    """Another number of workers, --batch-size or --update-freq at a resume stops, naming the
    option, both values and --allow-changed-batch, for TACO and fairseq's own masked_lm
    (before: the sequences per update changed without a word); allowed, a warning says so."""
    from taco_fairseq.metadata import load_lazily
    from taco_fairseq.resume import Batching, check_batching_unchanged

    save_dir = _resumable_copy(trained_checkpoint, tmp_path / "run")
    path = str(save_dir / "checkpoint_last.pt")
    state = load_lazily(path)

    def check(*options):
        cfg, task, _, _ = fairseq_setup(tiny_databin, "--save-dir", str(save_dir),
                                        "--batch-size", "8", *objective, *options)
        return check_batching_unchanged(path, state, cfg.checkpoint, task.cfg, cfg)

    assert check() is None  # the same batches
    with pytest.raises(OptionError) as refused:
        check(*changed)
    assert str(refused.value) == (
        f"{path} (update 20) was trained with other batches than this run's: {message}. Resume "
        "with the checkpoint's values; to go on from update 20 with the new ones, add "
        "--allow-changed-batch (the data goes on after the sequences trained on); to start a "
        "new run, use another --save-dir")
    with caplog.at_level(logging.WARNING):
        assert check(*changed, "--allow-changed-batch") == Batching(1, 8, (1,))
    assert (f"--allow-changed-batch: resuming {path} (update 20) with other batches: "
            f"{message}. Its later checkpoints record the new values") in caplog.text
    # without the data position to move; from the weights alone, not a resume at all
    assert check(*changed, "--allow-changed-batch", "--reset-dataloader") is None
    assert check(*changed, "--reset-optimizer", "--reset-dataloader") is None


@pytest.mark.parametrize("saved, here, read, moved, where", [
    # the same batches, split over more workers: each skips its share, exactly
    ((1, 8), (2, 8), 22, 11, "each of the 2 workers goes on in epoch 3 at its batch 11 of 30, "
     "after the 22 batches of the epoch read before"),
    ((2, 8), (1, 8), 11, 22, "the worker goes on in epoch 3 at its batch 22 of 30, "
     "after the 22 batches of the epoch read before"),
    ((1, 8), (2, 8), 11, 5, "each of the 2 workers goes on in epoch 3 at its batch 5 of 30, "
     "after the 11 batches of the epoch read before (1 of them read again, as 11 batches do "
     "not divide evenly over 2 workers)"),
    # other batches: as many sequences are skipped
    ((1, 8), (2, 16), 22, 5, "each of the 2 workers goes on in epoch 3 at its batch 5 of 30, "
     "after 160 sequences, as many as the 176 read before: the epoch's batches are formed "
     "anew for --batch-size 16, so some sequences read before come again in this epoch and as "
     "many others are left out of it"),
    ((1, None), (1, 8), 22, 0, "the worker goes on in epoch 3 at its batch 0 of 30, "
     "at its start: its batches are formed by --max-tokens on one side, so the sequences read "
     "before cannot be skipped; they are read again"),
    ((1, 8), (1, 2), 22, None, "epoch 3 was read to its end: the run goes on with epoch 4"),
    ((1, 8), (2, 8), 0, 0, None),  # the epoch had not begun
])
def test_an_allowed_change_of_batches_goes_on_where_the_data_was_left(saved, here, read, moved,
                                                                      where):
    """fairseq's iterator state counts the batches each worker read; the position of the
    new split is where the same batches (or as many sequences) were read."""
    from taco_fairseq.resume import Batching, data_position

    state = {"epoch": 3, "iterations_in_epoch": read, "shuffle": True}
    new_state, said = data_position(Batching(*saved, (1,)), Batching(*here, (1,)), state, 30)
    assert said == where
    if moved is None:
        assert new_state == {**state, "epoch": 4, "iterations_in_epoch": 0}
    else:
        assert new_state == {**state, "iterations_in_epoch": moved}


@pytest.mark.slow
def test_relative_paths_under_hydra_mean_where_it_was_started_so_a_rerun_resumes(
        synthetic_databin, tmp_path):
    """fairseq-hydra-train runs the job in its own directory (hydra.run.dir, by default a new
    outputs/DATE/TIME each run). Before, a relative checkpoint.save_dir was only warned about:
    every rerun wrote its checkpoints into its own new directory and started from update 0.
    Relative checkpoint.save_dir and task.data now mean what they meant where the command was
    started (here the repository), so the rerun resumes."""
    save_dir, data = (os.path.relpath(p, REPO) for p in (tmp_path / "checkpoints",
                                                          synthetic_databin))

    def run(updates, job):
        return run_fairseq(
            "fairseq-hydra-train", "--config-dir", RECIPES, "--config-name", "taco_small",
            f"task.data={data}", f"checkpoint.save_dir={save_dir}", f"common.user_dir={USER_DIR}",
            "common.cpu=true", "common.fp16=false", "model._name=roberta_tiny",
            "model.max_positions=64", "task.tokens_per_sample=64", "dataset.batch_size=4",
            "optimization.update_freq=[1]", f"optimization.max_update={updates}",
            "lr_scheduler.warmup_updates=1", "dataset.num_workers=0",
            "dataset.disable_validation=true", f"hydra.run.dir={tmp_path / job}").stdout

    first = run(2, "first")
    assert (f"checkpoint.save_dir {save_dir!r} is relative to where fairseq-hydra-train was "
            f"started, {REPO}: using {tmp_path / 'checkpoints'} (the job runs in "
            f"{tmp_path / 'first'})") in first
    assert f"task.data {data!r} is relative to where fairseq-hydra-train was started" in first
    last = tmp_path / "checkpoints" / "checkpoint_last.pt"
    assert torch.load(last, weights_only=True)["optimizer_history"][-1]["num_updates"] == 2
    assert not (tmp_path / "first" / save_dir).exists()
    rerun = run(3, "rerun")
    assert f"Loaded checkpoint {last} (epoch 1 @ 2 updates)" in rerun
    assert torch.load(last, weights_only=True)["optimizer_history"][-1]["num_updates"] == 3
