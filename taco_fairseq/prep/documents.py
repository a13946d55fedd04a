"""Document text files: the layout fairseq's ``--sample-break-mode complete_doc`` reads.

A document text file is UTF-8 with one non-empty line per sentence or paragraph and exactly
one empty line between two documents (none before the first or after the last). Binarized
(:mod:`taco_fairseq.prep.binarize`), every line is an entry, so the empty line is an entry of
only ``</s>``, which ``complete_doc`` treats as a document boundary, and a file of ``L``
non-empty lines and ``D`` documents becomes a dataset of ``L + D - 1`` entries.

Splitting one into several (a validation split, shards) works on whole documents: find their
byte ranges (:func:`document_spans`), choose a group for each (:func:`last_documents`,
:func:`sample_documents`, :func:`balance_shards`), copy them (:func:`write_document_groups`).
"""

import array
import contextlib
import heapq
import os
import shutil
import signal
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import BinaryIO, List, Optional, Sequence, Tuple, Union

import numpy as np
from tqdm import tqdm

from .corpus import FileStats, read_document_lines

PathLike = Union[str, Path]

#: Bytes read at a time by :func:`document_spans` and :func:`write_document_groups`.
COPY_CHUNK_BYTES = 1 << 20


def write_documents(
    files: Sequence[PathLike],
    dest: PathLike,
    *,
    strip_gutenberg: bool = True,
    max_docs: Optional[int] = None,
    max_lines: Optional[int] = None,
    progress: Optional[tqdm] = None,
    workers: int = 1,
) -> List[FileStats]:
    """Read raw text files (see :mod:`taco_fairseq.prep.corpus`) into one document text file.

    Documents of consecutive files are separated like documents within a file. The limits
    apply to each file separately. With ``workers`` > 1 that many processes read files at
    once, each into a part file beside ``dest`` that is then appended to it in file order
    (the same output; reading a compressed file is one core's work, so a corpus of many files
    reads on many cores). ``progress``, a tqdm bar, is advanced by the bytes read from the
    files on disk (compressed bytes; with ``workers`` > 1 or a limit, by whole files), and
    closed at the end, also after an error. A Ctrl-C ends the reading processes without a word
    of their own.

    Returns:
        What was read from each file, in order.

    Raises:
        FileNotFoundError, ValueError: as :func:`taco_fairseq.prep.corpus.read_document_lines`.
    """
    limits = {"strip_gutenberg": strip_gutenberg, "max_docs": max_docs, "max_lines": max_lines}
    stats = []
    closing = progress if progress is not None else contextlib.nullcontext()
    with open(dest, "wb") as out, closing:
        if workers > 1 and len(files) > 1:
            parts = [Path(f"{dest}.part{index}") for index in range(len(files))]
            try:
                with ProcessPoolExecutor(min(workers, len(files)), initializer=signal.signal,
                                         initargs=(signal.SIGINT, signal.SIG_DFL)) as pool:
                    futures = [pool.submit(_read_file, path, part, limits)
                               for path, part in zip(files, parts)]
                    for path, part, future in zip(files, parts, futures):
                        stats.append(future.result())
                        _append_document_file(out, part, first=len(stats) == 1)
                        part.unlink()
                        if progress is not None:
                            progress.update(os.path.getsize(path))
            finally:
                for part in parts:
                    part.unlink(missing_ok=True)
        else:
            for path in files:
                done = progress.n if progress is not None else 0
                if stats:
                    out.write(b"\n")
                stats.append(_read_file(path, out, limits, progress))
                if progress is not None:
                    progress.update(done + os.path.getsize(path) - progress.n)
    return stats


def _read_file(
    path: PathLike, out: Union[PathLike, BinaryIO], limits: dict, progress: Optional[tqdm] = None
) -> FileStats:
    """Write the document lines of one input file to ``out`` (a file, or a path to create)."""
    if not hasattr(out, "write"):
        with open(out, "wb") as f:
            return _read_file(path, f, limits, progress)
    stats = FileStats(str(path))
    for line in read_document_lines(path, stats, progress=progress, **limits):
        out.write(line.encode("utf-8") + b"\n")
    return stats


def _append_document_file(out: BinaryIO, part: Path, first: bool) -> None:
    if not first:
        out.write(b"\n")
    with open(part, "rb") as f:
        shutil.copyfileobj(f, out, COPY_CHUNK_BYTES)


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


def document_spans(path: PathLike) -> np.ndarray:
    """The byte range of every document of a document text file.

    Streams (read :data:`COPY_CHUNK_BYTES` at a time, separators found with ``bytes.find``);
    memory holds 8 bytes per document.

    Returns:
        int64 array ``[documents, 2]``: row ``i`` is ``(start, end)`` of document ``i``, its
        lines and their final ``\\n``, without the empty line that separates it from the next.
    """
    starts = array.array("q", [0])
    offset = 0
    after_newline = False
    with open(path, "rb") as f:
        while chunk := f.read(COPY_CHUNK_BYTES):
            if after_newline and chunk.startswith(b"\n"):  # "\n\n" across two chunks
                starts.append(offset + 1)
            position = chunk.find(b"\n\n")
            while position >= 0:
                starts.append(offset + position + 2)
                position = chunk.find(b"\n\n", position + 2)
            after_newline = chunk.endswith(b"\n")
            offset += len(chunk)
    if offset == 0:
        return np.zeros((0, 2), dtype=np.int64)
    starts.append(offset + 1)
    bounds = np.frombuffer(starts, dtype=np.int64)
    return np.stack([bounds[:-1], bounds[1:] - 1], axis=1)


def last_documents(documents: int, count: int) -> np.ndarray:
    """Boolean mask over ``documents`` selecting the last ``count`` of them.

    Raises:
        ValueError: if there are not more than ``count`` documents (at least one must stay).
    """
    if documents <= count:
        raise ValueError(
            f"cannot hold out {count} documents for validation: the training input has only "
            f"{documents}; use a smaller --valid-docs or more training input"
        )
    mask = np.zeros(documents, dtype=bool)
    mask[documents - count:] = True
    return mask


def sample_documents(sizes: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """Boolean mask of a seeded sample of whole documents holding at most ``fraction`` of the
    text, spread over the whole input.

    The documents are visited in a random order (``numpy.random.default_rng(seed)``) and each
    is taken while it fits in what is left of the budget ``fraction * sizes.sum()``; so a
    document larger than the budget (a whole book in a small corpus) is never taken, and the
    sample holds close to the budget once many small documents exist.

    Args:
        sizes: ``[documents]`` sizes (bytes).
        fraction: in (0, 1).

    Raises:
        ValueError: no document fits in the budget (the message names
            ``--valid-fraction``). As the budget is below the total, a document always stays.
    """
    budget = fraction * float(sizes.sum())
    mask = np.zeros(len(sizes), dtype=bool)
    smallest = sizes.min() if len(sizes) else 0
    for index in np.random.default_rng(seed).permutation(len(sizes)):
        if sizes[index] <= budget:
            mask[index] = True
            budget -= sizes[index]
            if budget < smallest:
                break
    if not mask.any():
        raise ValueError(
            f"--valid-fraction {fraction} holds out at most {fraction * float(sizes.sum()):.0f} "
            f"bytes, less than the smallest of the {len(sizes)} training documents "
            f"({smallest} bytes); use a larger --valid-fraction or --valid files"
        )
    return mask


def balance_shards(sizes: np.ndarray, shards: int) -> np.ndarray:
    """Shard of each document: in document order, each goes to the shard with the fewest
    bytes so far (the lowest index among equals), so every shard samples the whole input
    and the shards differ by at most one document's size.

    Args:
        sizes: ``[documents]`` sizes (bytes).
        shards: number of shards, at least 1.

    Returns:
        int64 array ``[documents]`` of shard indices in ``0 .. shards - 1``.
    """
    heap = [(0, shard) for shard in range(shards)]
    assignment = np.empty(len(sizes), dtype=np.int64)
    for index, size in enumerate(sizes.tolist()):
        filled, shard = heap[0]
        assignment[index] = shard
        heapq.heapreplace(heap, (filled + size, shard))
    return assignment


def write_document_groups(
    source: PathLike, spans: np.ndarray, groups: np.ndarray, dests: Sequence[PathLike]
) -> None:
    """Write the documents of ``source`` with ``groups[i] == k`` to ``dests[k]``, in order, as
    document text files (a group without documents gives an empty file).

    Runs of consecutive documents of one group are copied as one byte range, so a split that
    keeps long runs together (e.g. the last documents held out) costs little more than a copy
    of the file. Shows a tqdm bar over the bytes of ``source``.

    Args:
        spans: ``[documents, 2]`` from :func:`document_spans`.
        groups: ``[documents]`` indices into ``dests``.
    """
    with contextlib.ExitStack() as stack:
        src = stack.enter_context(open(source, "rb"))
        outs = [stack.enter_context(open(dest, "wb")) for dest in dests]
        progress = stack.enter_context(tqdm(
            total=int(spans[-1, 1]) if len(spans) else 0, unit="B", unit_scale=True,
            desc=f"splitting {Path(source).name} into {len(dests)} files",
        ))
        written = [False] * len(outs)
        run_starts = np.flatnonzero(np.diff(groups, prepend=-1) != 0)
        run_ends = np.append(run_starts[1:], len(groups))
        for first, stop in zip(run_starts.tolist(), run_ends.tolist()):
            group = int(groups[first])
            out = outs[group]
            if written[group]:
                out.write(b"\n")
            _copy_range(src, out, int(spans[first, 0]), int(spans[stop - 1, 1]))
            progress.update(int(spans[stop - 1, 1]) - progress.n)
            written[group] = True


def _copy_range(src: BinaryIO, out: BinaryIO, start: int, end: int) -> None:
    src.seek(start)
    left = end - start
    while left:
        data = src.read(min(left, COPY_CHUNK_BYTES))
        out.write(data)
        left -= len(data)
