"""Real text for the export's parity check: lines of corpus files, and the hard cases among them.

Lines are read as ``taco-prepare-data`` reads its input
(:func:`taco_fairseq.prep.corpus.read_document_lines`: UTF-8, whitespace runs made one space), so they
look like the model's training text. :func:`select_check_text` picks from them the cases a
converted tokenizer or model gets wrong first: the longest lines (past ``max_positions``, so
truncation is exercised), lines rich in non-ASCII characters, lines with characters the
SentencePiece model does not know (``<unk>``), lines with a ``<mask>`` (at the start, inside,
at the end) and pairs of sentences (``<s> a </s> </s> b </s>``).
"""

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, List, Sequence, Tuple, Union

from ..prep.corpus import read_document_lines

PathLike = Union[str, Path]
MASK = "<mask>"


@dataclass
class CheckText:
    """Text for :mod:`taco_fairseq.hf_export.parity`.

    Attributes:
        lines: every line read (the tokenizer is compared on all of them).
        sentences: the hard cases (tokenizer and model outputs are compared).
        pairs: sentence pairs short enough to need no truncation.
    """

    lines: List[str]
    sentences: List[str] = field(default_factory=list)
    pairs: List[Tuple[str, str]] = field(default_factory=list)


def read_check_lines(paths: Sequence[PathLike], max_lines: int) -> List[str]:
    """The first ``max_lines`` non-empty lines of each file (plain, ``.xz`` or ``.gz``).

    Raises:
        FileNotFoundError: if a file is missing; ValueError: if one has no text.
    """
    lines = []
    for path in paths:
        lines.extend(line for line in read_document_lines(path, max_lines=max_lines) if line)
    return lines


def select_check_text(
    lines: Sequence[str],
    encode: Callable[[str], Sequence[int]],
    unk_id: int,
    max_positions: int,
    *,
    per_kind: int = 4,
) -> CheckText:
    """Pick the hard cases of ``lines`` (see the module doc), ``per_kind`` of each kind.

    Args:
        lines: candidate lines (from :func:`read_check_lines`).
        encode: the SentencePiece ids of a line.
        unk_id: SentencePiece's ``<unk>`` id.
        max_positions: the model's longest input; pairs are made of lines of at most
            ``(max_positions - 4) / 2`` pieces, so they fit with their four ``<s>``/``</s>``.
        per_kind: lines of each kind (first, longest, most non-ASCII, most unknown, masked,
            pairs).

    Raises:
        ValueError: if ``lines`` is empty.
    """
    if not lines:
        raise ValueError("no check text: the check-text files hold no non-empty line")
    longest = _top(lines, len, per_kind)
    unicode_rich = _top(lines, lambda line: len({c for c in line if not c.isascii()}), per_kind)
    unknown = _top(lines, lambda line: list(encode(line)).count(unk_id), per_kind)
    worded = [line for line in lines if len(line.split()) >= 3][:per_kind]
    masked = [_mask_word(line, i) for i, line in enumerate(worded)]
    fitting = [i for i, line in enumerate(lines) if 2 * len(encode(line)) + 4 <= max_positions]
    pairs = [(lines[a], lines[b]) for a, b in zip(fitting[0::2], fitting[1::2])][:per_kind]
    sentences = _unique(itertools.chain(lines[:per_kind], longest, unicode_rich, unknown, masked))
    return CheckText(lines=list(lines), sentences=sentences, pairs=pairs)


def _top(lines: Sequence[str], score, count: int) -> List[str]:
    """The ``count`` lines of highest positive ``score``, best first."""
    scored = [(score(line), -i) for i, line in enumerate(lines)]
    best = sorted((s for s in scored if s[0] > 0), reverse=True)[:count]
    return [lines[-i] for _, i in best]


def _mask_word(line: str, which: int) -> str:
    """``line`` with its first, middle or last word (by ``which % 3``) replaced by ``<mask>``."""
    words = line.split(" ")
    index = (0, len(words) // 2, len(words) - 1)[which % 3]
    words[index] = MASK
    return " ".join(words)


def _unique(items: Iterable[str]) -> List[str]:
    return list(dict.fromkeys(items))
