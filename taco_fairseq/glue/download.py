"""Download the official GLUE data into the original layout (``<data_dir>/<TASK>/*.tsv``), as
GLUE's ``download_glue_data.py`` does: the task archives hosted for GLUE, and MRPC built from
the Microsoft Research Paraphrase Corpus files (SentEval's copy) with GLUE's dev split ids.
WNLI and the diagnostic set are not downloaded (the paper excludes WNLI).
"""

import io
import logging
import shutil
import tempfile
import urllib.error
import urllib.request
import zipfile
from pathlib import Path
from typing import List, Sequence

from .tasks import get_tasks

logger = logging.getLogger(__name__)

_GLUE = "https://dl.fbaipublicfiles.com/glue/data/"
#: task → archive with a ``<TASK>/`` directory inside.
ARCHIVES = {
    "CoLA": _GLUE + "CoLA.zip",
    "SST-2": _GLUE + "SST-2.zip",
    "QQP": _GLUE + "QQP-clean.zip",
    "STS-B": _GLUE + "STS-B.zip",
    "MNLI": _GLUE + "MNLI.zip",
    "QNLI": _GLUE + "QNLIv2.zip",
    "RTE": _GLUE + "RTE.zip",
}
MRPC_FILES = {
    "msr_paraphrase_train.txt":
        "https://dl.fbaipublicfiles.com/senteval/senteval_data/msr_paraphrase_train.txt",
    "msr_paraphrase_test.txt":
        "https://dl.fbaipublicfiles.com/senteval/senteval_data/msr_paraphrase_test.txt",
    "dev_ids.tsv": _GLUE + "mrpc_dev_ids.tsv",
}


def download_glue(data_dir: Path, tasks: Sequence[str], timeout: float = 60.0) -> List[Path]:
    """Download ``tasks`` (GLUE names) into ``data_dir``; returns the task directories.

    Raises:
        ValueError: an unknown task (WNLI included).
        FileExistsError: a task directory exists already (remove it to download again).
        RuntimeError: a download failed (no internet access, ...); the message names the URL,
            the reason and how to provide the files instead.
    """
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    done = []
    for task in get_tasks(tasks):
        target = data_dir / task.name
        if target.exists():
            raise FileExistsError(f"{target} exists; remove it to download {task.name} again")
        logger.info("downloading %s into %s", task.name, target)
        with tempfile.TemporaryDirectory(dir=data_dir) as tmp:
            tmp = Path(tmp)
            if task.name == "MRPC":
                for name, url in MRPC_FILES.items():
                    (tmp / name).write_bytes(_fetch(url, timeout))
                format_mrpc(tmp / "msr_paraphrase_train.txt", tmp / "msr_paraphrase_test.txt",
                            tmp / "dev_ids.tsv", tmp / "MRPC")
            else:
                with zipfile.ZipFile(io.BytesIO(_fetch(ARCHIVES[task.name], timeout))) as z:
                    z.extractall(tmp)
            extracted = tmp / task.name
            if not extracted.is_dir():
                raise RuntimeError(f"the {task.name} archive has no {task.name}/ directory")
            shutil.move(str(extracted), str(target))
        done.append(target)
    return done


def format_mrpc(train: Path, test: Path, dev_ids: Path, out_dir: Path) -> None:
    """GLUE's MRPC files from the corpus files: ``train.tsv``/``dev.tsv`` keep the corpus
    header and split the training pairs by the ids in ``dev_ids`` (``id1<TAB>id2`` lines);
    ``test.tsv`` gets the header ``index  #1 ID  #2 ID  #1 String  #2 String`` and a 0-based
    index instead of the label (as ``download_glue_data.py``).

    Raises:
        ValueError: a line without 5 tab-separated fields (file and line named).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    dev = {tuple(line.split("\t")) for line in _lines(dev_ids) if line}
    train_lines = _lines(train)
    with open(out_dir / "train.tsv", "w", encoding="utf-8", newline="\n") as train_out, \
            open(out_dir / "dev.tsv", "w", encoding="utf-8", newline="\n") as dev_out:
        train_out.write(train_lines[0] + "\n")
        dev_out.write(train_lines[0] + "\n")
        for number, line in enumerate(train_lines[1:], start=2):
            fields = _fields(line, train, number)
            (dev_out if (fields[1], fields[2]) in dev else train_out).write(
                "\t".join(fields) + "\n")
    with open(out_dir / "test.tsv", "w", encoding="utf-8", newline="\n") as test_out:
        test_out.write("index\t#1 ID\t#2 ID\t#1 String\t#2 String\n")
        for index, line in enumerate(_lines(test)[1:]):
            fields = _fields(line, test, index + 2)
            test_out.write("\t".join([str(index), *fields[1:]]) + "\n")


def _lines(path: Path) -> List[str]:
    # the corpus files start with a byte-order mark that GLUE's files keep in the header
    text = Path(path).read_text(encoding="utf-8")
    return [line.strip("\r") for line in text.split("\n") if line.strip()]


def _fields(line: str, path: Path, number: int) -> List[str]:
    fields = line.strip().split("\t")
    if len(fields) != 5:
        raise ValueError(f"{path}, line {number}: {len(fields)} tab-separated fields, expected 5")
    return fields


def _fetch(url: str, timeout: float) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.read()
    except (urllib.error.URLError, OSError) as e:
        raise RuntimeError(
            f"could not download {url}: {getattr(e, 'reason', e)}. This needs internet access; "
            "without it, put the GLUE task directories (original layout) into the data "
            "directory yourself"
        ) from e
