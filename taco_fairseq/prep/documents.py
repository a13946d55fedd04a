"""Document text files: the layout fairseq's ``--sample-break-mode complete_doc`` reads.

A document text file is UTF-8 with one non-empty line per sentence or paragraph and exactly
one empty line between two documents (none before the first or after the last). Binarized
(:mod:`taco_fairseq.prep.binarize`), every line is an entry, so the empty line is an entry of
only ``</s>``, which ``complete_doc`` treats as a document boundary, and a file of ``L``
non-empty lines and ``D`` documents becomes a dataset of ``L + D - 1`` entries.
"""

import collections
import shutil
from pathlib import Path
from typing import List, Optional, Sequence, Tuple, Union

from .corpus import FileStats, read_document_lines

PathLike = Union[str, Path]


def write_documents(
    files: Sequence[PathLike],
    dest: PathLike,
    *,
    strip_gutenberg: bool = True,
    max_docs: Optional[int] = None,
    max_lines: Optional[int] = None,
) -> List[FileStats]:
    """Read raw text files (see :mod:`taco_fairseq.prep.corpus`) into one document text file.

    Documents of consecutive files are separated like documents within a file. The limits
    apply to each file separately.

    Returns:
        What was read from each file, in order.

    Raises:
        FileNotFoundError, ValueError: as :func:`taco_fairseq.prep.corpus.read_document_lines`.
    """
    stats = []
    with open(dest, "w", encoding="utf-8") as out:
        for path in files:
            if stats:
                out.write("\n")
            file_stats = FileStats(str(path))
            for line in read_document_lines(
                path,
                file_stats,
                strip_gutenberg=strip_gutenberg,
                max_docs=max_docs,
                max_lines=max_lines,
            ):
                out.write(line + "\n")
            stats.append(file_stats)
    return stats


def count_documents(path: PathLike) -> Tuple[int, int]:
    """Return ``(non-empty lines, documents)`` of a document text file."""
    lines = docs = 0
    with open(path, "rb") as f:
        for line in f:
            if line == b"\n":
                docs += 1
            else:
                lines += 1
    return lines, (docs + 1 if lines else 0)


def move_last_documents(source: PathLike, dest: PathLike, count: int) -> None:
    """Move the last ``count`` documents of a document text file into a new file ``dest``.

    Streams: memory holds ``count`` file offsets, not documents.

    Raises:
        ValueError: if ``source`` does not have more than ``count`` documents (at least one
            must stay).
    """
    starts: collections.deque = collections.deque(maxlen=count)
    docs = offset = 0
    after_break = True
    with open(source, "rb") as f:
        for line in f:
            if after_break and line != b"\n":
                starts.append(offset)
                docs += 1
            after_break = line == b"\n"
            offset += len(line)
    if docs <= count:
        raise ValueError(
            f"cannot hold out {count} documents for validation: the training input has only "
            f"{docs}; use a smaller --valid-docs or more training input"
        )
    with open(source, "r+b") as f:
        f.seek(starts[0])
        with open(dest, "wb") as out:
            shutil.copyfileobj(f, out)
        f.truncate(starts[0] - 1)  # also drops the empty line before the moved documents
