"""Sentences of raw text for the contextual score (paper, appendix A.3: a context is a sentence).

Files are read with :func:`taco_fairseq.prep.corpus.read_document_lines` (plain, ``.xz`` or ``.gz``;
WikiExtractor markup and Project Gutenberg boilerplate dropped). Two ways to cut them:

* ``split`` (default): the lines of each document are joined with spaces and cut into
  sentences by `sentencex <https://github.com/wikimedia/sentencex>`_ (Wikimedia's rule-based
  segmenter). This is right for the prepared corpora, where a line is a paragraph (Wikipedia,
  WikiText) or a hard-wrapped piece of one (Project Gutenberg books), never a sentence.
* ``line``: every non-empty line is one sentence, for text already split one sentence per line.
"""

import random
from pathlib import Path
from typing import Iterable, Iterator, List, Optional, Sequence, Union

import sentencex

from ..prep.corpus import read_document_lines

SENTENCE_MODES = ("split", "line")


def read_sentences(
    path: Union[str, Path],
    mode: str = "split",
    language: str = "en",
    max_lines: Optional[int] = None,
) -> Iterator[str]:
    """Yield the sentences of one text file, stripped, in order.

    Args:
        path: plain, ``.xz`` or ``.gz`` UTF-8 text.
        mode: ``split`` (documents cut by sentencex) or ``line`` (a line is a sentence).
        language: sentencex's language code (``split`` only).
        max_lines: read at most this many non-empty lines of the file.

    Raises:
        ValueError: for an unknown ``mode``, or a file without text.
        FileNotFoundError: if the file does not exist.
    """
    if mode not in SENTENCE_MODES:
        raise ValueError(f"sentence mode must be one of {SENTENCE_MODES}, got {mode!r}")
    lines = read_document_lines(path, max_lines=max_lines)
    if mode == "line":
        yield from filter(None, lines)
        return
    for document in _documents(lines):
        for sentence in sentencex.segment(language, " ".join(document)):
            sentence = sentence.strip()
            if sentence:
                yield sentence


def _documents(lines: Iterable[str]) -> Iterator[List[str]]:
    """Group lines into documents (separated by ``""``)."""
    document = []
    for line in lines:
        if line:
            document.append(line)
        elif document:
            yield document
            document = []
    if document:
        yield document


def sample_sentences(
    paths: Sequence[Union[str, Path]],
    num_sentences: int,
    seed: int,
    mode: str = "split",
    language: str = "en",
    max_lines: Optional[int] = None,
) -> List[str]:
    """A seeded uniform sample of the sentences of ``paths`` (all of them if fewer), in random
    order (``random.Random(seed).sample``).

    Args:
        paths: text files; their sentences are pooled.
        num_sentences: sample size (>= 1).
        seed: the sample's seed.
        mode, language, max_lines: as :func:`read_sentences` (``max_lines`` per file).

    Raises:
        ValueError: if ``num_sentences < 1`` or the files hold no sentence.
        FileNotFoundError: if a file does not exist.
    """
    if num_sentences < 1:
        raise ValueError(f"the number of sentences must be >= 1, got {num_sentences}")
    pool = [s for path in paths for s in read_sentences(path, mode, language, max_lines)]
    if not pool:
        raise ValueError(f"no sentences in {[str(p) for p in paths]}")
    return random.Random(seed).sample(pool, min(num_sentences, len(pool)))
