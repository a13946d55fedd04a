"""taco-prepare-data never loses a data-bin: --force replaces it only once the new one is
complete (an error or Ctrl-C leaves it whole), and a second run into the same --destdir is
refused while one runs; plus the model its closing hint suggests."""

import os
import re
import signal
import subprocess
import sys
import threading

import pytest

from conftest import REPO
from taco_fairseq.cli import prepare_data
from taco_fairseq.models import SIZES
from taco_fairseq.prep import pretraining
from taco_fairseq.prep.destdir import LOCK_SUFFIX, DestdirInUseError, sibling
from taco_fairseq.prep.pretraining import PrepareOptions, prepare_pretraining_data

#: A data-bin of an earlier run (its bytes do not matter here) and a file of the user's.
OLD_DATABIN = {"dict.txt": "a 1\n", "train.bin": "old", "train.idx": "old",
               "shard3/train.bin": "old shard", "notes.md": "the user's"}
#: A line of a tqdm progress bar ("encoding train.txt:  48%|████▊     | 16768/34909 …").
PROGRESS_BAR = re.compile(r"\d+%\|")


@pytest.fixture
def old_databin(tmp_path):
    destdir = tmp_path / "data-bin"
    for name, text in OLD_DATABIN.items():
        (destdir / name).parent.mkdir(parents=True, exist_ok=True)
        (destdir / name).write_text(text)
    return destdir


def _contents(directory):
    return {str(p.relative_to(directory)): p.read_bytes().decode("utf-8", "replace")
            for p in directory.rglob("*") if p.is_file()}


def _options(destdir, wikitext_test, **changes):
    """The first 40 WikiText lines (one document), validated on themselves, 300 pieces."""
    return PrepareOptions(destdir=destdir, train=[wikitext_test], valid=[wikitext_test],
                          max_lines=40, vocab_size=300, force=True, **changes)


def _interrupt(*args, **kwargs):
    raise KeyboardInterrupt


@pytest.mark.parametrize("ending", ["Ctrl-C", "error"])
def test_force_keeps_the_old_databin_whole_when_the_run_ends_early(
    old_databin, wikitext_test, monkeypatch, ending
):
    """Before: --force removed the old outputs first and the clean-up the rest: an empty
    directory. Now the run builds beside it, and leaves nothing of its own."""
    options = _options(old_databin, wikitext_test)
    if ending == "Ctrl-C":  # during SentencePiece training, as a user found it
        monkeypatch.setattr(pretraining, "train_sentencepiece", _interrupt)
        with pytest.raises(KeyboardInterrupt):
            prepare_pretraining_data(options)
    else:
        options.vocab_size = 8000
        with pytest.raises(ValueError, match="--vocab-size 8000 is too large"):
            prepare_pretraining_data(options)
    assert _contents(old_databin) == OLD_DATABIN
    assert os.listdir(old_databin.parent) == [old_databin.name]


def test_force_replaces_the_outputs_and_keeps_the_other_files(old_databin, wikitext_test):
    prepare_pretraining_data(_options(old_databin, wikitext_test))
    contents = _contents(old_databin)
    assert contents["notes.md"] == "the user's" and contents["dict.txt"] != "a 1\n"
    assert not (old_databin / "shard3").exists()  # an output of the old run
    assert {"train.bin", "valid.idx", "sentencepiece.bpe.model", "prep_info.json"} <= set(contents)
    assert os.listdir(old_databin.parent) == [old_databin.name]


def test_a_second_run_is_refused_while_one_writes_the_destdir(
    old_databin, wikitext_test, monkeypatch, capsys
):
    """Before: both ran; the first said it wrote the second's counts, the second failed on a
    missing text/train.txt, and the directory ended empty. Now the second (the command,
    started while the first trains SentencePiece) refuses in one line and changes nothing."""
    training, go_on = threading.Event(), threading.Event()
    train_sentencepiece = pretraining.train_sentencepiece

    def held_up(*args, **kwargs):
        training.set()
        go_on.wait(60)
        return train_sentencepiece(*args, **kwargs)

    monkeypatch.setattr(pretraining, "train_sentencepiece", held_up)
    monkeypatch.setattr(prepare_data, "configure_logging", lambda: None)
    outcome = []
    first = threading.Thread(target=lambda: outcome.append(
        prepare_pretraining_data(_options(old_databin, wikitext_test))))
    first.start()
    try:
        assert training.wait(60)
        with pytest.raises(SystemExit) as refused:
            prepare_data.main(["--train", str(wikitext_test), "--valid-docs", "1", "--force",
                               "--destdir", str(old_databin)])
        assert _contents(old_databin) == OLD_DATABIN
    finally:
        go_on.set()
        first.join(60)
    assert refused.value.code == (
        f"error: --destdir {old_databin}: another taco-prepare-data (process {os.getpid()}) is "
        f"writing it and holds {sibling(old_databin, LOCK_SUFFIX)}; wait for it to end, or "
        "stop it, and run this again")
    assert outcome and (old_databin / "valid.bin").exists()  # the first run completed
    assert os.listdir(old_databin.parent) == [old_databin.name]  # the lock is gone too


def test_a_holder_that_died_leaves_nothing_that_blocks_a_rerun(old_databin, wikitext_test):
    """What a run killed with kill -9 leaves: its lock file (no process holds the lock any
    more) and its half-written build directory."""
    sibling(old_databin, LOCK_SUFFIX).write_text("999999\n")
    (sibling(old_databin, ".partial") / "text").mkdir(parents=True)
    prepare_pretraining_data(_options(old_databin, wikitext_test))
    assert (old_databin / "valid.bin").exists()
    assert os.listdir(old_databin.parent) == [old_databin.name]


def test_a_held_lock_is_named_with_its_process(tmp_path, wikitext_test):
    import fcntl

    lock = sibling(tmp_path / "out", LOCK_SUFFIX)
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        held.write("4242\n")
        held.flush()
        with pytest.raises(DestdirInUseError, match=r"another taco-prepare-data \(process 4242\)"):
            prepare_pretraining_data(_options(tmp_path / "out", wikitext_test))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("tokens, arch", [
    (0, "roberta_tiny"), (300_000, "roberta_tiny"), (70_000_000, "roberta_mini"),
    (300_000_000, "roberta_small"), (10**10, "roberta_medium"),
])
def test_the_closing_hint_suggests_a_model_that_fits_the_corpus(tokens, arch):
    """Before: --arch roberta_small for every corpus (a few hundred thousand tokens too)."""
    assert arch in SIZES
    assert prepare_data.suggested_arch(tokens) == arch


@pytest.mark.slow
def test_ctrl_c_says_one_line_and_keeps_the_old_databin(old_databin, wikipedia_aa):
    """Ctrl-C (SIGINT to the process group, as a terminal sends it) during SentencePiece
    training of a --force run: before, a KeyboardInterrupt traceback after the training had
    ended, and an empty directory."""
    command = [sys.executable, REPO / "scripts" / "prepare_pretraining_data.py", "--train",
               wikipedia_aa,
               "--valid-fraction", "0.05", "--max-lines", "20000", "--vocab-size", "4000",
               "--workers", "1", "--force", "--destdir", old_databin]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    # as from a terminal: a test run started in the background (`... &`) has SIGINT ignored,
    # which its children inherit and Python then leaves ignored (no KeyboardInterrupt)
    process = subprocess.Popen(list(map(str, command)), stderr=subprocess.PIPE, text=True,
                               cwd=REPO, env=env, start_new_session=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    stderr = []
    for line in process.stderr:
        stderr.append(line)
        if "training a unigram SentencePiece model" in line:
            os.killpg(process.pid, signal.SIGINT)
            break
    stderr.append(process.stderr.read())
    assert process.wait(60) == prepare_data.INTERRUPTED_STATUS, "".join(stderr)[-3000:]
    stderr = "".join(stderr)
    assert "Traceback" not in stderr
    after = stderr.split("training a unigram SentencePiece model")[1].splitlines()[1:]
    assert [line for line in after if line.strip() and not PROGRESS_BAR.search(line)] == [
        f"interrupted (Ctrl-C): {old_databin} is left as it was, nothing of this run is kept"]
    assert _contents(old_databin) == OLD_DATABIN
    assert os.listdir(old_databin.parent) == [old_databin.name]
