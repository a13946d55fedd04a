"""Bad input gets a clear error naming the option or file and the fix, or a defined, logged
behaviour (docs/reliability.md lists every case)."""

import itertools
import json
import logging
import lzma
import os
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import REPO, USER_DIR, first_batch, fairseq_setup, run_fairseq, run_script, train_args
from distributed_worker import Backward
import taco_fairseq  # noqa: F401  (weights-only loading of fairseq checkpoints)
from taco_fairseq.metadata import DICTIONARY_KEY, SENTENCEPIECE_KEY
from taco_fairseq.neighbour_attention import STATE_KEY as NEIGHBOUR_STATE_KEY
from taco_fairseq.sampling import window_outside_share


@pytest.mark.parametrize(
    "options, message",
    [
        (("--tc-negatives", "-3"), "--tc-negatives must be >= 1"),
        (("--tc-window", "2"), "--tc-window must be an odd integer >= 3"),
        (("--tc-temperature", "-0.07"), r"--tc-temperature \(τ\) must be > 0"),
        (("--tc-temperature", "nan"), r"--tc-temperature \(τ\) must be > 0"),
        (("--tc-weight", "nan"), r"--tc-weight \(λ\) must be a finite number >= 0"),
        (("--tc-weight", "inf"), r"--tc-weight \(λ\) must be a finite number >= 0"),
        # fairseq's masking checks its options with bare assertions, named here; 0 < p < 1
        # also keeps --tc-positions masked (unmasked) from going without anchors
        (("--mask-prob", "-0.1"), r"^--mask-prob -0.1: fairseq's masked LM needs 0.0 < "
         r"mask_prob < 1.0$"),
        (("--random-token-prob", "1.2"), r"^--random-token-prob 1.2: fairseq's masked LM needs "
         r"0.0 <= random_token_prob <= 1.0$"),
        (("--leave-unmasked-prob", "0.6", "--random-token-prob", "0.6"),
         r"^--random-token-prob 0.6, --leave-unmasked-prob 0.6: fairseq's masked LM needs "
         r"random_token_prob \+ leave_unmasked_prob <= 1.0$"),
        (("--mask-prob", "0"), r"^--mask-prob 0.0: fairseq's masked LM needs 0.0 < mask_prob"),
        (("--mask-prob", "1"), r"^--mask-prob 1.0: fairseq's masked LM needs 0.0 < mask_prob"),
        (("--tc-positions", "masked", "--mask-prob", "0"), "^--mask-prob 0.0: fairseq's"),
        (("--mask-multiple-length", "0"), "^--mask-multiple-length 0: fairseq's masked LM "
         "needs mask_multiple_length >= 1$"),
        (("--mask-stdev", "nan"), "^--mask-stdev nan: fairseq's masked LM needs mask_stdev"),
        (("--max-positions", "32"), "--tokens-per-sample 64 exceeds the model's --max-positions"),
        (("--task", "masked_lm"), "--criterion taco needs --task taco_masked_lm"),
        (("--arch", "bert_base", "--encoder-layers", "1", "--encoder-embed-dim", "16",
          "--encoder-ffn-embed-dim", "16", "--encoder-attention-heads", "2"),
         "--arch bert_base: the TC loss needs a RoBERTa model"),
    ],
)
def test_bad_options_fail_at_start(tiny_databin, options, message):
    with pytest.raises(ValueError, match=message):
        fairseq_setup(tiny_databin, *options)


@pytest.mark.parametrize(
    "options, message",
    [
        (("--batch-size", "1"), "--batch-size 1: a batch of one sequence has no negatives"),
        (("--tc-window", "201"), "--tc-window 201 reaches beyond --tokens-per-sample 64"),
        # wider than the block, yet most positives in the window (issue 43: no warning before)
        (("--tc-window", "101"), "--tc-window 101 reaches beyond --tokens-per-sample 64: the "
         "window is wider than a block, so 40% of the positives fall outside it"),
        # fewer than one anchor per batch (issue 43: 16 of 20 updates trained on nothing)
        (("--tc-positions", "masked", "--mask-prob", "0.0005", "--batch-size", "8"),
         "--tc-positions masked with --mask-prob 0.0005: a batch of --batch-size 8 × "
         "--tokens-per-sample 64 tokens holds at most 0.256 anchors on average"),
        (("--tc-positions", "unmasked", "--mask-prob", "0.999", "--batch-size", "8"),
         "holds at most 0.512 anchors on average, so most batches have no TC loss, and an update "
         "without a masked token and an anchor trains on nothing (counted in skipped_updates). "
         "Lower --mask-prob, raise --batch-size"),
        # τ: the TC loss pinned at log2(51) = 5.672 bits; or of order 1/τ nats
        (("--tc-temperature", "100000"), "--tc-temperature 100000: above 0.5, the scores cos/τ "
         "lie within ±1e-05, so the TC loss stays between 5.672397 bits (perfectly aligned "
         "vectors) and 5.672425 bits (chance, log2(K+1)), a range of 2.83e-05 bits"),
        (("--tc-temperature", "1e-05"), "--tc-temperature 1e-05: below 0.01, the scores cos/τ "
         "reach ±1e+05, so a misranked anchor costs up to 2e+05 nats"),
    ],
)
def test_suspicious_options_are_logged(tiny_databin, caplog, options, message):
    with caplog.at_level(logging.WARNING):
        fairseq_setup(tiny_databin, *options)
    assert message in caplog.text
    assert caplog.text.count(message) == 1  # once


@pytest.mark.parametrize("options", [
    ("--tc-window", "63"),  # within the block of 64
    ("--tc-positions", "masked", "--mask-prob", "0.002", "--batch-size", "8"),  # 1.02 anchors
    ("--tc-positions", "masked", "--mask-prob", "0.0005"),  # no --batch-size: not known
])
def test_windows_within_the_block_and_enough_anchors_are_not_warned(tiny_databin, caplog,
                                                                     options):
    with caplog.at_level(logging.WARNING):
        fairseq_setup(tiny_databin, *options)
    assert "reaches beyond" not in caplog.text and "anchors on average" not in caplog.text


@pytest.mark.parametrize("window, length", [(3, 2), (5, 64), (63, 64), (101, 64), (201, 64)])
def test_the_warned_share_of_positives_outside_the_block_counts_every_position(window, length):
    half = window // 2
    offsets = [offset for offset in range(-half, half + 1) if offset]
    outside = sum(not 0 <= column + offset < length
                  for column in range(length) for offset in offsets)
    assert window_outside_share(window, length) == pytest.approx(
        outside / (length * len(offsets)), abs=1e-15)


def test_updates_without_masked_tokens_or_anchors_are_logged_as_skipped(tiny_databin):
    """--tc-positions masked --mask-prob 0.0005 (issue 43): an update whose batch has no masked
    token, and so no anchor, trains on nothing (zero gradient). fairseq's meters show the last
    value logged when an interval has no weighted one, so it logged loss 0; now it logs no
    loss (None), mlm_loss or tc_loss, counts in skipped_updates, and leaves the interval's
    averages to the updates that trained."""
    from fairseq.logging import metrics
    from fairseq.trainer import Trainer

    cfg, task, model, criterion = fairseq_setup(
        tiny_databin, "--tc-positions", "masked", "--mask-prob", "0.0005", "--optimizer", "adam",
        "--lr", "0", "--dropout", "0", "--attention-dropout", "0")
    trainer = Trainer(cfg, task, model, criterion)
    batches = task.get_batch_iterator(task.dataset("valid"), max_sentences=8,
                                      seed=1).next_epoch_itr(shuffle=False)
    batches = list(itertools.islice(batches, 40))
    empty = next(b for b in batches if not b["target"].ne(task.dictionary.pad()).any())
    trained = next(b for b in batches if len(b["taco"].anchor))

    def logged(*updates):
        with metrics.aggregate(new_root=True) as interval:
            for batch in updates:
                trainer.train_step([batch])
        return interval.get_smoothed_values()

    skipped = logged(empty)
    assert skipped["skipped_updates"] == 1 and skipped["tc_anchors"] == 0
    assert skipped["loss"] is None and skipped["mlm_loss"] is None and skipped["tc_loss"] is None
    assert skipped["gnorm"] == 0
    alone, mixed = logged(trained), logged(empty, trained, empty)
    assert alone["skipped_updates"] == 0 and mixed["skipped_updates"] == 2
    assert alone["loss"] > 0 and mixed["loss"] == alone["loss"]  # --lr 0: the same model
    with metrics.aggregate(new_root=True) as validation:
        trainer.valid_step(empty)
    assert validation.get_smoothed_values()["loss"] is None


@pytest.mark.parametrize("temperature", ["0.07", "0.5", "0.01"])
def test_temperatures_in_the_sane_range_are_not_warned(tiny_databin, caplog, temperature):
    with caplog.at_level(logging.WARNING):
        fairseq_setup(tiny_databin, "--tc-temperature", temperature)
    assert "--tc-temperature" not in caplog.text


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")
@pytest.mark.parametrize("task", [(), ("--task", "masked_lm", "--criterion", "masked_lm")],
                         ids=["taco", "masked_lm"])
@pytest.mark.parametrize("option, message", [("--fp16", "--fp16 needs a CUDA GPU"),
                                             ("--bf16", "--bf16 means TPU training")])
def test_precision_the_machine_lacks_stops_fairseqs_trainer(tiny_databin, task, option,
                                                              message):
    """For every task (a fix of fairseq: its trainer fails deep inside without it)."""
    from fairseq.trainer import Trainer

    cfg, task, model, criterion = fairseq_setup(tiny_databin, *task, option)
    with pytest.raises(ValueError, match=message):
        Trainer(cfg, task, model, criterion)


def test_more_negatives_than_tokens_are_drawn_with_replacement_and_warned_once(
    tiny_databin, caplog
):
    _, task, model, criterion = fairseq_setup(tiny_databin, "--tc-negatives", "500")
    with caplog.at_level(logging.WARNING):  # warned as the batches are collated
        for update in range(2):
            batch = first_batch(task, batch_size=2)  # at most 64 tokens in the other sequence
            task.train_step(batch, model, criterion, Backward, update)
    assert batch["taco"].negative.shape == (len(batch["taco"].anchor), 500)
    assert caplog.text.count("--tc-negatives 500 exceeds the") == 1
    assert 0 < int(re.search(r"exceeds the (\d+) tokens", caplog.text)[1]) <= 64
    # enough tokens: no warning
    caplog.clear()
    _, task, model, criterion = fairseq_setup(tiny_databin, "--tc-negatives", "50")
    with caplog.at_level(logging.WARNING):
        task.train_step(first_batch(task, batch_size=4), model, criterion, Backward, 0)
    assert "exceeds the" not in caplog.text


def test_data_directory_without_the_split(tiny_databin, tmp_path):
    shutil.copy(tiny_databin / "dict.txt", tmp_path / "dict.txt")
    with pytest.raises(FileNotFoundError, match="Dataset not found: valid"):
        fairseq_setup(tmp_path)


# --- checkpoints: missing, other vocabulary, other architecture -------------------------------

@pytest.mark.slow
def test_missing_restore_file_stops_fairseq_train(tiny_databin, tmp_path):
    missing = tmp_path / "no_such_checkpoint.pt"
    with pytest.raises(FileNotFoundError, match=f"--restore-file {missing}: no such checkpoint"):
        fairseq_setup(tiny_databin, "--restore-file", str(missing))
    command = train_args(tiny_databin, tmp_path / "run", "--restore-file", missing)
    out = run_fairseq("fairseq-train", *command, check=False)
    assert out.returncode != 0
    assert "train_inner" not in out.stdout  # stopped before training from scratch
    # the project's one-line message ends the output, without fairseq's traceback
    assert out.stdout.strip().splitlines()[-1].startswith(
        f"error: --restore-file {missing}: no such checkpoint (fairseq would start from scratch)")
    assert "Traceback" not in out.stdout
    debug = run_fairseq("fairseq-train", *command, check=False, env={"TACO_FAIRSEQ_DEBUG": "1"})
    assert debug.returncode != 0 and "Traceback (most recent call last)" in debug.stdout
    assert f"InputNotFoundError: --restore-file {missing}: no such checkpoint" in debug.stdout


@pytest.mark.parametrize("damage", ["cut short", "not a checkpoint"])
def test_an_unreadable_restore_file_stops_in_one_line(damage, tiny_databin, trained_checkpoint,
                                                      tmp_path):
    """A --restore-file cut short or of another kind: one line naming it (before: two chained
    tracebacks from torch's unpickler)."""
    bad = tmp_path / "bad.pt"
    if damage == "cut short":
        data = (trained_checkpoint / "checkpoint_last.pt").read_bytes()
        bad.write_bytes(data[: len(data) // 2])
    else:
        bad.write_text("these are notes, not weights\n")
    out = run_fairseq("fairseq-train", *train_args(tiny_databin, tmp_path / "run",
                                                    "--restore-file", bad), check=False)
    assert out.returncode != 0 and "train_inner" not in out.stdout
    assert out.stdout.strip().splitlines()[-1].startswith(
        f"error: {bad} cannot be read as a checkpoint")
    assert "Traceback" not in out.stdout


@pytest.mark.slow
def test_configuration_errors_end_fairseq_hydra_train_in_one_line(tiny_databin, tmp_path):
    out = run_fairseq(
        "fairseq-hydra-train", "--config-dir", REPO / "examples/taco/config/pretraining",
        "--config-name", "taco_small", f"task.data={tiny_databin}", f"common.user_dir={USER_DIR}",
        "task.tc_window=4", "common.fp16=false", "common.cpu=true",
        f"checkpoint.save_dir={tmp_path / 'run'}", f"hydra.run.dir={tmp_path / 'hydra'}",
        check=False)
    assert out.returncode != 0
    # hydra: "Error executing job with overrides: [...]", the message, its HYDRA_FULL_ERROR hint
    lines = out.stdout.strip().splitlines()
    assert lines[-3] == ("--tc-window must be an odd integer >= 3 (the window W around the "
                         "anchor, e.g. 5 as in the paper), got 4")
    assert lines[-4].startswith("Error executing job with overrides")
    assert "Traceback" not in out.stdout


@pytest.mark.slow
def test_relative_paths_under_hydra_are_explained(tmp_path):
    """hydra runs the job in hydra.run.dir: a relative --data means the directory relative to
    where the command was started (here the repository), and the error for a missing one names
    where it was looked for (a rerun that resumes: test_resume.py)."""
    out = run_fairseq(
        "fairseq-hydra-train", "--config-dir", REPO / "examples/taco/config/pretraining",
        "--config-name", "taco_small", "task.data=data-bin/missing", f"common.user_dir={USER_DIR}",
        "common.fp16=false", "common.cpu=true", f"hydra.run.dir={tmp_path / 'hydra'}",
        check=False)
    assert out.returncode != 0
    missing = REPO / "data-bin" / "missing"
    assert (f"task.data 'data-bin/missing' is relative to where fairseq-hydra-train was started, "
            f"{REPO}: using {missing} (the job runs in {tmp_path / 'hydra'})") in out.stdout
    assert f"the directory '{missing}' does not exist. Point --data" in out.stdout


def test_finetuning_with_more_positions_than_pretraining(trained_checkpoint, glue_databin,
                                                         tmp_path):
    """The GLUE recipe (sentence_prediction) gets the plugin's checkpoint check too."""
    out = run_fairseq(
        "fairseq-train", glue_databin / "RTE", "--user-dir", USER_DIR, "--task",
        "sentence_prediction", "--criterion", "sentence_prediction_summable", "--num-classes",
        "2", "--init-token", "0", "--separator-token", "2", "--arch", "roberta_tiny",
        "--max-positions", "128", "--restore-file", trained_checkpoint / "checkpoint_last.pt",
        "--reset-optimizer", "--reset-dataloader", "--reset-meters", "--optimizer", "adam",
        "--lr", "1e-5", "--batch-size", "8", "--max-update", "1", "--cpu", "--save-dir",
        tmp_path / "run", check=False)
    assert out.returncode != 0
    assert out.stdout.strip().splitlines()[-1] == (
        f"error: checkpoint {trained_checkpoint / 'checkpoint_last.pt'} was pre-trained with "
        "--max-positions 64 (66 position embeddings); the model being trained has "
        "--max-positions 128. Use --max-positions 64 (hydra: task.max_positions and "
        "model.max_positions); sentence_prediction cuts longer inputs with --shorten-method "
        "truncate.")
    assert "size mismatch" not in out.stdout and "Traceback" not in out.stdout


@pytest.mark.slow
def test_finetuning_with_f1_of_labels_that_are_no_integers(glue_databin, tmp_path):
    """The GLUE criterion's refusal ends in one line, as the other configuration errors."""
    out = run_fairseq(
        "fairseq-train", glue_databin / "RTE", "--user-dir", USER_DIR, "--task",
        "sentence_prediction", "--criterion", "sentence_prediction_summable", "--num-classes",
        "2", "--report-acc-and-f1", "--arch", "roberta_tiny", "--max-positions", "64",
        "--optimizer", "adam", "--lr", "1e-5", "--batch-size", "8", "--max-update", "1", "--cpu",
        "--save-dir", tmp_path / "run", check=False)
    assert out.returncode != 0
    assert out.stdout.strip().splitlines()[-1] == (
        "error: --report-mcc/--report-acc-and-f1 need integer class labels (as GLUE's CoLA, "
        "MRPC, QQP); the label dictionary has ['entailment', 'not_entailment']")
    assert "Traceback" not in out.stdout


def test_missing_continue_once_file(tiny_databin, tmp_path):
    with pytest.raises(FileNotFoundError, match="--continue-once"):
        fairseq_setup(tiny_databin, "--save-dir", str(tmp_path), "--continue-once",
                      str(tmp_path / "nope.pt"))


def test_restore_file_that_hides_checkpoint_last_is_warned(trained_checkpoint, tiny_databin,
                                                           caplog):
    with caplog.at_level(logging.WARNING):
        fairseq_setup(tiny_databin, "--save-dir", str(trained_checkpoint), "--restore-file",
                      str(trained_checkpoint / "checkpoint_1_10.pt"))
    assert "this run restarts from" in caplog.text and "--continue-once" in caplog.text


def test_own_checkpoint_fits(trained_checkpoint, tiny_databin):
    """The checks accept the checkpoint fairseq-train will load, and it really loads."""
    from fairseq import checkpoint_utils

    from taco_fairseq.resume import checkpoint_to_load

    last = str(trained_checkpoint / "checkpoint_last.pt")
    for options, expected in (
        (["--restore-file", last], last),
        (["--save-dir", str(trained_checkpoint)], last),  # resume
    ):
        cfg, _, model, _ = fairseq_setup(tiny_databin, *options)
        assert checkpoint_to_load(cfg.checkpoint) == expected
        state = checkpoint_utils.load_checkpoint_to_cpu(expected)["model"]
        loaded = model.load_state_dict(state, strict=True)
        assert not loaded.missing_keys and not loaded.unexpected_keys


def _databin_with_dict(tiny_databin, directory, symbols):
    directory.mkdir()
    for split in ("valid.bin", "valid.idx"):
        (directory / split).symlink_to(tiny_databin / split)
    (directory / "dict.txt").write_text("".join(symbols), encoding="utf-8")
    return directory


def test_checkpoint_of_another_vocabulary(trained_checkpoint, tiny_databin, tmp_path):
    checkpoint = str(trained_checkpoint / "checkpoint_last.pt")
    lines = (tiny_databin / "dict.txt").read_text(encoding="utf-8").splitlines(keepends=True)
    # the same number of pieces, two of them swapped: ids would mean other pieces
    swapped = _databin_with_dict(tiny_databin, tmp_path / "swapped",
                                 [lines[1], lines[0], *lines[2:]])
    with pytest.raises(ValueError, match=r"trained with another dictionary \(2001 symbols\) "
                                         r"than --data's dict.txt \(2001 symbols\)"):
        fairseq_setup(swapped, "--restore-file", checkpoint)
    # a checkpoint without our fingerprint (e.g. fairseq's masked_lm): the embedding size
    state = torch.load(checkpoint, weights_only=True)
    del state["task_state"]
    stock = tmp_path / "stock.pt"
    torch.save(state, stock)
    # (a larger one: a smaller dict.txt than its data's ids is refused when the data loads)
    larger = _databin_with_dict(tiny_databin, tmp_path / "larger",
                                [*lines, *(f"extra{i} 1\n" for i in range(10))])
    with pytest.raises(ValueError, match=r"another dictionary \(2001 symbols\) than --data's "
                                         r"dict.txt \(2011 symbols\)"):
        fairseq_setup(larger, "--restore-file", str(stock))


def test_a_dict_txt_shortened_after_binarization_is_named(tiny_databin, tmp_path):
    """A dict.txt shortened after binarization (the data holds ids beyond it) stops at set-up,
    naming the file, the id and the cause (not fairseq's "AssertionError: Dataset contains
    mask_idx" in a data-loading worker, nor an index error in the embedding)."""
    lines = (tiny_databin / "dict.txt").read_text(encoding="utf-8").splitlines(keepends=True)
    edited = _databin_with_dict(tiny_databin, tmp_path / "edited", lines[:-10])
    with pytest.raises(ValueError, match=(
            rf"--data: {re.escape(str(edited / 'valid.bin'))} holds token id \d+, but "
            rf"{re.escape(str(edited / 'dict.txt'))} has ids up to 1989 \(its symbols and "
            r"fairseq's 4 special ones\): dict.txt was changed after the data was binarized")):
        fairseq_setup(edited)
    fairseq_setup(_databin_with_dict(tiny_databin, tmp_path / "intact", lines))


def test_the_token_id_check_reads_what_fairseq_loads_once(tiny_databin, tmp_path, monkeypatch):
    """The token-id check reads only the files fairseq loads: ``valid`` alone, not ``valid1``
    (another split, which fairseq loads only with ``--valid-subset valid,valid1``, or a shard
    only the training split combines), and only on the first data-parallel worker."""
    from fairseq.data import Dictionary, indexed_dataset
    from fairseq.distributed import utils as distributed_utils

    from taco_fairseq.errors import OptionError
    from taco_fairseq.task import check_token_ids

    lines = (tiny_databin / "dict.txt").read_text(encoding="utf-8").splitlines(keepends=True)
    databin = _databin_with_dict(tiny_databin, tmp_path / "databin", lines)
    builder = indexed_dataset.make_builder(str(databin / "valid1.bin"), impl="mmap",
                                           vocab_size=100_000)
    builder.add_item(torch.IntTensor([5, 99_999, 2]))  # an id far beyond dict.txt
    builder.finalize(str(databin / "valid1.idx"))
    dictionary = Dictionary.load(str(databin / "dict.txt"))
    dictionary.add_symbol("<mask>")
    check_token_ids(str(databin / "valid"), dictionary, combine=False)  # valid1 not read
    with pytest.raises(OptionError, match=re.escape(f"{databin / 'valid1.bin'} holds token id "
                                                    "99999")):
        check_token_ids(str(databin / "valid"), dictionary, combine=True)
    # a worker other than the first does not read the files (the first stops the run)
    edited = _databin_with_dict(tiny_databin, tmp_path / "edited", lines[:-10])
    monkeypatch.setattr(distributed_utils, "get_global_rank", lambda: 1)
    fairseq_setup(edited)
    monkeypatch.setattr(distributed_utils, "get_global_rank", lambda: 0)
    with pytest.raises(OptionError, match="dict.txt was changed after the data was binarized"):
        fairseq_setup(edited)


@pytest.mark.slow
@pytest.mark.parametrize("case", ["parent is a file", "read-only"])
def test_an_unusable_save_dir_stops_in_one_line(case, tiny_databin, tmp_path):
    """A --save-dir that cannot be made or written stops fairseq-train with one line (not
    fairseq's NotADirectoryError or PermissionError traceback)."""
    if case == "parent is a file":
        (tmp_path / "notes").write_text("a file\n")
        save_dir, expected = tmp_path / "notes" / "run", f"{tmp_path / 'notes'} is a file"
    elif os.geteuid() != 0:
        save_dir = tmp_path / "locked"
        save_dir.mkdir()
        save_dir.chmod(0o555)
        expected = f"cannot write checkpoints there (Permission denied: {save_dir} is read-only"
    else:  # root writes anywhere permissions allow nobody: a kernel directory refuses it
        save_dir = Path("/sys/kernel")
        expected = "cannot write checkpoints there (Permission denied: /sys/kernel is read-only"
    out = run_fairseq("fairseq-train", *train_args(tiny_databin, save_dir), check=False)
    assert out.returncode == 1 and "Traceback" not in out.stdout
    last = out.stdout.strip().splitlines()[-1]
    assert last.startswith(f"error: --save-dir {save_dir}: ") and expected in last, last


def test_masked_lm_checkpoints_record_the_fingerprints(trained_checkpoint, tiny_databin,
                                                       tmp_path):
    """fairseq's masked_lm task, run with the plugin loaded, records the data-bin's
    fingerprints as taco_masked_lm does, so a same-size dictionary is caught for it too."""
    args = [str(a) for a in train_args(tiny_databin, tmp_path / "mlm", "--max-update", "1")]
    args[args.index("taco_masked_lm")], args[args.index("taco")] = "masked_lm", "masked_lm"
    run_fairseq("fairseq-train", *args)
    recorded = torch.load(tmp_path / "mlm" / "checkpoint_last.pt", weights_only=True)
    taco = torch.load(trained_checkpoint / "checkpoint_last.pt", weights_only=True)
    fingerprints = {DICTIONARY_KEY, SENTENCEPIECE_KEY}
    # the same data-bin; besides, a task state may hold the last validation's neighbour share
    assert {k: recorded["task_state"][k] for k in fingerprints} == {
        k: taco["task_state"][k] for k in fingerprints}
    assert set(recorded["task_state"]) - {NEIGHBOUR_STATE_KEY} == fingerprints
    lines = (tiny_databin / "dict.txt").read_text(encoding="utf-8").splitlines(keepends=True)
    swapped = _databin_with_dict(tiny_databin, tmp_path / "swapped",
                                 [lines[1], lines[0], *lines[2:]])
    with pytest.raises(ValueError, match=r"trained with another dictionary \(2001 symbols\) "
                                         r"than --data's dict.txt \(2001 symbols\)"):
        fairseq_setup(swapped, "--restore-file", str(tmp_path / "mlm" / "checkpoint_last.pt"))


def test_checkpoint_of_another_architecture(trained_checkpoint, tiny_databin):
    with pytest.raises(ValueError, match=r"--arch roberta_tiny\) does not fit .*Train with the "
                                         r"checkpoint's --arch"):
        fairseq_setup(tiny_databin, "--arch", "roberta_mini", "--restore-file",
                      str(trained_checkpoint / "checkpoint_last.pt"))
    # other positions too: the architecture is named at once, not after --max-positions is fixed
    with pytest.raises(ValueError, match=r"--arch roberta_tiny\) does not fit .*Train with the "
                                         r"checkpoint's --arch"):
        fairseq_setup(tiny_databin, "--arch", "roberta_mini", "--tokens-per-sample", "32",
                      "--restore-file", str(trained_checkpoint / "checkpoint_last.pt"))


# --- corpus: empty, blank, non-UTF-8, a very long line ----------------------------------------

@pytest.mark.slow
def test_blank_corpus_file(tmp_path):
    """The prep command's exit path (empty and markup-only files: tests/test_corpus.py)."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes(b"\n  \n\t\n")
    result = run_script("prepare_pretraining_data.py", "--train", corpus, "--valid-docs", "1",
                        "--vocab-size", "100", "--destdir", tmp_path / "out")
    assert result.returncode != 0
    assert f"{corpus}: no text found (the file is empty, blank or markup only)" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_binary_file_is_refused(tmp_path):
    """An executable (this Python interpreter) given as a corpus."""
    binary = Path(sys.executable).resolve()
    result = run_script("prepare_pretraining_data.py", "--train", binary, "--valid-docs", "1",
                        "--vocab-size", "100", "--destdir", tmp_path / "out")
    assert result.returncode != 0
    message = re.search(rf"error: {re.escape(str(binary))}: (\d+) of (\d+) lines read \((\d+)%\) "
                        r"are not UTF-8 text \(invalid bytes or NUL bytes\)", result.stderr)
    assert message, result.stderr[-2000:]
    bad, lines, share = map(int, message.groups())
    assert bad > lines / 2 and share == round(100 * bad / lines)
    assert "Traceback" not in result.stderr and not (tmp_path / "out" / "dict.txt").exists()


@pytest.mark.slow
def test_utf16_text_is_refused(wikitext_test, head, tmp_path):
    corpus = tmp_path / "utf16.txt"
    corpus.write_bytes(head(wikitext_test, 200).decode("utf-8").encode("utf-16"))  # with BOM
    result = run_script("prepare_pretraining_data.py", "--train", corpus, "--valid-docs", "1",
                        "--vocab-size", "100", "--destdir", tmp_path / "out")
    assert result.returncode != 0
    assert (f"error: {corpus}: the file is UTF-16 text (it starts with a UTF-16 byte-order "
            "mark), not UTF-8") in result.stderr
    # without a byte-order mark: every line has NUL bytes
    corpus.write_bytes(head(wikitext_test, 200).decode("utf-8").encode("utf-16-le"))
    result = run_script("prepare_pretraining_data.py", "--train", corpus, "--valid-docs", "1",
                        "--vocab-size", "100", "--destdir", tmp_path / "out")
    assert result.returncode != 0 and "(100%) are not UTF-8 text" in result.stderr


@pytest.mark.slow
def test_a_corpus_without_line_breaks(wikipedia_aa, tmp_path):
    """5 MB of real text on one line: SentencePiece trains on lines of at most 4,192 bytes and
    stopped with "INTERNAL ... !sentences_.empty()" and a traceback."""
    with lzma.open(wikipedia_aa, "rt", encoding="utf-8") as f:
        words = " ".join(line.strip() for line in itertools.islice(f, 40000)
                         if line.strip() and not line.startswith("<"))  # no <doc> markup
    corpus = tmp_path / "one-line.txt"
    corpus.write_text(words[:5_000_000] + "\n", encoding="utf-8")
    valid = tmp_path / "valid.txt"
    valid.write_text("A short validation text.\n", encoding="utf-8")
    result = run_script("prepare_pretraining_data.py", "--train", corpus, "--valid", valid,
                        "--vocab-size", "100", "--destdir", tmp_path / "out")
    assert result.returncode == 1, result.stderr[-2000:]
    (error,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    longest = re.fullmatch(
        rf"error: --train {re.escape(str(corpus))}: every line of the training text is longer "
        r"than the 4192 bytes SentencePiece trains on \(the longest has ([\d,]+) bytes\), so it "
        r"has nothing to learn from\. Break the text into lines: a sentence or paragraph per "
        r"line \(the lines of a file stay one document\)\.", error)
    assert longest and 4_900_000 < int(longest.group(1).replace(",", "")) <= 5_100_000, error
    assert "Traceback" not in result.stderr and not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def odd_corpus_databin(wikipedia_aa, tmp_path_factory):
    """Real Wikipedia text with a line of invalid UTF-8 and a line of ~2,600 tokens (10 kB,
    beyond SentencePiece's 4,192-byte training limit), through the prep command."""
    directory = tmp_path_factory.mktemp("odd_corpus")
    with lzma.open(wikipedia_aa, "rb") as f:
        lines = list(itertools.islice(f, 1500))
    long_line = b" ".join(lines[5].split() * 400)[:10000] + b"\n"
    corpus = directory / "corpus.txt"
    corpus.write_bytes(b"".join(lines[:700]) + b"caf\xe9 au lait, \xff\xfe bytes\n" + long_line
                       + b"".join(lines[700:]))
    result = run_script("prepare_pretraining_data.py", "--train", corpus, "--valid-docs", "2",
                        "--vocab-size", "500", "--workers", "2", "--destdir", directory / "bin")
    assert result.returncode == 0, result.stderr
    return directory / "bin", result


@pytest.mark.slow
def test_non_utf8_bytes_are_replaced_and_logged(odd_corpus_databin):
    databin, result = odd_corpus_databin
    assert "1 lines had bytes that are not valid UTF-8 or NUL bytes (replaced by U+FFFD)" in (
        result.stderr)
    info = json.loads((databin / "prep_info.json").read_text())
    assert info["inputs"]["train"][0]["undecodable_lines"] == 1


@pytest.mark.slow
def test_line_longer_than_tokens_per_sample(odd_corpus_databin, caplog):
    """Packed blocks (--sample-break-mode none, the recipes) split it; complete-sentence blocks
    cannot, and fairseq drops it from training with a warning."""
    databin, _ = odd_corpus_databin
    blocks = {}  # mode -> (longest block, blocks dropped)
    for mode in ("none", "complete"):
        _, task, _, _ = fairseq_setup(databin, "--sample-break-mode", mode)
        task.load_dataset("train")
        dataset = task.dataset("train")
        with caplog.at_level(logging.WARNING):
            itr = task.get_batch_iterator(dataset, max_sentences=8, max_positions=64,
                                          ignore_invalid_inputs=True, seed=1)
        kept = sum(len(b) for b in itr.frozen_batches)
        blocks[mode] = (int(np.max(dataset.sizes)), len(dataset) - kept)
    assert blocks["none"] == (64, 0)
    longest, dropped = blocks["complete"]
    assert longest > 2000 and dropped >= 1
    assert f"{dropped} samples have invalid sizes and will be skipped" in caplog.text
