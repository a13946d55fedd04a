"""Shared fixtures: files of the read-only shared corpus (``../shared`` next to the repository).

Tests read the shared data in place (never copied into the repository) and are skipped where
it is absent.
"""

import itertools
import lzma
from pathlib import Path

import pytest

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "corpus"


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
