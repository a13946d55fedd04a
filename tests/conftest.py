"""Shared fixtures: real data from ../shared and fairseq set-ups built from command lines."""

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
USER_DIR = str(REPO / "taco_fairseq")


def shared_path(*parts) -> Path:
    """A path under ../shared; skips the test when the shared data is absent."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"shared data not found: {path}")
    return path


@pytest.fixture(scope="session")
def tiny_databin():
    path = Path(os.environ.get("TACO_TEST_DATABIN", "/tmp/quick/bin"))
    if not path.exists():
        pytest.skip("no data-bin")
    return path


def fairseq_setup(databin, *extra):
    """Parse a ``fairseq-train`` command line; build its task, model and criterion.

    Returns:
        (cfg, task, model, criterion) with the ``valid`` split loaded.
    """
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    parser = options.get_training_parser()
    argv = [
        str(databin), "--user-dir", USER_DIR, "--task", "taco_masked_lm",
        "--criterion", "taco", "--arch", "roberta_tiny", "--cpu",
        "--tokens-per-sample", "64", "--seed", "1", *extra,
    ]
    args = options.parse_args_and_arch(parser, argv)
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    task.load_dataset("valid")
    model = task.build_model(cfg.model)
    criterion = task.build_criterion(cfg.criterion)
    return cfg, task, model, criterion


def first_batch(task, split="valid", batch_size=4):
    """The first batch of ``split`` as fairseq's iterator yields it."""
    itr = task.get_batch_iterator(
        task.dataset(split), max_sentences=batch_size, seed=1
    ).next_epoch_itr(shuffle=False)
    return next(itr)


def run_fairseq(command, *args, check=True, timeout=600):
    """Run a fairseq console command (``fairseq-train``, …) of this interpreter's environment.

    Returns:
        the ``subprocess.CompletedProcess`` (stdout and stderr merged, text).
    """
    import subprocess
    import sys

    executable = Path(sys.executable).with_name(command)
    result = subprocess.run(
        [str(executable), *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"{command} failed ({result.returncode}):\n{result.stdout[-4000:]}")
    return result


def train_args(databin, save_dir, *extra):
    """A short CPU ``fairseq-train`` command line for the taco task on ``databin``."""
    return [
        databin, "--user-dir", USER_DIR, "--task", "taco_masked_lm", "--criterion", "taco",
        "--arch", "roberta_tiny", "--tokens-per-sample", "64", "--batch-size", "8",
        "--optimizer", "adam", "--lr", "5e-4", "--lr-scheduler", "polynomial_decay",
        "--warmup-updates", "5", "--total-num-update", "1000", "--max-update", "20",
        "--log-format", "json", "--log-interval", "5", "--save-dir", save_dir,
        "--no-epoch-checkpoints", "--cpu", "--num-workers", "0", "--seed", "1",
        "--save-interval-updates", "10", *extra,
    ]


@pytest.fixture(scope="session")
def trained_checkpoint(tiny_databin, tmp_path_factory):
    """A roberta_tiny TACO run of 20 updates; returns its save directory."""
    save_dir = tmp_path_factory.mktemp("taco_run")
    run_fairseq("fairseq-train", *train_args(tiny_databin, save_dir))
    return save_dir
