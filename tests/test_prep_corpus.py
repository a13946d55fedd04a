"""Reading raw corpus files: compression, decoding, documents, Gutenberg boilerplate, errors."""

import gzip
import io
import logging
import lzma
import random
import re

import pytest

from taco_fairseq.prep import corpus
from taco_fairseq.prep.corpus import FileStats, read_document_lines, split_lines


def _read(path, **kwargs):
    stats = FileStats(str(path))
    return list(read_document_lines(path, stats, **kwargs)), stats


@pytest.fixture(scope="module")
def wiki_slice(wikipedia_aa, head):
    """The first 1000 raw lines of Wikipedia AA (several whole articles, the last one cut)."""
    return head(wikipedia_aa, 1000)


@pytest.mark.parametrize("suffix", [".txt", ".txt.gz", ".txt.xz"])
def test_wikiextractor_documents_in_any_compression(wiki_slice, tmp_path, suffix):
    compress = {".txt": bytes, ".txt.gz": gzip.compress, ".txt.xz": lzma.compress}[suffix]
    path = tmp_path / f"AA-head{suffix}"
    path.write_bytes(compress(wiki_slice))

    lines, stats = _read(path)

    raw = wiki_slice.decode("utf-8")
    titles = re.findall(r'^<doc id="\d+" url="[^"]*" title="([^"]*)">$', raw, re.M)
    assert len(titles) > 5
    text = [" ".join(line.split()) for line in raw.split("\n")]  # whitespace runs -> 1 space
    text = [line for line in text if line and not line.startswith("<doc ") and line != "</doc>"]
    assert [line for line in lines if line] == text  # markup and blank lines gone, order kept
    assert lines[0] == titles[0]
    # exactly one blank line between documents, each document starting with its title
    breaks = [i for i, line in enumerate(lines) if not line]
    assert [lines[i + 1] for i in breaks] == titles[1:]
    assert all(b - a > 1 for a, b in zip(breaks, breaks[1:]))
    assert lines[-1] != ""
    assert (stats.format, stats.docs, stats.lines) == ("wikiextractor", len(titles), len(text))


def test_wikitext_crlf_is_one_document(wikitext_test):
    lines, stats = _read(wikitext_test)
    assert stats.lines == 2891  # the non-empty lines of the file (shared/data/README.md)
    assert (stats.format, stats.docs) == ("plain", 1)
    assert "" not in lines
    assert not any("\r" in line or line != line.strip() for line in lines)
    assert lines[0] == "= Robert Boulter ="


@pytest.mark.parametrize(
    "book, first, last",
    [
        ("alice", "ALICE’S ADVENTURES IN WONDERLAND", "THE END"),
        (
            "earnest",
            "Transcribed from the 1915 Methuen & Co. Ltd. edition by David Price,",
            "TABLEAU",
        ),
    ],
)
def test_gutenberg_header_and_footer_are_stripped(book, first, last, request):
    path = request.getfixturevalue(book)
    stripped, stats = _read(path)
    kept, kept_stats = _read(path, strip_gutenberg=False)

    assert (stripped[0], stripped[-1]) == (first, last)
    assert stats.gutenberg_stripped and not kept_stats.gutenberg_stripped
    assert not any("project gutenberg" in line.lower() for line in stripped)
    assert kept[0].startswith(("The Project Gutenberg", "Project Gutenberg"))  # BOM removed
    assert kept.index(first) > 0 and kept[-1] != last
    assert stats.docs == kept_stats.docs == 1


def test_whitespace_is_normalized(tmp_path):
    path = tmp_path / "spaces.txt"
    path.write_text("\ufeff  a\tb\u00a0 c \u2028d  \r\n\r\n\x0b\ne\x1cf\n", encoding="utf-8")
    assert _read(path)[0] == ["a b c d", "e f"]


@pytest.mark.parametrize("suffix", [".txt", ".txt.xz"])
def test_cr_only_line_ends_give_the_lines_of_lf_and_crlf(tmp_path, suffix):
    """Classic Mac OS text (CR only) is split into lines as LF and CRLF text (universal
    newlines), not read as one line."""
    text = '<doc id="1" url="u" title="One">\nOne\n\nFirst line.\n</doc>\n' \
        '<doc id="2" url="u" title="Two">\nTwo\nSecond line.\n\n\nLast line.\n</doc>\n'
    compress = lzma.compress if suffix == ".txt.xz" else bytes
    results = {}
    for name, end in (("lf", "\n"), ("crlf", "\r\n"), ("cr", "\r")):
        path = tmp_path / f"{name}{suffix}"
        path.write_bytes(compress(("\ufeff" + text.replace("\n", end)).encode("utf-8")))
        lines, stats = _read(path)
        results[name] = lines, (stats.format, stats.docs, stats.lines, stats.read_lines)
    assert results["cr"] == results["crlf"] == results["lf"] == (
        ["One", "First line.", "", "Two", "Second line.", "Last line."],
        ("wikiextractor", 2, 5, 9),
    )


@pytest.mark.parametrize("chunk_bytes", [1, 2, 3, 7, 1 << 20])
def test_split_lines_is_universal_newlines_across_chunk_boundaries(monkeypatch, chunk_bytes):
    """Lines (ends kept) as ``bytes.splitlines`` gives them for the whole stream, however the
    reads cut it, also a \\r\\n cut between two reads."""
    monkeypatch.setattr(corpus, "READ_CHUNK_BYTES", chunk_bytes)
    rng = random.Random(0)
    data = bytes(rng.choice(b"ab\r\n") for _ in range(2000)) + b"\r"
    assert list(split_lines(io.BytesIO(data))) == data.splitlines(keepends=True)
    assert list(split_lines(io.BytesIO(b"a\r\nb"))) == [b"a\r\n", b"b"]
    assert list(split_lines(io.BytesIO(b""))) == []


def test_undecodable_bytes_are_replaced_and_counted(tmp_path, caplog):
    path = tmp_path / "latin1.txt"
    path.write_bytes(b"caf\xe9 au lait\nok\nna\xc3\xafve\n")  # a Latin-1 byte, then UTF-8
    with caplog.at_level(logging.WARNING):
        lines, stats = _read(path)
    assert lines == ["caf\ufffd au lait", "ok", "naïve"]
    assert stats.undecodable_lines == 1
    assert str(path) in caplog.text and "1 lines" in caplog.text


def test_nul_bytes_count_as_undecodable(tmp_path):
    path = tmp_path / "nul.txt"
    path.write_bytes(b"a\x00b\nok\n\nfine\n")
    lines, stats = _read(path)
    assert lines == ["a\ufffdb", "ok", "fine"]
    assert (stats.undecodable_lines, stats.read_lines) == (1, 3)


def test_a_file_of_mostly_undecodable_lines_is_an_error(tmp_path):
    path = tmp_path / "binary.dat"
    path.write_bytes(b"\x80\x81 x\n" * 3 + b"ok\n")
    with pytest.raises(ValueError, match=re.escape(
            f"{path}: 3 of 4 lines read (75%) are not UTF-8 text (invalid bytes or NUL bytes)")):
        _read(path)
    path.write_bytes(b"\x80\x81 x\n" * 2 + b"ok\n" * 2)  # half: kept, with a warning
    assert _read(path)[1].undecodable_lines == 2


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be"])
def test_utf16_with_a_byte_order_mark_is_an_error(tmp_path, encoding):
    path = tmp_path / "utf16.txt"
    path.write_bytes(("\ufeff" if encoding.endswith("be") else "").encode(encoding)
                     + "Some text.\n".encode(encoding))
    with pytest.raises(ValueError, match="the file is UTF-16 text"):
        _read(path)


def test_limits(wikipedia_aa):
    lines, stats = _read(wikipedia_aa, max_docs=3)
    assert lines.count("") == 2 and stats.docs == 3
    lines, stats = _read(wikipedia_aa, max_lines=5)
    assert len(lines) == 5 and stats.lines == 5 and stats.docs == 1


@pytest.mark.parametrize(
    "content",
    [b"", b"\n  \r\n\t\n", b'<doc id="1" url="u" title="t">\n\n</doc>\n'],
    ids=["empty", "blank", "markup-only"],
)
def test_file_without_text_is_an_error(tmp_path, content):
    path = tmp_path / "nothing.txt"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=f"{re.escape(str(path))}: no text"):
        _read(path)


def test_missing_file_is_an_error(tmp_path):
    path = tmp_path / "missing.txt.xz"
    with pytest.raises(FileNotFoundError, match=re.escape(f"input file not found: {path}")):
        _read(path)
    with pytest.raises(FileNotFoundError, match=re.escape(
            f"input file is not a regular file: {tmp_path}")):  # e.g. a directory
        _read(tmp_path)


@pytest.mark.parametrize(
    "name, content",
    [
        ("garbage.txt.xz", b"not xz at all\n"),
        ("truncated.txt.xz", lzma.compress(b"some text\n" * 1000)[:-30]),
        ("garbage.txt.gz", b"not gzip either\n"),
    ],
)
def test_corrupt_compressed_file_is_an_error(tmp_path, name, content):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(ValueError, match=f"{re.escape(str(path))}: cannot decompress"):
        _read(path)
