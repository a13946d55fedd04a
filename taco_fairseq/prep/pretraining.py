"""Turn raw text files into a fairseq data-bin directory for masked-LM pre-training.

Steps (all streaming; memory does not grow with the corpus):

1. read the ``train``/``valid``/``test`` input files into document text files
   (:mod:`taco_fairseq.prep.corpus`, :mod:`taco_fairseq.prep.documents`); with ``valid_docs`` the
   last documents of the training input become the validation split instead;
2. train a SentencePiece model on the training text
   (:func:`taco_fairseq.prep.vocabulary.train_sentencepiece`);
3. encode every split with SentencePiece (``workers`` threads) and write the ids as a fairseq
   dataset (:class:`taco_fairseq.prep.binarize.DatasetWriter`, the bytes
   ``fairseq-preprocess --only-source`` would write), counting the pieces of the training split;
4. write ``dict.txt`` from the model and the training counts.

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
"""

import contextlib
import itertools
import json
import logging
import platform
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Optional

import fairseq
import sentencepiece as spm
from tqdm import tqdm

from .. import __version__
from ..checkpoints import SENTENCEPIECE_MODEL
from .binarize import DatasetWriter
from .corpus import check_input_file
from .documents import count_documents, move_last_documents, write_documents
from .vocabulary import train_sentencepiece, write_fairseq_dict

logger = logging.getLogger(__name__)

DICT_FILE = "dict.txt"
INFO_FILE = "prep_info.json"
TEXT_DIR = "text"
SPLITS = ("train", "valid", "test")
#: Lines SentencePiece encodes in one call (on ``workers`` threads).
ENCODE_CHUNK_LINES = 10_000
#: Every name this module writes into the output directory (removed first by ``force``).
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
            validation split; exclusive with ``valid``.
        vocab_size: SentencePiece pieces, including ``<s> <pad> </s> <unk>``; the fairseq
            dictionary has as many symbols, plus ``<mask>`` added by the task.
        model_type: ``"unigram"`` or ``"bpe"``.
        character_coverage: SentencePiece's character coverage.
        input_sentence_size: at most this many training lines (a seeded sample) for
            SentencePiece training.
        seed: seed of that sample.
        workers: threads for SentencePiece training and encoding (the model, though
            deterministic, depends on it).
        max_docs: read at most this many documents of each input file.
        max_lines: read at most this many non-empty lines of each input file.
        strip_gutenberg: drop Project Gutenberg headers and footers.
        keep_text: keep the intermediate text in ``destdir/text``.
        force: write into a non-empty ``destdir``, replacing earlier outputs.
    """

    destdir: Path
    train: List[Path]
    valid: List[Path] = field(default_factory=list)
    test: List[Path] = field(default_factory=list)
    valid_docs: Optional[int] = None
    vocab_size: int = 30522
    model_type: str = "unigram"
    character_coverage: float = 0.9995
    input_sentence_size: int = 1_000_000
    seed: int = 1
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
        FileExistsError: ``destdir`` is not empty and ``force`` is not set.
        ValueError: invalid split options (e.g. the same file twice in one split), an input
            without text, a corrupt compressed input, too few documents for ``valid_docs``,
            or a ``vocab_size`` that does not fit the training text.

    On any error the outputs written so far are removed again.
    """
    inputs = _check_inputs(options)
    destdir = Path(options.destdir)
    created = not destdir.exists()
    _prepare_destdir(destdir, options.force)
    try:
        return _prepare(options, inputs, destdir)
    except BaseException:
        _remove_outputs(destdir)  # a corrected rerun needs no --force
        if created:
            destdir.rmdir()
        raise


def _prepare(options: PrepareOptions, inputs: Dict[str, List[Path]], destdir: Path) -> dict:
    text_dir = destdir / TEXT_DIR
    text_dir.mkdir()
    text = {
        split: text_dir / f"{split}.txt"
        for split in SPLITS
        if split in inputs or (split == "valid" and options.valid_docs)
    }
    seconds: Dict[str, float] = {}

    with _timer(seconds, "read_inputs"):
        file_stats = {
            split: write_documents(
                files,
                text[split],
                strip_gutenberg=options.strip_gutenberg,
                max_docs=options.max_docs,
                max_lines=options.max_lines,
            )
            for split, files in inputs.items()
        }
        if options.valid_docs:
            move_last_documents(text["train"], text["valid"], options.valid_docs)

    with _timer(seconds, "train_sentencepiece"):
        model = train_sentencepiece(
            text["train"],
            destdir / SENTENCEPIECE_MODEL,
            vocab_size=options.vocab_size,
            model_type=options.model_type,
            character_coverage=options.character_coverage,
            max_sentences=options.input_sentence_size,
            seed=options.seed,
            num_threads=options.workers,
            source="--train " + " ".join(map(str, inputs["train"])),
        )

    seconds["encode"] = seconds["binarize"] = 0.0
    datasets = {
        split: _binarize_text(model, text[split], destdir / split, options.workers, seconds)
        for split in text
    }
    for name in ("encode", "binarize"):
        seconds[name] = round(seconds[name], 3)
    dict_entries = write_fairseq_dict(model, datasets["train"].counts, destdir / DICT_FILE)

    splits = {}
    for split, dataset in datasets.items():
        lines, docs = count_documents(text[split])
        splits[split] = {
            "docs": docs,
            "lines": lines,
            "dataset_entries": dataset.entries,
            "tokens": dataset.pieces,  # without the </s> of each entry, as the log
            "unk_tokens": dataset.unk_tokens,
        }
    info = {
        "options": {key: _jsonable(value) for key, value in asdict(options).items()},
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
        "seconds": seconds,
    }
    (destdir / INFO_FILE).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    if not options.keep_text:
        shutil.rmtree(text_dir)
    return info


def _binarize_text(
    model: spm.SentencePieceProcessor,
    path: Path,
    prefix: Path,
    workers: int,
    seconds: Dict[str, float],
) -> DatasetWriter:
    """Encode each line of a document text file (an empty line: an entry of only ``</s>``)
    with SentencePiece on ``workers`` threads and write the ids as the dataset ``prefix``.

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
    logger.info(dataset.summary())
    return dataset


def _check_inputs(options: PrepareOptions) -> Dict[str, List[Path]]:
    if not options.train:
        raise ValueError("no training input: give at least one --train file")
    if bool(options.valid) == bool(options.valid_docs):
        raise ValueError("give either --valid files or --valid-docs N (exactly one of them)")
    inputs = {"train": options.train, "valid": options.valid, "test": options.test}
    inputs = {split: [check_input_file(f) for f in files] for split, files in inputs.items()
              if files}
    for split, files in inputs.items():
        _refuse_repeated_files(split, files)
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


def _prepare_destdir(destdir: Path, force: bool) -> None:
    if destdir.exists() and any(destdir.iterdir()):
        if not force:
            raise FileExistsError(
                f"output directory {destdir} is not empty; use --force to replace the "
                "outputs in it"
            )
        _remove_outputs(destdir)
    destdir.mkdir(parents=True, exist_ok=True)


def _remove_outputs(destdir: Path) -> None:
    for name in OUTPUT_NAMES:
        path = destdir / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


@contextlib.contextmanager
def _timer(seconds: Dict[str, float], name: str) -> Iterator[None]:
    start = time.perf_counter()
    yield
    seconds[name] = round(time.perf_counter() - start, 3)
    logger.info("%s: %.1f s", name, seconds[name])


def _jsonable(value):
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value
