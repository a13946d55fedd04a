"""Sentences of a CoNLL-U treebank (Universal Dependencies' format,
https://universaldependencies.org/format.html) as the part-of-speech probe reads them: the
sentence's text and, per syntactic word, its form, its gold UPOS tag and where it lies in the
text.

CoNLL-U, as this reader follows it: a sentence is a block of lines ended by a blank line;
``#`` lines are comments (``# text = ...`` among them); every other line has 10 tab-separated
columns, of which ID (1), FORM (2), UPOS (4) and MISC (10) are read. ID is

* an integer ``n``: a syntactic word, the unit that carries a UPOS tag;
* a range ``n-m``: a multi-word token, the surface form of the words ``n`` … ``m`` that follow
  it (``don't`` = ``do`` + ``n't``); it has no tag;
* a decimal ``n.k``: an empty node of the enhanced graph, not in the text; left out.

The text is rebuilt from the surface tokens (words outside a multi-word token, and multi-word
tokens) joined by one space, or by none after a token whose MISC has ``SpaceAfter=No``, as the
format defines it. A word inside a multi-word token gets the span of its form within the
token's form when the forms of the token's words concatenate to it (every one of UD English
EWT's 713 in dev and test does), else the whole token's span.
"""

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, List, Tuple, Union

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Word:
    """One syntactic word.

    Attributes:
        form: FORM (column 2).
        upos: the gold universal part-of-speech tag (column 4).
        start, end: its span in the sentence's text, in UTF-8 bytes (end exclusive): the unit
            of SentencePiece's piece offsets.
    """

    form: str
    upos: str
    start: int
    end: int


@dataclass(frozen=True)
class Sentence:
    """One sentence: ``text`` rebuilt from its tokens (module doc), its ``words`` in order,
    and ``sent_id`` from its comments (empty when it has none)."""

    text: str
    words: Tuple[Word, ...]
    sent_id: str = ""


class CoNLLUError(ValueError):
    """A CoNLL-U file that does not follow the format; the message names file and line."""


def read_conllu(path: Union[str, Path]) -> List[Sentence]:
    """The sentences of a CoNLL-U file (module doc), in file order.

    Raises:
        FileNotFoundError: ``path`` does not exist (the message names it).
        CoNLLUError: a word line without 10 columns, an ID that is neither an integer, a
            range nor a decimal, a word of a multi-word token missing, or no sentence at all.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such CoNLL-U file (e.g. the UD English EWT's "
                                "en_ewt-ud-test.conllu)")
    sentences = list(_sentences(path))
    if not sentences:
        raise CoNLLUError(f"{path}: no sentence in it; give a CoNLL-U file (10 tab-separated "
                          "columns per word line)")
    return sentences


def _blocks(path: Path) -> Iterator[List[Tuple[int, str]]]:
    """The file's sentences as lists of (line number, line), comments included."""
    block: List[Tuple[int, str]] = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.rstrip("\r\n")
            if line.strip():
                block.append((number, line))
            elif block:
                yield block
                block = []
    if block:
        yield block


def _sentences(path: Path) -> Iterator[Sentence]:
    for block in _blocks(path):
        sent_id = ""
        # surface tokens: (form, space after, [(word form, upos)], first line number)
        tokens: List[Tuple[str, bool, List[Tuple[str, str]], int]] = []
        pending = 0  # words of the current multi-word token still to come
        for number, line in block:
            if line.startswith("#"):
                key, _, value = line[1:].partition("=")
                if key.strip() == "sent_id":
                    sent_id = value.strip()
                continue
            columns = line.split("\t")
            if len(columns) != 10:
                raise CoNLLUError(f"{path}:{number}: {len(columns)} tab-separated columns, "
                                  "CoNLL-U has 10")
            ident, form, upos, misc = columns[0], columns[1], columns[3], columns[9]
            space_after = "SpaceAfter=No" not in misc.split("|")
            if "-" in ident:
                first, _, last = ident.partition("-")
                if not (first.isdigit() and last.isdigit()) or int(last) < int(first):
                    raise CoNLLUError(f"{path}:{number}: ID {ident!r} is no range n-m")
                if pending:
                    raise CoNLLUError(f"{path}:{number}: a multi-word token before the "
                                      "words of the last one")
                tokens.append((form, space_after, [], number))
                pending = int(last) - int(first) + 1
            elif "." in ident:
                whole, _, part = ident.partition(".")
                if not (whole.isdigit() and part.isdigit()):
                    raise CoNLLUError(f"{path}:{number}: ID {ident!r} is no decimal n.k")
            elif ident.isdigit():
                if pending:
                    tokens[-1][2].append((form, upos))
                    pending -= 1
                else:
                    tokens.append((form, space_after, [(form, upos)], number))
            else:
                raise CoNLLUError(f"{path}:{number}: ID {ident!r} is neither an integer, a "
                                  "range n-m nor a decimal n.k")
        if pending:
            raise CoNLLUError(f"{path}:{block[-1][0]}: the sentence ends {pending} word(s) "
                              "short of its last multi-word token")
        if tokens:  # a block of comments only holds no sentence
            yield _sentence(tokens, sent_id)


def _sentence(tokens, sent_id: str) -> Sentence:
    """Rebuild the text from the surface tokens and place each word in it (module doc)."""
    text, words, offset = [], [], 0
    for i, (form, space_after, parts, _) in enumerate(tokens):
        start = offset
        encoded = form.encode("utf-8")
        if "".join(f for f, _ in parts) == form:
            for part, upos in parts:
                size = len(part.encode("utf-8"))
                words.append(Word(part, upos, offset, offset + size))
                offset += size
        else:
            words.extend(Word(part, upos, start, start + len(encoded)) for part, upos in parts)
            offset += len(encoded)
        text.append(form)
        if space_after and i < len(tokens) - 1:
            text.append(" ")
            offset += 1
    return Sentence("".join(text), tuple(words), sent_id)
