"""fairseq checkpoints load under torch's weights-only unpickler once taco_fairseq is imported."""

import argparse
import contextlib
import errno
import io
import pickle
import re

import numpy as np
import pytest
import torch
from fairseq import checkpoint_utils
from fairseq.models.roberta import RobertaModel

import taco_fairseq  # noqa: F401  (registers the allow-list)
from conftest import run_fairseq, train_args


def test_own_checkpoint_loads_weights_only(trained_checkpoint):
    state = torch.load(trained_checkpoint / "checkpoint_last.pt", weights_only=True)
    assert isinstance(state["cfg"]["model"], argparse.Namespace)  # legacy-arch model config
    state = checkpoint_utils.load_checkpoint_to_cpu(str(trained_checkpoint / "checkpoint_last.pt"))
    assert state["cfg"].task._name == "taco_masked_lm"
    assert state["extra_state"]["train_iterator"]["iterations_in_epoch"] > 0


def test_hub_loading_with_sentencepiece(trained_checkpoint, tiny_databin):
    hub = RobertaModel.from_pretrained(
        str(trained_checkpoint),
        checkpoint_file="checkpoint_last.pt",
        data_name_or_path=str(tiny_databin),
        bpe="sentencepiece",
        sentencepiece_model=str(tiny_databin / "sentencepiece.bpe.model"),
    )
    hub.eval()
    tokens = hub.encode("The film was released in 2006 .")
    assert tokens[0] == hub.task.source_dictionary.bos()
    assert hub.task.source_dictionary.unk() not in tokens.tolist()
    assert hub.decode(tokens) == "The film was released in 2006 ."
    features = hub.extract_features(tokens)
    assert features.shape == (1, len(tokens), 128)
    assert hub.fill_mask("The film was <mask> in 2006 .", topk=2)


def test_resume_from_checkpoint_last_and_restore_file(trained_checkpoint, tiny_databin, tmp_path):
    # continue the 20-update run in place: fairseq picks up checkpoint_last.pt
    copy = tmp_path / "continued"
    copy.mkdir()
    (copy / "checkpoint_last.pt").write_bytes((trained_checkpoint / "checkpoint_last.pt")
                                             .read_bytes())
    out = run_fairseq("fairseq-train", *train_args(tiny_databin, copy, "--max-update", "25"))
    assert "epoch 1 @ 20 updates" in out.stdout  # loaded where it stopped
    assert '"num_updates": "25"' in out.stdout
    # and from an explicit --restore-file into a new directory
    fresh = tmp_path / "fresh"
    restore = trained_checkpoint / "checkpoint_1_10.pt"
    out = run_fairseq(
        "fairseq-train",
        *train_args(tiny_databin, fresh, "--max-update", "25", "--restore-file", restore),
    )
    assert f"Loaded checkpoint {restore} (epoch 1 @ 10 updates)" in out.stdout


@pytest.mark.slow
def test_stock_fairseq_roberta_checkpoint_loads(tiny_databin, tmp_path):
    run_fairseq(
        "fairseq-train", tiny_databin, "--task", "masked_lm", "--criterion", "masked_lm",
        "--arch", "roberta", "--encoder-layers", "1", "--encoder-embed-dim", "32",
        "--encoder-ffn-embed-dim", "64", "--encoder-attention-heads", "2",
        "--tokens-per-sample", "32", "--batch-size", "4", "--optimizer", "adam", "--lr", "1e-4",
        "--max-update", "2", "--save-dir", tmp_path, "--cpu", "--num-workers", "0",
        "--no-epoch-checkpoints", "--disable-validation",
    )
    state = checkpoint_utils.load_checkpoint_to_cpu(str(tmp_path / "checkpoint_last.pt"))
    assert state["cfg"].task._name == "masked_lm"


def test_legacy_pickles_with_namespace_and_numpy_1_scalars():
    """Older checkpoints hold ``args`` as a Namespace and numpy scalars pickled by numpy 1.x
    (``numpy.core.multiarray.scalar``)."""
    state = {
        "args": argparse.Namespace(arch="roberta_base", lr=[1e-4]),
        "extra_state": {"val_loss": np.float64(2.5), "best": np.float32(2.25)},
        "model": {"w": torch.ones(2)},
    }
    buffer = io.BytesIO()
    torch.save(state, buffer, _use_new_zipfile_serialization=False, pickle_protocol=2)
    legacy = buffer.getvalue().replace(b"numpy._core.multiarray\nscalar", b"numpy.core.multiarray\nscalar")
    assert legacy != buffer.getvalue()
    loaded = torch.load(io.BytesIO(legacy), weights_only=True)
    assert loaded["args"].arch == "roberta_base"
    assert loaded["extra_state"]["val_loss"] == 2.5


def test_code_running_pickles_are_still_refused():
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    buffer = io.BytesIO()
    torch.save({"x": Evil()}, buffer)
    buffer.seek(0)
    with pytest.raises(pickle.UnpicklingError):
        torch.load(buffer, weights_only=True)


def test_a_file_that_is_no_checkpoint_is_named(tmp_path):
    from taco_fairseq.metadata import load_lazily
    from taco_fairseq.errors import OptionError

    notes = tmp_path / "notes.pt"
    notes.write_text("not weights\n")
    with pytest.raises(OptionError, match=f"{notes} cannot be read as a checkpoint") as error:
        load_lazily(notes)
    # torch's diagnosis in one line, without its advice to load with weights_only=False
    assert "\n" not in str(error.value) and "weights_only" not in str(error.value)
    assert "(UnpicklingError: Unsupported operand" in str(error.value)
    # cut short at any length (torch's memory-mapped load raises OSError for some)
    whole = io.BytesIO()
    torch.save({"model": {"w": torch.zeros(40_000)}}, whole)
    cut = tmp_path / "cut.pt"
    for length in range(0, len(whole.getvalue()), 2_000):
        cut.write_bytes(whole.getvalue()[:length])
        with pytest.raises(OptionError, match=f"{cut} cannot be read as a checkpoint"):
            load_lazily(cut)
    other = tmp_path / "tensor.pt"
    torch.save({"weights": torch.zeros(2)}, other)
    with pytest.raises(OptionError, match=f"{other} is not a fairseq checkpoint"):
        load_lazily(other)


def test_a_relative_data_path_is_found_beside_a_parent_of_the_checkpoint(tmp_path,
                                                                          monkeypatch):
    """A run started in the repository root records ``data-bin/x``; its checkpoint lies in
    ``checkpoints/run/``: the data-bin is found from anywhere (README's layout)."""
    from taco_fairseq.metadata import recorded_data_dir

    (tmp_path / "data-bin" / "x").mkdir(parents=True)
    checkpoint = tmp_path / "checkpoints" / "run" / "checkpoint_last.pt"
    checkpoint.parent.mkdir(parents=True)
    monkeypatch.chdir(checkpoint.parent)
    state = {"cfg": {"task": {"data": "data-bin/x"}}}
    assert recorded_data_dir(checkpoint, state) == str(tmp_path / "data-bin" / "x")
    assert recorded_data_dir(checkpoint, {"cfg": {"task": {"data": "nowhere"}}}) == "nowhere"


def test_the_data_a_checkpoint_was_trained_on_is_named_only_where_the_file_is(tmp_path):
    """A GLUE fine-tuning records its task directory, which holds no SentencePiece model: the
    hint says so instead of naming a file that does not exist."""
    from taco_fairseq.metadata import trained_on

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "dict.txt").write_text("a 1\n")
    state = {"cfg": {"task": {"data": str(tmp_path / "data")}}}
    checkpoint = tmp_path / "checkpoint_best.pt"
    assert trained_on(checkpoint, state) == f" It was trained on {tmp_path / 'data' / 'dict.txt'}."
    assert trained_on(checkpoint, state, "sentencepiece.bpe.model") == (
        f" It was trained on {tmp_path / 'data'} (no sentencepiece.bpe.model there).")
    assert trained_on(checkpoint, {"cfg": {"task": {}}}) == ""


def test_fingerprints_keep_the_layout_of_older_checkpoints(trained_checkpoint, tiny_databin,
                                                           tmp_path):
    """Checkpoints written before the fingerprints moved into the task's saved state (by the
    load-time recorder of taco_fairseq 0.1.0) hold them as ``task_state`` entries
    ``dictionary_fingerprint`` ({size, sha256 of the symbols joined by newlines}) and
    ``sentencepiece_sha256``: they are written and read the same way."""
    import hashlib

    from fairseq.data import Dictionary

    from taco_fairseq import hub
    from taco_fairseq.metadata import check_training_data, load_lazily
    from taco_fairseq.neighbour_attention import STATE_KEY as NEIGHBOUR_STATE_KEY

    state = torch.load(trained_checkpoint / "checkpoint_last.pt", weights_only=True)
    dictionary = Dictionary.load(str(tiny_databin / "dict.txt"))
    dictionary.add_symbol("<mask>")
    spm_model = tiny_databin / "sentencepiece.bpe.model"
    old_layout = {
        "dictionary_fingerprint": {
            "size": len(dictionary),
            "sha256": hashlib.sha256("\n".join(dictionary.symbols).encode("utf-8")).hexdigest()},
        "sentencepiece_sha256": hashlib.sha256(spm_model.read_bytes()).hexdigest(),
    }
    # what new checkpoints record, besides the last validation's neighbour share
    assert {k: v for k, v in state["task_state"].items() if k != NEIGHBOUR_STATE_KEY} == old_layout
    assert state["task_state"][NEIGHBOUR_STATE_KEY]["update"] > 0
    # an old checkpoint (the old layout written by hand) loads and is checked alike
    state["task_state"] = old_layout
    old = tmp_path / "old.pt"
    torch.save(state, old)
    check_training_data(old, load_lazily(old), dictionary, "dict.txt", spm_model)
    assert hub.from_pretrained(old, data_dir=tiny_databin).encode("The film").numel() > 2
    other = tmp_path / "other.model"
    other.write_bytes(spm_model.read_bytes() + b"\n")
    with pytest.raises(ValueError, match="trained with another SentencePiece model"):
        check_training_data(old, load_lazily(old), dictionary, "dict.txt", other)
    swapped = Dictionary.load(str(tiny_databin / "dict.txt"))
    swapped.symbols[10], swapped.symbols[11] = swapped.symbols[11], swapped.symbols[10]
    swapped.add_symbol("<mask>")
    with pytest.raises(ValueError, match="trained with another dictionary"):
        check_training_data(old, load_lazily(old), swapped, "dict.txt")


class _FakeTrainer:
    """What fairseq's ``checkpoint_utils.save_checkpoint`` uses of a ``Trainer`` at update 10:
    its ``save_checkpoint`` writes a checkpoint through ``torch_persistent_save``, as fairseq's
    does."""

    data_parallel_rank, should_save_checkpoint_on_current_rank, checkpoint_suffix = 0, True, ""
    always_call_state_dict_during_save_checkpoint, task = False, None

    def consolidate_optimizer(self):
        pass

    def get_num_updates(self):
        return 10

    def save_checkpoint(self, filename, extra_state):
        checkpoint_utils.torch_persistent_save(
            {"model": {"w": torch.zeros(50_000)}, "extra_state": extra_state}, filename)


class _FakeEpochIterator:
    epoch = 1

    def end_of_epoch(self):
        return False

    def state_dict(self):
        return {"epoch": 1, "iterations_in_epoch": 10}


def _disk_full_after(write, size):
    """``write(source, target)`` (``target`` a path or a file) that writes the first ``size``
    bytes of what ``write`` would, then fails as a full disk does."""
    def failing(source, target, *args, **kwargs):
        written = io.BytesIO()
        write(source, written, *args, **kwargs)
        with contextlib.ExitStack() as files:
            f = target if hasattr(target, "write") else files.enter_context(open(target, "wb"))
            f.write(written.getvalue()[:size])
            f.flush()
            raise OSError(errno.ENOSPC, "No space left on device")
    return failing


def _copy_to_buffer(source, buffer):
    with open(source, "rb") as f:
        buffer.write(f.read())


@pytest.mark.parametrize("unwritten", ["checkpoint_last.pt", "checkpoint_1_10.pt"])
def test_a_full_disk_at_a_save_leaves_no_cut_file_and_says_so_in_one_line(tmp_path, monkeypatch,
                                                                          unwritten):
    """fairseq saves update 10 to checkpoint_1_10.pt, then copies it to checkpoint_last.pt; the
    disk fills up during the copy (or during the first file). Before, a full disk during the
    copy left checkpoint_last.pt cut (the previous one overwritten) and a 30-line traceback;
    now the previous checkpoint_last.pt is left whole, no partial file is left, and the error
    is one line naming the directory."""
    import shutil

    from omegaconf import OmegaConf
    from fairseq.dataclass.configs import CheckpointConfig

    from taco_fairseq import fairseq_patches
    from taco_fairseq.errors import NoSpaceError

    fairseq_patches.apply()  # idempotent: also where taco_fairseq was imported before fairseq
    previous = tmp_path / "checkpoint_last.pt"
    torch.save({"model": {"w": torch.ones(3)}}, previous)
    before = previous.read_bytes()
    if unwritten == "checkpoint_1_10.pt":
        monkeypatch.setattr(torch, "save", _disk_full_after(torch.save, 2000))
    else:
        monkeypatch.setattr(shutil, "copyfile", _disk_full_after(_copy_to_buffer, 2000))
    cfg = OmegaConf.structured(CheckpointConfig(save_dir=str(tmp_path), save_interval_updates=10,
                                                no_epoch_checkpoints=True))
    with pytest.raises(NoSpaceError) as error:
        checkpoint_utils.save_checkpoint(cfg, _FakeTrainer(), _FakeEpochIterator(), None)
    message = str(error.value)
    assert re.fullmatch(
        rf"no space left on the device of --save-dir {re.escape(str(tmp_path))} \([\d.]+ \w+ "
        rf"free\): {unwritten} was not written and the checkpoints saved before are whole. "
        r"Free space there \(e.g. keep fewer checkpoints: --keep-interval-updates, "
        r"--no-epoch-checkpoints\) or move the run to another --save-dir, then rerun the same "
        "command: it resumes from checkpoint_last.pt", message), message
    assert previous.read_bytes() == before  # the previous checkpoint_last.pt, whole
    written = {"checkpoint_last.pt"} | ({"checkpoint_1_10.pt"} - {unwritten})
    assert {p.name for p in tmp_path.iterdir()} == written  # and no partial file
    if unwritten == "checkpoint_last.pt":  # the file written before the copy is whole
        state = torch.load(tmp_path / "checkpoint_1_10.pt", weights_only=True)
        assert state["model"]["w"].numel() == 50_000
