"""The whole pipeline on real text: prep command -> fairseq-train -> resume -> log table."""

import math

import pytest

from conftest import run_fairseq, run_script, train_args
from taco_fairseq.analysis.training_log import parse_json_log

#: The prep command, fairseq-train and the log table in subprocesses.
pytestmark = pytest.mark.slow


def test_prepare_train_resume(wikipedia_aa, tmp_path):
    databin = tmp_path / "data-bin"
    prep = run_script(
        "prepare_pretraining_data.py", "--train", wikipedia_aa, "--max-lines", "4000",
        "--valid-docs", "5", "--vocab-size", "2000", "--workers", "2", "--destdir", databin,
    )
    assert prep.returncode == 0, prep.stderr
    save_dir = tmp_path / "checkpoints"
    first = run_fairseq("fairseq-train", *train_args(
        databin, save_dir, "--max-update", "80", "--log-interval", "10",
        "--save-interval-updates", "40", "--lr", "1e-3"))
    train = [r for r in parse_json_log(first.stdout.splitlines()) if r["kind"] == "train_inner"]
    assert [r["num_updates"] for r in train] == [10, 20, 30, 40, 50, 60, 70, 80]
    for key in ("loss", "mlm_loss", "tc_loss", "tc_accuracy"):
        assert all(math.isfinite(r[key]) for r in train), key
    early, late = train[:2], train[-2:]

    def mean(rows, key):
        return sum(r[key] for r in rows) / len(rows)

    assert mean(late, "mlm_loss") < mean(early, "mlm_loss") - 0.5
    assert mean(late, "tc_loss") < mean(early, "tc_loss") - 1.0
    assert mean(late, "tc_accuracy") > mean(early, "tc_accuracy") + 0.1
    valid = [r for r in parse_json_log(first.stdout.splitlines()) if r["kind"] == "valid"]
    assert valid and all(math.isfinite(r["valid_tc_loss"]) for r in valid)

    # started again with a larger --max-update, the run resumes from checkpoint_last.pt
    second = run_fairseq("fairseq-train", *train_args(
        databin, save_dir, "--max-update", "90", "--log-interval", "10",
        "--save-interval-updates", "40", "--lr", "1e-3"))
    assert "epoch 1 @ 80 updates" in second.stdout
    resumed = [r for r in parse_json_log(second.stdout.splitlines()) if r["kind"] == "train_inner"]
    assert [r["num_updates"] for r in resumed] == [90]

    log = tmp_path / "train.log"
    log.write_text(first.stdout)
    table = run_script("summarize_training_log.py", log).stdout.splitlines()
    assert table[0].split() == ["num_updates", "mlm_loss", "tc_loss", "tc_accuracy"]
    assert len(table) == 1 + len(train)
