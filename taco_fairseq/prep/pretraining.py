"""Turn raw text files into a fairseq data-bin directory for masked-LM pre-training.

Steps (all streaming; memory does not grow with the corpus):

1. read the ``train``/``valid``/``test`` input files into document text files
   (:mod:`taco_fairseq.prep.corpus`, :mod:`taco_fairseq.prep.documents`);
2. split the training text by whole documents: with ``valid_fraction`` (a seeded sample of
   that share of the text) or ``valid_docs`` (the last documents) the validation split, and
   with ``shards`` > 1 the training shards (documents dealt out by size);
3. train a SentencePiece model on a sample of the training text
   (:func:`taco_fairseq.prep.vocabulary.train_sentencepiece`, ``num_threads`` threads);
4. encode every split with SentencePiece (``workers`` threads) and write the ids as a fairseq
   dataset (:class:`taco_fairseq.prep.binarize.DatasetWriter`, the bytes
   ``fairseq-preprocess --only-source`` would write), counting the pieces of the training split;
5. write ``dict.txt`` from the model and the training counts.

Each phase logs its wall time, CPU time and peak resident memory (``seconds``, ``cpu_seconds``
and ``peak_rss_mib`` in ``prep_info.json``); the slow ones show a progress bar.

Layout of the output directory::

    dict.txt                  fairseq dictionary; fairseq id == SentencePiece id, <mask> last
    sentencepiece.bpe.model   the model, for --bpe sentencepiece --sentencepiece-model
    train.bin  train.idx      binarized splits (fairseq "mmap" datasets); one entry per line
    valid.bin  valid.idx        of text, an entry holding only </s> between two documents
    test.bin   test.idx       (only with test files)
    prep_info.json            inputs, options, counts, versions and timings; "tokens" (as
                              in the log) are SentencePiece pieces, not counting the </s>
                              that ends each dataset entry; "unk_tokens" those of them <unk>
    text/                     only with keep_text: {split}.txt, the clean document text
                              (train.shard{i}.txt with shards)

With ``shards`` = N > 1 the data-bins are ``shard0 ... shard{N-1}`` in the output directory
(fairseq's sharded data, ``--data DIR/shard0:DIR/shard1:...``, one shard per epoch): each holds
``dict.txt``, ``sentencepiece.bpe.model`` and ``train.bin``/``train.idx``, ``shard0`` also the
validation and test splits (fairseq reads those from the first path); ``prep_info.json`` (with
``data``, the colon path, and ``shards``, each shard's counts) and ``text/`` stay at the top.

The outputs are built beside the output directory, in ``.DESTDIR.partial``, and moved into it by
renames once complete (:func:`taco_fairseq.prep.destdir.build_beside`): until then, with
``force``, the directory keeps the data-bin it held, whatever ends the run (an error, Ctrl-C);
its lock ``.DESTDIR.lock`` refuses a second run into the same directory while one runs.
"""

import contextlib
import itertools
import json
import logging
import os
import platform
import re
import resource
import shutil
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Optional

import fairseq
import numpy as np
import sentencepiece as spm
from tqdm import tqdm

from .. import __version__
from ..metadata import INFO_FILE, SENTENCEPIECE_MODEL
from .binarize import DatasetWriter
from .corpus import check_input_file
from .destdir import build_beside
from .documents import (
    balance_shards,
    count_documents,
    document_spans,
    last_documents,
    sample_documents,
    write_document_groups,
    write_documents,
)
from .vocabulary import (TRAINER_THREADS, check_trainer_threads, train_sentencepiece,
                         write_fairseq_dict)

logger = logging.getLogger(__name__)

DICT_FILE = "dict.txt"
TEXT_DIR = "text"
SPLITS = ("train", "valid", "test")
#: With ``shards`` > 1 the data-bins are ``destdir/shard0``, ``destdir/shard1``, ...
SHARD_PREFIX = "shard"
#: ``valid_docs`` holding out more than this share of the training text logs a warning.
VALID_DOCS_WARN_SHARE = 0.05
#: Seconds between two samples of the resident memory of a phase (``peak_rss_mib``).
RSS_SAMPLE_SECONDS = 0.05
#: Lines SentencePiece encodes in one call (on ``workers`` threads).
ENCODE_CHUNK_LINES = 10_000
#: Every name this module writes into the output directory (replaced with ``force``).
OUTPUT_NAMES = (SENTENCEPIECE_MODEL, DICT_FILE, INFO_FILE, TEXT_DIR) + tuple(
    f"{split}.{ext}" for split in SPLITS for ext in ("bin", "idx")
)


@dataclass
class PrepareOptions:
    """Options of :func:`prepare_pretraining_data` (the CLI options of the same names).

    Attributes:
        destdir: output directory.
        train: training input files (plain, ``.xz`` or ``.gz``); in each of ``train``,
            ``valid`` and ``test`` a file (its resolved path) may occur once.
        valid: validation input files; exclusive with ``valid_docs``.
        test: optional test input files.
        valid_docs: hold out the last this many documents of the training input as the
            validation split (:func:`~taco_fairseq.prep.documents.last_documents`; warns when
            they hold more than :data:`VALID_DOCS_WARN_SHARE` of the text); exclusive with
            ``valid`` and ``valid_fraction``.
        valid_fraction: hold out this share (0..1) of the training text, whole documents
            sampled over all of it with ``seed``
            (:func:`~taco_fairseq.prep.documents.sample_documents`), as the validation split;
            exclusive with ``valid`` and ``valid_docs``.
        shards: write the training split as this many fairseq data shards
            ``destdir/shard0 ... shard{N-1}`` (whole documents dealt out by size,
            :func:`~taco_fairseq.prep.documents.balance_shards`), each with ``dict.txt`` and
            the model, validation and test split in ``shard0``; 1: ``destdir`` is the data-bin.
        vocab_size: SentencePiece pieces, including ``<s> <pad> </s> <unk>``; the fairseq
            dictionary has as many symbols, plus ``<mask>`` added by the task.
        model_type: ``"unigram"`` or ``"bpe"``.
        character_coverage: SentencePiece's character coverage.
        input_sentence_size: at most this many training lines (a seeded sample) for
            SentencePiece training.
        seed: seed of that sample and of ``valid_fraction``'s.
        num_threads: SentencePiece's trainer threads. The model, though deterministic,
            depends on this number (not on ``workers``): part of the recipe.
        workers: processes reading the input files (one file each at a time) and
            SentencePiece's encoding threads; the outputs do not depend on it.
        max_docs: read at most this many documents of each input file.
        max_lines: read at most this many non-empty lines of each input file.
        strip_gutenberg: drop Project Gutenberg headers and footers.
        keep_text: keep the intermediate text in ``destdir/text``.
        force: write into a non-empty ``destdir``, replacing the outputs of an earlier run
            (:data:`OUTPUT_NAMES` and shard directories; other files stay) once the new
            ones are complete.
    """

    destdir: Path
    train: List[Path]
    valid: List[Path] = field(default_factory=list)
    test: List[Path] = field(default_factory=list)
    valid_docs: Optional[int] = None
    valid_fraction: Optional[float] = None
    shards: int = 1
    vocab_size: int = 30522
    model_type: str = "unigram"
    character_coverage: float = 0.9995
    input_sentence_size: int = 1_000_000
    seed: int = 1
    num_threads: int = TRAINER_THREADS
    workers: int = 1
    max_docs: Optional[int] = None
    max_lines: Optional[int] = None
    strip_gutenberg: bool = True
    keep_text: bool = False
    force: bool = False


def prepare_pretraining_data(options: PrepareOptions) -> dict:
    """Build the data-bin directory ``options.destdir`` (see the module doc).

    Returns:
        The contents of ``prep_info.json``.

    Raises:
        FileNotFoundError: an input file is missing (checked before any work).
        FileExistsError: ``destdir`` is not empty and ``force`` is not set, or is a file.
        DestdirInUseError: another ``taco-prepare-data`` is writing ``destdir``
            (:class:`taco_fairseq.prep.destdir.DestdirInUseError`).
        ValueError: invalid split options (e.g. the same file twice in one split), a
            ``num_threads`` outside SentencePiece's 1..1024, an input
            without text, a corrupt compressed input, too few documents for ``valid_docs``,
            a ``vocab_size`` that does not fit the training text, or a ``destdir`` that is a
            mount point.

    On any error (``KeyboardInterrupt`` included) nothing of this run is left and ``destdir``
    holds what it held before: a corrected rerun needs no ``force``.
    """
    inputs = _check_inputs(options)
    destdir = Path(options.destdir)
    with build_beside(destdir, force=options.force, outputs=_output_names,
                      command="taco-prepare-data") as build:
        return _prepare(options, inputs, build, destdir)


def _prepare(
    options: PrepareOptions, inputs: Dict[str, List[Path]], build: Path, destdir: Path
) -> dict:
    """Build the outputs in the empty directory ``build``; ``destdir``, where they will be
    moved, is the path ``prep_info.json`` and the log name."""
    text_dir = build / TEXT_DIR
    text_dir.mkdir()
    held_out = bool(options.valid_docs or options.valid_fraction)
    split_train = held_out or options.shards > 1
    shard_dirs = _shard_dirs(build, options.shards)
    if options.shards > 1:
        for directory in shard_dirs:
            directory.mkdir()
    final_dirs = _shard_dirs(destdir, options.shards)
    text = {split: text_dir / f"{split}.txt" for split in inputs if split != "train"}
    if held_out:
        text["valid"] = text_dir / "valid.txt"
    train_texts = [text_dir / "train.txt"] if options.shards == 1 else [
        text_dir / f"train.shard{shard}.txt" for shard in range(options.shards)
    ]
    phases: Dict[str, Dict[str, float]] = {"seconds": {}, "cpu_seconds": {}, "peak_rss_mib": {}}
    seconds = phases["seconds"]

    with _phase(phases, "read_inputs"):
        read_into = {**text, "train": text_dir / "input.txt" if split_train else train_texts[0]}
        file_stats = {}
        for split, files in inputs.items():
            file_stats[split] = write_documents(
                files,
                read_into[split],
                strip_gutenberg=options.strip_gutenberg,
                max_docs=options.max_docs,
                max_lines=options.max_lines,
                progress=_file_progress(files, split),
                workers=options.workers,
            )
    if split_train:
        with _phase(phases, "split_documents"):
            _split_training_text(
                options, read_into["train"], text["valid"] if held_out else None, train_texts
            )

    with _phase(phases, "train_sentencepiece"):
        model = train_sentencepiece(
            train_texts,
            shard_dirs[0] / SENTENCEPIECE_MODEL,
            vocab_size=options.vocab_size,
            model_type=options.model_type,
            character_coverage=options.character_coverage,
            max_sentences=options.input_sentence_size,
            seed=options.seed,
            num_threads=options.num_threads,
            source="--train " + " ".join(map(str, inputs["train"])),
        )

    # (split, shard, text): the training shards, then the other splits in shard 0
    datasets_to_write = [("train", shard, path) for shard, path in enumerate(train_texts)] + [
        (split, 0, path) for split, path in text.items()
    ]
    seconds["encode"] = seconds["binarize"] = 0.0
    with _phase(phases, "encode_and_binarize"):
        datasets = {
            (split, shard): _binarize_text(
                model, path, shard_dirs[shard] / split, options.workers, seconds,
                shown=final_dirs[shard] / split,
            )
            for split, shard, path in datasets_to_write
        }
    for name in ("encode", "binarize"):
        seconds[name] = round(seconds[name], 3)
    train_counts = sum(datasets["train", shard].counts for shard in range(options.shards))
    with _phase(phases, "write_dict"):
        dict_entries = write_fairseq_dict(model, train_counts, shard_dirs[0] / DICT_FILE)
        for shard_dir in shard_dirs[1:]:
            for name in (DICT_FILE, SENTENCEPIECE_MODEL):
                shutil.copyfile(shard_dirs[0] / name, shard_dir / name)

    shard_splits = {
        (split, shard): _split_info(path, datasets[split, shard])
        for split, shard, path in datasets_to_write
    }
    splits: Dict[str, Dict[str, int]] = {split: {} for split, _ in shard_splits}
    for (split, _), counts in shard_splits.items():
        for name, count in counts.items():
            splits[split][name] = splits[split].get(name, 0) + count
    if held_out:
        share = splits["valid"]["tokens"] / (splits["valid"]["tokens"] + splits["train"]["tokens"])
        splits["valid"]["share_of_training_input_tokens"] = round(share, 6)
    info = {
        "options": {key: _jsonable(value) for key, value in asdict(options).items()},
        "data": os.pathsep.join(str(d) for d in final_dirs),
        "inputs": {split: [asdict(s) for s in stats] for split, stats in file_stats.items()},
        "splits": splits,
        "vocab": {
            "sentencepiece_pieces": model.get_piece_size(),
            "dict_txt_entries": dict_entries,
            "fairseq_dictionary_size": 4 + dict_entries,
        },
        "versions": {
            "taco_fairseq": __version__,
            "fairseq": fairseq.__version__,
            "sentencepiece": spm.__version__,
            "python": platform.python_version(),
        },
        **phases,
    }
    if options.shards > 1:
        info["shards"] = [
            {"dir": str(final_dirs[i]), **shard_splits["train", i]} for i in range(options.shards)
        ]
    (build / INFO_FILE).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    if not options.keep_text:
        shutil.rmtree(text_dir)
    return info


def _split_info(text_path: Path, dataset: DatasetWriter) -> dict:
    lines, docs = count_documents(text_path)
    return {
        "docs": docs,
        "lines": lines,
        "dataset_entries": dataset.entries,
        "tokens": dataset.pieces,  # without the </s> of each entry, as the log
        "unk_tokens": dataset.unk_tokens,
    }


def _shard_dirs(destdir: Path, shards: int) -> List[Path]:
    """The data-bin directories: ``destdir`` itself, or ``destdir/shard0 ...``."""
    if shards == 1:
        return [destdir]
    return [destdir / f"{SHARD_PREFIX}{shard}" for shard in range(shards)]


def _split_training_text(
    options: PrepareOptions, source: Path, valid: Optional[Path], train_texts: List[Path]
) -> None:
    """Move the held-out documents of ``source`` (``valid_docs``/``valid_fraction``) to
    ``valid`` and deal the others out to ``train_texts`` (:func:`balance_shards`); removes
    ``source``. Logs the held-out share, with a warning when ``valid_docs`` holds out more
    than :data:`VALID_DOCS_WARN_SHARE` of the text."""
    spans = document_spans(source)
    sizes = spans[:, 1] - spans[:, 0]
    if options.valid_docs:
        held = last_documents(len(sizes), options.valid_docs)
    elif options.valid_fraction:
        held = sample_documents(sizes, options.valid_fraction, options.seed)
    else:
        held = np.zeros(len(sizes), dtype=bool)
    if (~held).sum() < len(train_texts):
        raise ValueError(
            f"--shards {len(train_texts)}: the training split has only {(~held).sum()} "
            "documents; use fewer shards (each needs at least one document)"
        )
    groups = np.zeros(len(sizes), dtype=np.int64)
    groups[~held] = balance_shards(sizes[~held], len(train_texts))
    if valid is not None:
        groups[held] = len(train_texts)
        share = float(sizes[held].sum()) / max(float(sizes.sum()), 1.0)
        message = (
            f"validation split: {int(held.sum())} of {len(sizes)} documents, "
            f"{sizes[held].sum() / 1e6:.3g} of {sizes.sum() / 1e6:.3g} MB of the training input "
            f"({100 * share:.2f}%)"
        )
        if options.valid_docs and share > VALID_DOCS_WARN_SHARE:
            logger.warning(
                "%s. --valid-docs %d holds out the LAST %d documents, here %.1f%% of the "
                "training text, which training never sees; --valid-fraction F holds out a "
                "stated share F of it (documents sampled over the whole input)",
                message, options.valid_docs, options.valid_docs, 100 * share,
            )
        else:
            logger.info(message)
    write_document_groups(source, spans, groups, train_texts + ([valid] if valid else []))
    source.unlink()


def _file_progress(files: List[Path], split: str) -> tqdm:
    """A bar over the input files' bytes on disk (compressed), for :func:`write_documents`."""
    return tqdm(total=sum(f.stat().st_size for f in files), unit="B", unit_scale=True,
                desc=f"reading {split} input ({len(files)} files)")


def _binarize_text(
    model: spm.SentencePieceProcessor,
    path: Path,
    prefix: Path,
    workers: int,
    seconds: Dict[str, float],
    shown: Path,
) -> DatasetWriter:
    """Encode each line of a document text file (an empty line: an entry of only ``</s>``)
    with SentencePiece on ``workers`` threads and write the ids as the dataset ``prefix``;
    log its counts under the name ``shown`` (where it will be moved).

    Adds the time spent encoding and writing to ``seconds["encode"]``/``seconds["binarize"]``.
    """
    with open(path, encoding="utf-8") as f:
        total = sum(1 for _ in f)
    with open(path, encoding="utf-8") as f, DatasetWriter(
        prefix, model.get_piece_size()
    ) as dataset, tqdm(total=total, unit=" lines", desc=f"encoding {path.name}") as progress:
        while lines := [line.rstrip("\n") for line in itertools.islice(f, ENCODE_CHUNK_LINES)]:
            start = time.perf_counter()
            ids = model.encode(lines, out_type=int, num_threads=workers)
            encoded = time.perf_counter()
            dataset.add(ids)
            seconds["encode"] += encoded - start
            seconds["binarize"] += time.perf_counter() - encoded
            progress.update(len(lines))
    logger.info(dataset.summary(shown))
    return dataset


def _check_inputs(options: PrepareOptions) -> Dict[str, List[Path]]:
    if not options.train:
        raise ValueError("no training input: give at least one --train file")
    if sum(map(bool, (options.valid, options.valid_docs, options.valid_fraction))) != 1:
        raise ValueError("give either --valid files, --valid-fraction F or --valid-docs N "
                         "(exactly one of them)")
    if options.valid_fraction is not None and not 0 < options.valid_fraction < 1:
        raise ValueError(f"--valid-fraction must be between 0 and 1, got {options.valid_fraction}")
    if options.shards < 1:
        raise ValueError(f"--shards must be at least 1, got {options.shards}")
    check_trainer_threads(options.num_threads)
    inputs = {"train": options.train, "valid": options.valid, "test": options.test}
    inputs = {split: [check_input_file(f) for f in files] for split, files in inputs.items()
              if files}
    for split, files in inputs.items():
        _refuse_repeated_files(split, files)
    seen: Dict[Path, str] = {}
    for split, files in inputs.items():  # a file of two splits: validation on training text
        for path in files:
            other = seen.setdefault(path.resolve(), split)
            if other != split:
                logger.warning(
                    "--%s: %s is also given to --%s: the %s loss will be measured on text the "
                    "model trains on; give the file to one split only, or hold out documents "
                    "with --valid-fraction", split, path, other, split)
    return inputs


def _refuse_repeated_files(split: str, files: List[Path]) -> None:
    """Raise a ValueError naming ``--split`` and the file if two of ``files`` resolve to the
    same path (a file given twice would be read twice; with ``--valid-docs`` documents held
    out for validation would stay in train as well)."""
    first_given: Dict[Path, Path] = {}
    for index, path in enumerate(files):
        first = first_given.setdefault(path.resolve(), path)
        if len(first_given) <= index:  # ``path`` resolves to a file given before
            spellings = f" (as {first} and {path})" if str(first) != str(path) else ""
            raise ValueError(
                f"--{split}: {path} is given twice{spellings}; give each file once (a file "
                "given twice is read twice, and with --valid-docs the documents held out for "
                "validation would also stay in train)"
            )


def _output_names(destdir: Path) -> List[str]:
    """The entries of ``destdir`` that are outputs of a run (:data:`OUTPUT_NAMES`, shard
    directories): those ``force`` replaces."""
    return [p.name for p in destdir.iterdir() if p.name in OUTPUT_NAMES
            or re.fullmatch(rf"{SHARD_PREFIX}\d+", p.name)]


@contextlib.contextmanager
def _phase(phases: Dict[str, Dict[str, float]], name: str) -> Iterator[None]:
    """Measure a phase into ``phases[...][name]``: ``seconds`` (wall time), ``cpu_seconds``
    (CPU time of the process, all threads, and of the child processes that ended in the phase:
    ``getrusage``) and ``peak_rss_mib`` (MiB): the process's peak (``ru_maxrss``) if the phase
    raised it, else the largest resident size (``/proc/self/statm``) sampled every
    :data:`RSS_SAMPLE_SECONDS`; with child processes (the reading ``workers``) also
    ``child_peak_rss_mib``, the largest child's peak (pages shared with this process, which
    forked it, included)."""
    peak_before = _max_rss_mib()
    sampled = [0.0]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(RSS_SAMPLE_SECONDS):
            sampled[0] = max(sampled[0], _current_rss_mib())

    sampler = threading.Thread(target=sample, daemon=True)
    start, cpu_start, children_before = time.perf_counter(), _cpu_seconds(), _children()
    sampler.start()
    try:
        yield
    finally:
        done.set()
        sampler.join()
    peak_after = _max_rss_mib()
    peak = peak_after if peak_after > peak_before else max(sampled[0], _current_rss_mib())
    phases["seconds"][name] = round(time.perf_counter() - start, 3)
    phases["cpu_seconds"][name] = round(_cpu_seconds() - cpu_start, 3)
    phases["peak_rss_mib"][name] = round(peak, 1)
    children = _children()
    if children.ru_utime + children.ru_stime > children_before.ru_utime + children_before.ru_stime:
        phases.setdefault("child_peak_rss_mib", {})[name] = round(children.ru_maxrss / 1024, 1)
    logger.info("%s: %.1f s (CPU %.1f s), peak resident memory %.0f MiB", name,
                phases["seconds"][name], phases["cpu_seconds"][name], peak)


def _children() -> resource.struct_rusage:
    return resource.getrusage(resource.RUSAGE_CHILDREN)


def _cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), _children()
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _max_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _current_rss_mib() -> float:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError):  # not Linux
        return 0.0


def _jsonable(value):
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value
