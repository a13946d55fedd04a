"""Turn GLUE task directories (original TSV layout) into data for fairseq's
``sentence_prediction`` task, with the SentencePiece model and ``dict.txt`` of a pre-training
data-bin (made by ``taco-prepare-data``).

Per task, ``destdir/<TASK>/`` holds, as fairseq's RoBERTa GLUE recipe
(``examples/roberta/preprocess_GLUE_tasks.sh``) lays it out::

    input0/{split}.bin/.idx, dict.txt   first sentence, encoded and binarized with dict.txt
    input1/...                          second sentence (pair tasks only)
    label/{split}.bin/.idx, dict.txt    class labels; dict.txt lists the task's labels in
                                        class-index order (GlueTask.labels)
    label/{split}.label                 STS-B instead: the score of each row as a float text
    index/{split}.txt                   GLUE's example index of each row (for predictions)
    prep_info.json                      rows, malformed rows, tokens (without the </s> of
                                        each entry) and <unk> tokens, fingerprints
    text/                               only with keep_text: {split}.input{k}.txt, the
                                        sentences

Splits: ``train``, ``valid`` (dev), ``test``; MNLI also ``valid1``/``test1`` (mismatched).
Row ``i`` of every file of a split is row ``i`` of the usable rows of its TSV file. Sentences
are encoded to the ids of the data-bin's ``dict.txt``
(:class:`taco_fairseq.prep.vocabulary.DictionaryEncoder`: SentencePiece's ids as they are for
the data-bins of ``taco-prepare-data``, looked up for a ``dict.txt`` made by
``fairseq-preprocess``) and written
(:class:`taco_fairseq.prep.binarize.DatasetWriter`), the bytes ``spm_encode`` +
``fairseq-preprocess --only-source --srcdict dict.txt`` would write, as are the labels' ids.
"""

import json
import logging
import shutil
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import sentencepiece as spm
from fairseq.data import Dictionary

from ..metadata import (SENTENCEPIECE_MODEL, check_training_data, file_sha256,
                        load_lazily, load_task_dictionary)
from ..prep.binarize import DatasetWriter
from ..prep.pretraining import DICT_FILE, INFO_FILE
from ..prep.vocabulary import DictionaryEncoder
from .tasks import TASKS, GlueTask, get_tasks
from .tsv import TsvSplit, read_split

logger = logging.getLogger(__name__)

INDEX_DIR = "index"
TEXT_DIR = "text"
LABEL_DIR = "label"
#: Malformed rows listed in prep_info.json and in error messages, per split.
SHOWN_MALFORMED = 20


class MalformedRowsError(ValueError):
    """A GLUE file has malformed rows and they may not be skipped."""


@dataclass
class GluePrepOptions:
    """Options of :func:`prepare_glue` (the CLI options of the same names).

    Attributes:
        glue_dir: directory holding one directory per task (``RTE/``, ``MNLI/``, ...).
        pretraining_data: the pre-training data-bin (``sentencepiece.bpe.model``, ``dict.txt``):
            made by ``taco-prepare-data``, or by ``fairseq-preprocess`` from ``spm_encode``'s
            output with the model copied in.
        checkpoint: the pre-training checkpoint to be fine-tuned, if given: its dictionary and
            SentencePiece fingerprints must match ``pretraining_data``'s.
        destdir: output directory; task ``T`` goes to ``destdir/T``.
        tasks: GLUE task names; empty: every task whose directory exists in ``glue_dir``.
        workers: SentencePiece encoding threads.
        skip_malformed: leave malformed train/dev rows out (counted and reported) instead of
            stopping; test rows are never skipped (GLUE submissions need every index).
        keep_text: write the sentences as text into ``<task>/text`` too.
        force: replace a task's output directory that is not empty.
    """

    glue_dir: Path
    pretraining_data: Path
    destdir: Path
    checkpoint: Optional[Path] = None
    tasks: Sequence[str] = ()
    workers: int = 1
    skip_malformed: bool = False
    keep_text: bool = False
    force: bool = False


def prepare_glue(options: GluePrepOptions) -> Dict[str, dict]:
    """Prepare every task of ``options`` (see the module doc).

    Returns:
        task name → the contents of its ``prep_info.json``.

    Raises:
        FileNotFoundError: the pre-training data-bin lacks its SentencePiece model or
            ``dict.txt``, ``glue_dir`` does not exist, a requested task directory or one of
            its train/dev files is missing, or no task directory was found at all.
        FileExistsError: a task's output directory is not empty and ``force`` is not set.
        MalformedRowsError: malformed rows (listed with line numbers and reasons) in a test
            file, or in a train/dev file without ``skip_malformed``.
        ValueError: an unknown task name, a file that is not in the GLUE layout, a
            ``dict.txt`` that holds too few of the pieces of the model next to it
            (:class:`taco_fairseq.prep.vocabulary.DictionaryEncoder`), or a ``checkpoint``
            trained with another dictionary or SentencePiece model
            (:func:`taco_fairseq.metadata.check_training_data`).
    """
    pretraining = Path(options.pretraining_data)
    for name in (SENTENCEPIECE_MODEL, DICT_FILE):
        if not (pretraining / name).is_file():
            raise FileNotFoundError(
                f"{pretraining / name} not found: --pretraining-data must be a data-bin made "
                "by taco-prepare-data, or by fairseq-preprocess with its "
                f"SentencePiece model copied in as {SENTENCEPIECE_MODEL}"
            )
    if options.checkpoint is not None:
        if Path(options.checkpoint).is_dir():
            raise FileNotFoundError(f"--checkpoint {options.checkpoint} is a directory; give a "
                                    "checkpoint file in it (e.g. its checkpoint_last.pt)")
        if not Path(options.checkpoint).is_file():
            raise FileNotFoundError(f"--checkpoint {options.checkpoint}: no such file")
        check_training_data(
            options.checkpoint, load_lazily(options.checkpoint),
            load_task_dictionary(pretraining / DICT_FILE), str(pretraining / DICT_FILE),
            pretraining / SENTENCEPIECE_MODEL, fix="Give the data-bin it was pre-trained on as "
            "--pretraining-data.",
        )
    glue_dir = Path(options.glue_dir)
    if not glue_dir.is_dir():
        raise FileNotFoundError(f"--glue-dir {glue_dir}: no such directory; download GLUE with "
                                "taco-download-glue")
    if options.tasks:
        tasks = get_tasks(options.tasks)
        for task in tasks:
            if not (glue_dir / task.name).is_dir():
                raise FileNotFoundError(
                    f"no {task.name} directory in {glue_dir}; download GLUE with "
                    "taco-download-glue or drop the task from --tasks"
                )
    else:
        tasks = tuple(t for t in TASKS.values() if (glue_dir / t.name).is_dir())
        missing = [t for t in TASKS if not (glue_dir / t).is_dir()]
        if not tasks:
            raise FileNotFoundError(f"no GLUE task directory ({', '.join(TASKS)}) in {glue_dir}")
        if missing:
            logger.warning("not in %s, not prepared: %s", glue_dir, ", ".join(missing))
    return {
        task.name: prepare_task(
            task, glue_dir / task.name, pretraining, Path(options.destdir) / task.name,
            workers=options.workers, skip_malformed=options.skip_malformed,
            keep_text=options.keep_text, force=options.force,
        )
        for task in tasks
    }


def prepare_task(
    task: GlueTask,
    source_dir: Path,
    pretraining_data: Path,
    task_dir: Path,
    *,
    workers: int = 1,
    skip_malformed: bool = False,
    keep_text: bool = False,
    force: bool = False,
) -> dict:
    """Prepare one task from ``source_dir`` (its GLUE directory) into ``task_dir``.

    A missing test file is skipped with a warning (no test predictions then); train and dev
    files are required. Errors and returns: as :func:`prepare_glue`. On error ``task_dir`` is
    removed again.
    """
    start = time.perf_counter()
    splits = _read_splits(task, Path(source_dir), skip_malformed)
    _prepare_task_dir(task_dir, force)
    try:
        info = _write_task(task, splits, Path(pretraining_data), task_dir, workers, keep_text)
    except BaseException:
        shutil.rmtree(task_dir, ignore_errors=True)  # a corrected rerun needs no --force
        raise
    info["seconds"] = round(time.perf_counter() - start, 3)
    (task_dir / INFO_FILE).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    logger.info("%s: %s", task.name, ", ".join(
        f"{split} {s['rows']} rows" for split, s in info["splits"].items()))
    return info


def read_prep_info(task_dir: Path) -> dict:
    """The ``prep_info.json`` of a prepared task directory.

    Raises:
        FileNotFoundError: ``task_dir`` was not made by :func:`prepare_task`.
    """
    path = Path(task_dir) / INFO_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found: prepare the task with taco-prepare-glue first"
        )
    return json.loads(path.read_text(encoding="utf-8"))


def read_indices(task_dir: Path, split: str) -> List[str]:
    """GLUE's example index of each row of a prepared split (see :class:`TsvSplit`)."""
    text = (Path(task_dir) / INDEX_DIR / f"{split}.txt").read_text(encoding="utf-8")
    return text.split("\n")[:-1]


def _read_splits(task: GlueTask, source_dir: Path, skip_malformed: bool) -> Dict[str, TsvSplit]:
    splits = {}
    for split, layout in task.splits.items():
        path = source_dir / layout.file
        if split.startswith("test") and not path.is_file():
            logger.warning("%s: %s not found; no %s split (no test predictions)",
                           task.name, path, split)
            continue
        data = read_split(path, layout, task.labels)
        if data.malformed:
            _report_malformed(data, split, skip_malformed)
        if not len(data):
            raise ValueError(f"{path} has no usable rows")
        splits[split] = data
    return splits


def _report_malformed(data: TsvSplit, split: str, skip_malformed: bool) -> None:
    shown = "; ".join(f"line {m.line}: {m.reason}" for m in data.malformed[:SHOWN_MALFORMED])
    message = f"{data.path}: {len(data.malformed)} malformed row(s) ({shown})"
    if split.startswith("test"):
        raise MalformedRowsError(
            f"{message}. Test rows cannot be skipped (a GLUE submission needs every index); "
            "fix the file"
        )
    if not skip_malformed:
        raise MalformedRowsError(
            f"{message}. Fix the file, or pass --skip-malformed to leave such rows out "
            f"(they are counted in {INFO_FILE})"
        )
    logger.warning("%s; left out (--skip-malformed)", message)


def _write_task(
    task, splits, pretraining_data: Path, task_dir: Path, workers: int, keep_text: bool
) -> dict:
    (task_dir / INDEX_DIR).mkdir()
    if keep_text:
        (task_dir / TEXT_DIR).mkdir()
    dictionary = Dictionary.load(str(pretraining_data / DICT_FILE))
    model = spm.SentencePieceProcessor(model_file=str(pretraining_data / SENTENCEPIECE_MODEL))
    encoder = DictionaryEncoder(model, dictionary,
                                f"{pretraining_data / DICT_FILE} and {SENTENCEPIECE_MODEL}")
    info_splits = {split: _split_info(data, task) for split, data in splits.items()}
    for k in range(task.num_inputs):
        out_dir = task_dir / f"input{k}"
        out_dir.mkdir()
        dictionary.save(str(out_dir / DICT_FILE))
        for split, data in splits.items():
            sentences = [row[k] for row in data.inputs]
            if keep_text:
                _write_lines(task_dir / TEXT_DIR / f"{split}.input{k}.txt", sentences)
            with DatasetWriter(out_dir / split, len(dictionary)) as dataset:
                dataset.add(encoder.encode(sentences, num_threads=workers))
            info_splits[split][f"input{k}_tokens"] = dataset.pieces
            info_splits[split][f"input{k}_unk_tokens"] = dataset.unk_tokens
    _write_labels(task, splits, task_dir)
    for split, data in splits.items():
        _write_lines(task_dir / INDEX_DIR / f"{split}.txt", data.indices)
    return {
        "task": task.name,
        "labels": list(task.labels) if task.labels else None,
        "num_classes": task.num_classes,
        "regression": task.regression,
        "pretraining_data": str(pretraining_data.resolve()),
        "dict_sha256": file_sha256(pretraining_data / DICT_FILE),
        "sentencepiece_sha256": file_sha256(pretraining_data / SENTENCEPIECE_MODEL),
        "dictionary_size": len(dictionary),
        "splits": info_splits,
    }


def _write_labels(task: GlueTask, splits, task_dir: Path) -> None:
    """``label/``: binarized class labels with a dictionary in the task's label order, or the
    STS-B scores as ``{split}.label`` text."""
    label_dir = task_dir / LABEL_DIR
    label_dir.mkdir()
    labeled = {split: data for split, data in splits.items() if data.labels is not None}
    if task.regression:
        for split, data in labeled.items():
            _write_lines(label_dir / f"{split}.label", data.labels)
        return
    labels = Dictionary()
    train_counts = Counter(splits["train"].labels)
    for label in task.labels:
        labels.add_symbol(label, n=train_counts[label])
    labels.save(str(label_dir / DICT_FILE))
    for split, data in labeled.items():
        with DatasetWriter(label_dir / split, len(labels)) as dataset:
            dataset.add([labels.index(label)] for label in data.labels)


def _split_info(data: TsvSplit, task: GlueTask) -> dict:
    info = {
        "file": str(data.path.resolve()),
        "rows": len(data),
        "malformed_rows": len(data.malformed),
        "malformed": [f"line {m.line}: {m.reason}" for m in data.malformed[:SHOWN_MALFORMED]],
        "empty_inputs": data.empty_inputs,
    }
    if data.labels is not None and not task.regression:
        counts = Counter(data.labels)
        info["label_counts"] = {label: counts[label] for label in task.labels}
    return info


def _write_lines(path: Path, lines) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for line in lines:
            f.write(line + "\n")


def _prepare_task_dir(task_dir: Path, force: bool) -> None:
    """An empty ``task_dir`` (the directory of one task belongs to this module alone)."""
    if task_dir.exists() and any(task_dir.iterdir()):
        if not force:
            raise FileExistsError(
                f"output directory {task_dir} is not empty; use --force to replace it"
            )
        shutil.rmtree(task_dir)
    task_dir.mkdir(parents=True, exist_ok=True)
