"""Read raw pre-training text files as a stream of clean lines grouped into documents.

The output of :func:`read_document_lines` is the text layout fairseq's
``--sample-break-mode complete_doc`` expects: one non-empty line per input line and exactly one
empty line (``""``) between two documents (never before the first or after the last).

What a file becomes:

* **Compression** is chosen by the file name: ``.xz`` (lzma), ``.gz`` (gzip), anything else is
  read as is.
* **Decoding**: UTF-8; a leading byte-order mark is dropped. A line with bytes that are not valid
  UTF-8, or with NUL bytes, is decoded with U+FFFD replacement characters instead of failing;
  the number of such lines is counted in :attr:`FileStats.undecodable_lines` and logged as a
  warning. A file where more than :data:`MAX_UNDECODABLE_SHARE` of the non-blank lines are
  such lines (a binary file, text in another encoding) is refused, and so is a file that starts
  with a UTF-16 byte-order mark.
* **Lines** are split as universal newlines split them: at ``\\n``, ``\\r\\n`` and a lone ``\\r``,
  so LF (Unix), CRLF (Windows) and CR-only (classic Mac OS) files give the same lines; every
  run of whitespace (``str.split``: tabs, non-breaking and other Unicode spaces, and the
  vertical tab, form feed and Unicode line separators, at which lines are not split) becomes
  one ASCII space and the ends are stripped, so the pieces of a line never contain a
  character that fairseq's tokenizer would split on. Empty lines are dropped.
* **Documents**: a file is one document, except WikiExtractor output (the first non-empty line
  starts with ``<doc ``), where each ``<doc ...>`` ... ``</doc>`` block is one document and the
  markup lines are dropped (the title line that follows ``<doc>`` is kept as text).
* **Project Gutenberg** boilerplate: if a line ``*** START OF THE/THIS PROJECT GUTENBERG ...``
  occurs within the first :data:`GUTENBERG_HEADER_MAX_LINES` lines, everything up to and
  including it is dropped, and so is everything from the first end marker on
  (``*** END OF THE/THIS PROJECT GUTENBERG ...`` or the ``End of (the) Project Gutenberg ...``
  line that older e-books put just before it). Files without a start marker are kept whole.
"""

import gzip
import io
import itertools
import logging
import lzma
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterable, Iterator, List, Optional, Union

from tqdm import tqdm

logger = logging.getLogger(__name__)

PathLike = Union[str, Path]

#: A Project Gutenberg start marker is only looked for in this many first lines of a file.
GUTENBERG_HEADER_MAX_LINES = 1000
#: A file with a larger share of undecodable non-blank lines is not taken for UTF-8 text.
MAX_UNDECODABLE_SHARE = 0.5
#: Bytes read at a time by :func:`split_lines`.
READ_CHUNK_BYTES = 1 << 20

_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")

_GUTENBERG_START = re.compile(r"\*\*\* ?START OF (THE|THIS) PROJECT GUTENBERG", re.IGNORECASE)
_GUTENBERG_END = re.compile(
    r"(\*\*\* ?END OF (THE|THIS) PROJECT GUTENBERG|END OF (THE )?PROJECT GUTENBERG)", re.IGNORECASE
)
_WIKIEXTRACTOR_DOC_START = "<doc "
_WIKIEXTRACTOR_DOC_END = "</doc>"

#: Internal marker of a document start in a stream of lines.
_NEW_DOC = None


@dataclass
class FileStats:
    """What :func:`read_document_lines` read from one file (filled while iterating).

    Attributes:
        path: the file, as given.
        format: ``"plain"`` (the file is one document) or ``"wikiextractor"``.
        gutenberg_stripped: whether a Project Gutenberg header (and footer) was dropped.
        docs: documents yielded.
        lines: non-empty lines yielded.
        read_lines: non-blank lines read (before markup and boilerplate are dropped).
        undecodable_lines: lines that had invalid UTF-8 or NUL bytes (decoded with U+FFFD).
    """

    path: str
    format: str = "plain"
    gutenberg_stripped: bool = False
    docs: int = 0
    lines: int = 0
    read_lines: int = 0
    undecodable_lines: int = 0


def check_input_file(path: PathLike) -> Path:
    """``path`` as a ``Path``, checked to be an existing regular file.

    Raises:
        FileNotFoundError: "input file not found: PATH", or "input file is not a regular file:
            PATH" (e.g. a directory).
    """
    path = Path(path)
    if not path.is_file():
        problem = "is not a regular file" if path.exists() else "not found"
        raise FileNotFoundError(f"input file {problem}: {path}")
    return path


def open_binary(path: PathLike, progress: Optional[tqdm] = None) -> BinaryIO:
    """Open ``path`` for reading bytes, decompressing ``.xz`` and ``.gz`` files on the fly.

    Args:
        progress: a tqdm bar advanced by the bytes read from the file on disk (compressed
            bytes for ``.xz``/``.gz``), for a bar over files of known sizes.

    Raises:
        FileNotFoundError: from :func:`check_input_file`.
    """
    path = check_input_file(path)
    raw: BinaryIO = open(path, "rb")
    if progress is not None:
        raw = io.BufferedReader(_CountingReader(raw, progress))
    if path.suffix == ".xz":
        return lzma.open(raw, "rb")
    if path.suffix == ".gz":
        return gzip.open(raw, "rb")
    return raw


class _CountingReader(io.RawIOBase):
    """A file read through, each read's size added to a tqdm bar."""

    def __init__(self, f: BinaryIO, progress: tqdm):
        self._f, self._progress = f, progress

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        count = self._f.readinto(buffer)
        self._progress.update(count)
        return count

    def close(self) -> None:
        self._f.close()
        super().close()


def split_lines(f: BinaryIO) -> Iterator[bytes]:
    """Yield the lines of a byte stream as universal newlines split them, line ends kept.

    A line ends at ``\\n``, ``\\r\\n`` or a lone ``\\r`` (``bytes.splitlines``, whose only line
    ends these are); the stream is read :data:`READ_CHUNK_BYTES` at a time, so memory holds
    one chunk and one line, also for a CR-only file. In UTF-8 these bytes occur only as those
    characters.
    """
    line: List[bytes] = []  # the pieces of the line not yet yielded
    while chunk := f.read(READ_CHUNK_BYTES):
        if line and line[-1].endswith(b"\r"):  # the last chunk ended with \r: \r\n or a lone \r
            if chunk.startswith(b"\n"):
                line.append(b"\n")
                chunk = chunk[1:]
            yield b"".join(line)
            line = []
        pieces = chunk.splitlines(keepends=True)
        for piece in pieces[:-1]:
            line.append(piece)
            yield b"".join(line)
            line = []
        if pieces:
            line.append(pieces[-1])
            if pieces[-1].endswith(b"\n"):
                yield b"".join(line)
                line = []
    if line:
        yield b"".join(line)


def read_lines(
    path: PathLike, stats: FileStats, progress: Optional[tqdm] = None
) -> Iterator[str]:
    """Yield the lines of a text file, decoded and whitespace-normalized (see the module doc).
    ``progress``: as :func:`open_binary`'s.

    Empty lines are yielded as ``""``. Non-blank lines are counted in ``stats.read_lines``,
    those with invalid UTF-8 or NUL bytes in ``stats.undecodable_lines``.

    Raises:
        FileNotFoundError: if the file does not exist.
        ValueError: if a ``.xz``/``.gz`` file is corrupt or truncated, or the file starts with
            a UTF-16 byte-order mark (the message names the file).
    """
    with open_binary(path, progress) as f:
        try:
            for number, raw in enumerate(split_lines(f)):
                if number == 0 and raw.startswith(_UTF16_BOMS):
                    raise ValueError(
                        f"{path}: the file is UTF-16 text (it starts with a UTF-16 byte-order "
                        "mark), not UTF-8; convert it first, e.g. iconv -f UTF-16 -t UTF-8 "
                        f"{path} > {Path(path).stem}.utf8.txt"
                    )
                try:
                    text = raw.decode("utf-8")
                    undecodable = "\x00" in text
                    text = text.replace("\x00", "\ufffd")
                except UnicodeDecodeError:
                    text = raw.decode("utf-8", errors="replace")
                    undecodable = True
                if number == 0 and text.startswith("\ufeff"):
                    text = text[1:]
                text = " ".join(text.split())
                stats.read_lines += bool(text)
                stats.undecodable_lines += undecodable
                yield text
        except (lzma.LZMAError, gzip.BadGzipFile, zlib.error, EOFError) as e:
            raise ValueError(f"{path}: cannot decompress the file ({e})") from e


def read_document_lines(
    path: PathLike,
    stats: Optional[FileStats] = None,
    *,
    strip_gutenberg: bool = True,
    max_docs: Optional[int] = None,
    max_lines: Optional[int] = None,
    progress: Optional[tqdm] = None,
) -> Iterator[str]:
    """Stream a text file as clean lines with ``""`` between documents (see the module doc).

    Args:
        path: a plain, ``.xz`` or ``.gz`` UTF-8 text file.
        stats: filled in while iterating (format, documents, lines, undecodable lines).
        strip_gutenberg: drop the Project Gutenberg header and footer when present.
        max_docs: stop after this many documents (``None``: no limit).
        max_lines: stop after this many non-empty lines (``None``: no limit); the document
            at the cut is truncated.
        progress: a tqdm bar advanced by the bytes read from the file on disk.

    Raises:
        FileNotFoundError: if the file does not exist.
        ValueError: if the file yields no text (empty, blank or markup only), cannot be
            decompressed, is UTF-16, or more than :data:`MAX_UNDECODABLE_SHARE` of its
            non-blank lines are not UTF-8 text; the message names the file.
    """
    if stats is None:
        stats = FileStats(str(path))
    lines = read_lines(path, stats, progress)
    head = list(itertools.islice(lines, GUTENBERG_HEADER_MAX_LINES))
    lines = itertools.chain(head, lines)
    first = next((line for line in head if line), "")
    if first.startswith(_WIKIEXTRACTOR_DOC_START):
        stats.format = "wikiextractor"
        items = _wikiextractor_items(lines)
    else:
        if strip_gutenberg and any(_GUTENBERG_START.match(line) for line in head):
            stats.gutenberg_stripped = True
            lines = _gutenberg_body(lines)
        items = itertools.chain([_NEW_DOC], lines)
    yield from _layout(items, stats, max_docs, max_lines)
    if stats.undecodable_lines > MAX_UNDECODABLE_SHARE * stats.read_lines:
        raise ValueError(
            f"{path}: {stats.undecodable_lines} of {stats.read_lines} lines read "
            f"({stats.undecodable_lines / stats.read_lines:.0%}) are not UTF-8 text (invalid "
            "bytes or NUL bytes): a binary file or text in another encoding? Give UTF-8 text "
            "files (plain, .xz or .gz)"
        )
    if stats.lines == 0:
        raise ValueError(f"{path}: no text found (the file is empty, blank or markup only)")
    if stats.undecodable_lines:
        logger.warning(
            "%s: %d lines had bytes that are not valid UTF-8 or NUL bytes (replaced by U+FFFD)",
            path,
            stats.undecodable_lines,
        )


def _wikiextractor_items(lines: Iterable[str]) -> Iterator[Optional[str]]:
    for line in lines:
        if line.startswith(_WIKIEXTRACTOR_DOC_START):
            yield _NEW_DOC
        elif line != _WIKIEXTRACTOR_DOC_END:
            yield line


def _gutenberg_body(lines: Iterable[str]) -> Iterator[str]:
    lines = iter(lines)
    for line in lines:
        if _GUTENBERG_START.match(line):
            break
    for line in lines:
        if _GUTENBERG_END.match(line):
            return
        yield line


def _layout(
    items: Iterable[Optional[str]],
    stats: FileStats,
    max_docs: Optional[int],
    max_lines: Optional[int],
) -> Iterator[str]:
    """Non-empty lines with one ``""`` between documents; empty documents vanish."""
    in_doc = False
    for item in items:
        if item is _NEW_DOC:
            in_doc = False
        elif item:
            if stats.lines == max_lines:
                return
            if not in_doc:
                if stats.docs == max_docs:
                    return
                if stats.docs:
                    yield ""
                stats.docs += 1
                in_doc = True
            stats.lines += 1
            yield item
