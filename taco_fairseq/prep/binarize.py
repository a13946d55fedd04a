"""Token ids -> fairseq's binarized dataset ``{prefix}.bin``/``{prefix}.idx`` ("mmap" format).

``fairseq-preprocess --only-source --dataset-impl mmap --srcdict dict.txt`` turns every line of
text into the dictionary ids of its whitespace-separated tokens (a token missing from the
dictionary becomes ``<unk>``) followed by ``</s>``, and writes them with fairseq's
``make_builder(..., "mmap", vocab_size=len(dictionary))``, whose element type is ``uint16``
below 65,500 symbols and ``uint32`` above. :class:`DatasetWriter` takes the ids instead of the
text and writes the same bytes with the same builder. In the data-bins of
``taco-prepare-data`` SentencePiece's ids are those ids (:mod:`taco_fairseq.prep.vocabulary`:
fairseq id == SentencePiece id, and SentencePiece's unknown id 3 is fairseq's ``<unk>``), so
the pieces of a line never pass through text; for any other ``dict.txt``,
:class:`taco_fairseq.prep.vocabulary.DictionaryEncoder` gives them.
"""

from pathlib import Path
from typing import Iterable, Sequence, Union

import numpy as np
import torch
from fairseq.data import Dictionary
from fairseq.data.indexed_dataset import data_file_path, index_file_path, make_builder

_SPECIALS = Dictionary()
#: fairseq's ``</s>`` and ``<unk>`` ids (those of every Dictionary with the default specials).
EOS = _SPECIALS.eos()
UNK = _SPECIALS.unk()


class DatasetWriter:
    """Write entries of token ids, each followed by ``</s>``, as the fairseq dataset ``prefix``.

    Use as a context manager: the index ``{prefix}.idx`` is written when the block ends without
    an error; after an error the files are incomplete and the caller removes them. The counters
    cover everything written so far.

    Args:
        prefix: path without extension (``destdir/train`` gives ``train.bin``/``train.idx``).
        vocab_size: symbols of the dictionary the ids belong to (``len(dictionary)``, without a
            ``<mask>`` a task adds later); chooses the element type as fairseq-preprocess does.

    Attributes:
        entries: entries written (one per :meth:`add`-ed sequence).
        counts: occurrences of each id in the written data, ``</s>`` included (int64 array of
            ``vocab_size``).
    """

    def __init__(self, prefix: Union[str, Path], vocab_size: int):
        self.prefix = str(prefix)
        self.vocab_size = vocab_size
        self.entries = 0
        self.counts = np.zeros(vocab_size, dtype=np.int64)
        self._builder = make_builder(data_file_path(self.prefix), "mmap", vocab_size=vocab_size)

    def add(self, sequences: Iterable[Sequence[int]]) -> None:
        """Append one entry per sequence of ids (e.g. SentencePiece's ``encode`` of lines).

        Raises:
            ValueError: an id is negative or not below ``vocab_size``.
        """
        items = []
        for ids in sequences:
            item = np.empty(len(ids) + 1, dtype=np.int64)
            item[:-1] = ids
            item[-1] = EOS
            items.append(item)
        if not items:
            return
        flat = np.concatenate(items)
        if flat.min() < 0 or flat.max() >= self.vocab_size:
            bad = flat[(flat < 0) | (flat >= self.vocab_size)][0]
            raise ValueError(
                f"token id {bad} is outside the dictionary of {self.vocab_size} symbols of "
                f"{self.prefix}: the SentencePiece model and dict.txt do not belong together"
            )
        for item in items:
            self._builder.add_item(torch.from_numpy(item))
        self.counts += np.bincount(flat, minlength=self.vocab_size)
        self.entries += len(items)

    @property
    def tokens(self) -> int:
        """Ids written, ``</s>`` included (fairseq-preprocess's "tokens", the sum of the sizes)."""
        return int(self.counts.sum())

    @property
    def pieces(self) -> int:
        """Ids written without the ``</s>`` that ends each entry: the tokens of the text, the
        count :meth:`summary` and ``prep_info.json`` give."""
        return self.tokens - self.entries

    @property
    def unk_tokens(self) -> int:
        """``<unk>`` ids written (fairseq-preprocess's "replaced by <unk>")."""
        return int(self.counts[UNK])

    def summary(self, name: Union[str, Path, None] = None) -> str:
        """One line: entries, tokens without the ``</s>`` ending each entry (:attr:`pieces`;
        fairseq-preprocess counts them, its "tokens" are :attr:`tokens`) and ``<unk>`` tokens
        with their share of those tokens, after ``name`` (default: the prefix; e.g. where the
        dataset will be moved)."""
        share = 100 * self.unk_tokens / max(self.pieces, 1)
        return (
            f"{name or self.prefix}: {self.entries} entries, {self.pieces} tokens (not counting "
            f"the </s> that ends each entry), {self.unk_tokens} of them <unk> ({share:.3g}%)"
        )

    def __enter__(self) -> "DatasetWriter":
        return self

    def __exit__(self, exc_type, exc, traceback) -> None:
        if exc_type is None:
            self._builder.finalize(index_file_path(self.prefix))
