"""Shared fixtures: a synthetic data-bin for the core tests, real data read in place from
../shared (never copied into the repository; tests that need it are skipped where it is absent)
and fairseq set-ups built from command lines.
"""

import itertools
import lzma
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
CORPUS = SHARED / "data" / "corpus"
USER_DIR = str(REPO / "taco_fairseq")


def _corpus_file(relative_path: str) -> Path:
    path = CORPUS / relative_path
    if not path.is_file():
        pytest.skip(f"shared corpus file not found: {path} (expected ../shared next to the repo)")
    return path


@pytest.fixture(scope="session")
def wikipedia_aa() -> Path:
    """WikiExtractor output, 6514 articles as ``<doc>`` blocks (xz, LF)."""
    return _corpus_file("wikipedia-en-2015-wikiextractor/AA.txt.xz")


@pytest.fixture(scope="session")
def wikitext_test() -> Path:
    """WikiText-2 raw test split: 2891 non-empty lines, CRLF (xz)."""
    return _corpus_file("wikitext-2-raw/wiki.test.raw.xz")


@pytest.fixture(scope="session")
def alice() -> Path:
    """Project Gutenberg e-book 11 (BOM, CRLF, header and footer; ends with an
    ``End of Project Gutenberg's ...`` line before the ``*** END OF ...`` marker)."""
    return _corpus_file("books/11-0.txt.xz")


@pytest.fixture(scope="session")
def earnest() -> Path:
    """Project Gutenberg e-book 844, with ``***START OF`` / ``***END OF`` markers (no space)."""
    return _corpus_file("books/pg844.txt.xz")


def xz_head(path: Path, lines: int) -> bytes:
    """The first ``lines`` raw lines (bytes, line ends kept) of an .xz file."""
    with lzma.open(path, "rb") as f:
        return b"".join(itertools.islice(f, lines))


@pytest.fixture(scope="session")
def head():
    """:func:`xz_head`, for tests that slice corpus files."""
    return xz_head


@pytest.fixture(scope="session")
def synthetic_databin(tmp_path_factory) -> Path:
    """A data-bin of seeded random "text", made with fairseq's own ``Dictionary`` and indexed
    dataset writer: a dict.txt of 200 pieces (ids 4..203, so ``<mask>`` is 204), ``train`` and
    ``valid`` splits of 400 and 120 lines of 5 to 40 pieces and ``</s>``; no SentencePiece
    model. Needs nothing outside the repository."""
    import numpy as np
    import torch
    from fairseq.data import Dictionary, indexed_dataset

    destdir = tmp_path_factory.mktemp("synthetic_databin")
    dictionary = Dictionary()
    for i in range(200):
        dictionary.add_symbol(f"\u2581w{i}", n=1000 - i)
    dictionary.save(str(destdir / "dict.txt"))
    rng = np.random.default_rng(0)
    for split, lines in (("train", 400), ("valid", 120)):
        builder = indexed_dataset.make_builder(
            str(destdir / f"{split}.bin"), impl="mmap", vocab_size=len(dictionary))
        for _ in range(lines):
            pieces = rng.integers(dictionary.nspecial, len(dictionary), rng.integers(5, 41))
            builder.add_item(torch.tensor([*pieces, dictionary.eos()], dtype=torch.int32))
        builder.finalize(str(destdir / f"{split}.idx"))
    return destdir


@pytest.fixture(scope="session")
def tiny_databin(wikipedia_aa, wikitext_test, tmp_path_factory) -> Path:
    """A data-bin made by the prep command's library from real text: the first 3,000 lines of
    Wikipedia AA (train), WikiText-2 test (valid; 2,891 lines), a 2,000-piece vocabulary
    (SentencePiece trained on 2 threads, the model the tests were written on)."""
    from taco_fairseq.prep.pretraining import PrepareOptions, prepare_pretraining_data

    destdir = tmp_path_factory.mktemp("databin")
    prepare_pretraining_data(
        PrepareOptions(
            destdir=destdir, train=[wikipedia_aa], valid=[wikitext_test], max_lines=3000,
            vocab_size=2000, num_threads=2, workers=2, force=True,
        )
    )
    return destdir


def fairseq_setup(databin, *extra):
    """Parse a ``fairseq-train`` command line; build its task, model and criterion, and check
    the checkpoint it would load, as its ``load_checkpoint`` does
    (:func:`taco_fairseq.resume.restore_config`).

    Returns:
        (cfg, task, model, criterion) with the ``valid`` split loaded.
    """
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    from taco_fairseq.resume import restore_config

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
    restore_config(cfg.checkpoint, task, model, cfg.criterion)
    return cfg, task, model, criterion


def first_batch(task, split="valid", batch_size=4):
    """The first batch of ``split`` as fairseq's iterator yields it."""
    itr = task.get_batch_iterator(
        task.dataset(split), max_sentences=batch_size, seed=1
    ).next_epoch_itr(shuffle=False)
    return next(itr)


#: One intra-op thread per process (OpenMP and MKL, no MKL dynamic threading): the ranks do not
#: oversubscribe the cores, and a process's float reductions run in one fixed order, so a
#: computation repeated in another process (or split over ranks) is bitwise reproducible.
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "MKL_DYNAMIC": "FALSE"}


def run_fairseq(command, *args, check=True, timeout=600, env=None):
    """Run a fairseq console command (``fairseq-train``, …) of this interpreter's environment,
    with ``env`` added to the environment.

    Returns:
        the ``subprocess.CompletedProcess`` (stdout and stderr merged, text).
    """
    executable = Path(sys.executable).with_name(command)
    result = subprocess.run(
        [str(executable), *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env={**os.environ, **(env or {})},
    )
    if check and result.returncode != 0:
        raise AssertionError(f"{command} failed ({result.returncode}):\n{result.stdout[-4000:]}")
    return result


def run_script(name, *args):
    """Run ``scripts/<name>`` with this interpreter, the checkout first on ``PYTHONPATH``.

    Returns:
        the ``subprocess.CompletedProcess`` (stdout and stderr captured separately, text).
    """
    pythonpath = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    command = [sys.executable, str(REPO / "scripts" / name), *map(str, args)]
    return subprocess.run(
        command, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=pythonpath),
        cwd=REPO,
    )


def train_args(databin, save_dir, *extra):
    """A short CPU ``fairseq-train`` command line for the taco task on ``databin``."""
    return [
        databin, "--user-dir", USER_DIR, "--task", "taco_masked_lm", "--criterion", "taco",
        "--arch", "roberta_tiny", "--tokens-per-sample", "64", "--batch-size", "8",
        "--optimizer", "adam", "--lr", "5e-4", "--lr-scheduler", "polynomial_decay",
        "--warmup-updates", "5", "--total-num-update", "1000", "--max-update", "20",
        "--log-format", "json", "--log-interval", "5", "--save-dir", save_dir,
        "--no-epoch-checkpoints", "--cpu", "--num-workers", "0", "--seed", "1",
        "--save-interval-updates", "10", "--max-valid-steps", "4", *extra,
    ]


#: The pre-training recipes as documented (examples/taco/config links to taco_fairseq/config).
RECIPES = REPO / "examples" / "taco" / "config" / "pretraining"


def compose_recipe(name):
    """The hydra config ``fairseq-hydra-train --config-name NAME`` builds from a pre-training
    recipe (``task.data`` and ``common.user_dir`` set to placeholders), with fairseq's
    defaults added."""
    from fairseq.dataclass.initialize import add_defaults, hydra_init
    from hydra import compose, initialize_config_dir

    hydra_init()
    # version_base 1.1, as fairseq's own hydra calls: a later one is global and would make
    # fairseq's hydra.experimental.initialize raise in the tests that follow
    with initialize_config_dir(config_dir=str(RECIPES), version_base="1.1"):
        cfg = compose(config_name=name, overrides=["task.data=/data", "++common.user_dir=/u"])
    add_defaults(cfg)
    return cfg


#: Fixtures that run a program in a subprocess (fairseq-train): the tests that use one, directly
#: or through another fixture, are marked ``slow`` (:func:`pytest_collection_modifyitems`).
SLOW_FIXTURES = frozenset({"trained_checkpoint"})


def pytest_configure(config):
    """Under pytest-xdist (scripts/test.sh runs ``-n auto``), each worker and the fairseq
    processes its tests start get their share of the cores, so that the workers' torch
    threads do not fight over them (a thread count set by the caller is kept)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        threads = str(max(1, (os.cpu_count() or 1) // workers))
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ.setdefault(name, threads)
        import torch

        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


def pytest_collection_modifyitems(items):
    """Mark ``slow`` every test that uses one of :data:`SLOW_FIXTURES`."""
    for item in items:
        if SLOW_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def trained_checkpoint(tiny_databin, tmp_path_factory):
    """A roberta_tiny TACO run of 20 updates; returns its save directory."""
    save_dir = tmp_path_factory.mktemp("taco_run")
    run_fairseq("fairseq-train", *train_args(tiny_databin, save_dir))
    return save_dir


@pytest.fixture(scope="session")
def glue_data() -> Path:
    """The GLUE task directories in ../shared (RTE, MRPC, CoLA, STS-B, SST-2; original layout)."""
    path = SHARED / "data" / "glue"
    if not path.is_dir():
        pytest.skip(f"shared GLUE data not found: {path}")
    return path


@pytest.fixture(scope="session")
def glue_databin(glue_data, tiny_databin, tmp_path_factory) -> Path:
    """The five real GLUE tasks prepared by the GLUE prep command's library with the
    SentencePiece model and dict.txt of ``tiny_databin`` (2 workers); one directory per task."""
    from taco_fairseq.glue.databin import GluePrepOptions, prepare_glue

    destdir = tmp_path_factory.mktemp("glue")
    prepare_glue(GluePrepOptions(glue_dir=glue_data, pretraining_data=tiny_databin,
                                 destdir=destdir, workers=2))
    return destdir


@pytest.fixture(scope="session")
def finetuned_checkpoint(glue_databin, trained_checkpoint, tmp_path_factory) -> Path:
    """``trained_checkpoint`` fine-tuned on RTE of ``glue_databin`` for 1 update with the GLUE
    runner's recipe (fairseq's ``sentence_prediction``); returns its ``checkpoint_best.pt``."""
    from taco_fairseq.glue.databin import read_prep_info
    from taco_fairseq.glue.recipes import Hyperparameters, finetune_args
    from taco_fairseq.glue.tasks import get_task

    task_dir, save_dir = glue_databin / "RTE", tmp_path_factory.mktemp("rte_run")
    run_fairseq("fairseq-train", *finetune_args(
        get_task("RTE"), task_dir, trained_checkpoint / "checkpoint_last.pt",
        arch="roberta_tiny", max_positions=64,
        train_rows=read_prep_info(task_dir)["splits"]["train"]["rows"],
        hyper=Hyperparameters(16, 1e-5, 1), seed=1, save_dir=save_dir, user_dir=USER_DIR,
        extra=("--cpu", "--num-workers", "0"), max_updates=1))
    return save_dir / "checkpoint_best.pt"


def measured_out(directory, rows):
    """A taco-compare ``--out`` whose phase 2 measured ``rows`` (``OUT/measures/<name>.json``
    per row, as :func:`taco_fairseq.comparison.tables.measured_rows` reads them)."""
    from taco_fairseq.comparison.tables import checkpoint_name

    (Path(directory) / "measures").mkdir(parents=True)
    for row in rows:
        (Path(directory) / "measures" / f"{checkpoint_name(row)}.json").write_text(json.dumps(row))
    return Path(directory)
