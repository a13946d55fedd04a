"""SentencePiece for fairseq: train a model, write its ``dict.txt``, check a pair of them.

Id mapping. fairseq's ``Dictionary`` always starts with ``<s>=0 <pad>=1 </s>=2 <unk>=3`` and
then appends the symbols of ``dict.txt`` in file order; a ``dict.txt`` that lists these four
symbols again fails to load ("Duplicate word found"). Models made by
:func:`train_sentencepiece` reserve the same four symbols at the same ids (``bos_id=0 pad_id=1
eos_id=2 unk_id=3``) and :func:`write_fairseq_dict` lists every other piece in SentencePiece id
order, so

    fairseq id = 4 + (0-based line number in dict.txt) = SentencePiece id

for every piece, and SentencePiece's ids of a text are its fairseq ids
(:mod:`taco_fairseq.prep.binarize` writes them as they are). The masked-LM task then appends
``<mask>`` at id ``len(dict) = vocab_size``.
"""

import io
import logging
import random
import re
from pathlib import Path
from typing import Iterator, Optional, Sequence, Union

import sentencepiece as spm
from fairseq.data import Dictionary

logger = logging.getLogger(__name__)

PathLike = Union[str, Path]

#: The symbols fairseq's Dictionary puts at ids 0..3, as SentencePiece trains them here.
SPECIAL_PIECES = ("<s>", "<pad>", "</s>", "<unk>")
#: Added by fairseq's masked_lm task after the dictionary; must not be a piece.
MASK_SYMBOL = "<mask>"
MODEL_TYPES = ("unigram", "bpe")
#: SentencePiece's ``max_sentence_length`` (its default): training skips longer lines (bytes).
MAX_SENTENCE_BYTES = 4192

_TOO_LARGE = re.compile(r"Vocabulary size too high \((\d+)\)\. Please set it to a value <= (\d+)")
_TOO_SMALL = re.compile(r"Vocabulary size is smaller than required_chars\. (\d+) vs (\d+)")


def train_sentencepiece(
    text_path: PathLike,
    model_path: PathLike,
    *,
    vocab_size: int,
    model_type: str = "unigram",
    character_coverage: float = 0.9995,
    max_sentences: int = 1_000_000,
    seed: int = 1,
    num_threads: int = 1,
    source: Optional[str] = None,
) -> spm.SentencePieceProcessor:
    """Train a SentencePiece model on the non-empty lines of a text file and save it.

    Deterministic: the same file and arguments give the same model bytes (``num_threads``
    included: another thread count gives a slightly different model). When the file has
    more than ``max_sentences`` non-empty lines, a uniform sample of that many lines, drawn
    with ``random.Random(seed)``, is used (SentencePiece's own ``input_sentence_size``
    sampling differs from run to run even with ``set_random_generator_seed``, as of 0.2.3).
    Lines longer than SentencePiece's ``max_sentence_length`` (:data:`MAX_SENTENCE_BYTES`) are
    skipped by it (counted in the log line).

    Args:
        text_path: UTF-8 text, one sentence or paragraph per line.
        model_path: where to write the model (e.g. ``sentencepiece.bpe.model``).
        vocab_size: pieces in the model, including ``<s> <pad> </s> <unk>`` (ids 0..3).
        model_type: ``"unigram"`` or ``"bpe"``.
        character_coverage: fraction of characters the model covers; rarer characters
            become ``<unk>``.
        max_sentences: at most this many lines are used, which bounds the trainer's memory.
        seed: seed of the line sample.
        num_threads: trainer threads (changes the model, see above).
        source: what the text was made of, for messages (default: ``text_path``).

    Returns:
        The trained model.

    Raises:
        ValueError: if ``vocab_size`` does not fit the text (too large for its pieces, or
            smaller than the characters it must cover); the message names ``--vocab-size``
            and the limit; if no line is short enough for SentencePiece (e.g. a text without
            line breaks), naming ``source`` and the fix.
    """
    total = too_long = longest = 0
    for line in _non_empty_lines(text_path):
        size = len(line.encode("utf-8"))
        total += 1
        too_long += size > MAX_SENTENCE_BYTES
        longest = max(longest, size)
    if total and too_long == total:  # SentencePiece: "INTERNAL ... !sentences_.empty()"
        raise ValueError(
            f"{source or text_path}: every line of the training text is longer than the "
            f"{MAX_SENTENCE_BYTES} bytes SentencePiece trains on (the longest has {longest:,} "
            "bytes), so it has nothing to learn from. Break the text into lines: a sentence or "
            "paragraph per line (the lines of a file stay one document)."
        )
    logger.info(
        "training a %s SentencePiece model of %d pieces on %d of %d lines of %s (%d lines "
        "longer than %d bytes are skipped by SentencePiece)",
        model_type,
        vocab_size,
        min(total, max_sentences),
        total,
        text_path,
        too_long,
        MAX_SENTENCE_BYTES,
    )
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=_sample_lines(text_path, total, max_sentences, seed),
            model_writer=model,
            vocab_size=vocab_size,
            model_type=model_type,
            character_coverage=character_coverage,
            input_sentence_size=0,  # the sentences are sampled already
            max_sentence_length=MAX_SENTENCE_BYTES,
            bos_id=0,
            pad_id=1,
            eos_id=2,
            unk_id=3,
            num_threads=num_threads,
            minloglevel=1,
        )
    except RuntimeError as e:
        message = _vocab_size_message(str(e))
        if message is None:
            raise
        raise ValueError(message) from e
    Path(model_path).write_bytes(model.getvalue())
    return spm.SentencePieceProcessor(model_proto=model.getvalue())


def _vocab_size_message(error: str) -> Optional[str]:
    for pattern, message in (
        (_TOO_LARGE, "--vocab-size {0} is too large for this training text: SentencePiece can "
                     "make at most {1} pieces of it. Use --vocab-size {1} or less, or more text."),
        (_TOO_SMALL, "--vocab-size {0} is too small: the characters of the training text (at "
                     "--character-coverage) and the special symbols need {1} pieces. Use "
                     "--vocab-size {1} or more, or a lower --character-coverage."),
    ):
        match = pattern.search(error)
        if match:
            return message.format(*match.groups())
    return None


def _non_empty_lines(path: PathLike) -> Iterator[str]:
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if line:
                yield line


def _sample_lines(path: PathLike, total: int, size: int, seed: int) -> Iterator[str]:
    """The non-empty lines of ``path`` if ``total <= size``, else ``size`` of them, in order."""
    lines = _non_empty_lines(path)
    if total <= size:
        yield from lines
        return
    wanted = iter(sorted(random.Random(seed).sample(range(total), size)))
    next_wanted = next(wanted)
    for index, line in enumerate(lines):
        if index == next_wanted:
            yield line
            next_wanted = next(wanted, None)
            if next_wanted is None:
                return


def write_fairseq_dict(
    model: spm.SentencePieceProcessor, counts: Sequence[int], path: PathLike
) -> int:
    """Write the fairseq ``dict.txt`` of a SentencePiece model (id mapping: see module doc).

    One line ``<piece> <count>`` per piece after the four special ones, in SentencePiece id
    order. ``counts[i]`` is the count of id ``i`` (e.g. :attr:`DatasetWriter.counts
    <taco_fairseq.prep.binarize.DatasetWriter.counts>` of the training split), so fairseq's
    frequency-weighted options see real frequencies.

    Returns:
        The number of pieces written (``vocab_size - 4``).

    Raises:
        ValueError: if the model's ids 0..3 are not ``<s> <pad> </s> <unk>``, or a later piece
            cannot be a fairseq symbol at its id: a control or unknown symbol, empty, with
            whitespace, or ``<mask>`` (which the masked-LM task adds itself).
    """
    specials = [model.id_to_piece(i) for i in range(len(SPECIAL_PIECES))]
    if specials != list(SPECIAL_PIECES):
        raise ValueError(
            f"the SentencePiece model's first pieces are {specials}, not {list(SPECIAL_PIECES)} "
            "(fairseq's ids 0..3); train it with taco_fairseq.prep.vocabulary.train_sentencepiece"
        )
    with open(path, "w", encoding="utf-8") as f:
        for i in range(len(SPECIAL_PIECES), model.get_piece_size()):
            piece = model.id_to_piece(i)
            if (
                model.is_control(i)
                or model.is_unknown(i)
                or piece == MASK_SYMBOL
                or piece.split() != [piece]
            ):
                raise ValueError(
                    f"SentencePiece piece {i} {piece!r} cannot be a fairseq dictionary symbol "
                    f"(a control symbol, empty, with whitespace, or {MASK_SYMBOL})"
                )
            f.write(f"{piece} {counts[i]}\n")
    return model.get_piece_size() - len(SPECIAL_PIECES)


def check_fairseq_dict(
    model: spm.SentencePieceProcessor, dictionary: Dictionary, names: str
) -> None:
    """Check that every fairseq id of ``dictionary`` is the SentencePiece id of its piece.

    Args:
        names: the two files, for the message (e.g. ``"data-bin/dict.txt and its model"``).

    Raises:
        ValueError: sizes or pieces differ (the message names ``names`` and the first
            mismatch).
    """
    if len(dictionary) != model.get_piece_size():
        raise ValueError(
            f"{names} do not belong together: {len(dictionary)} fairseq symbols, "
            f"{model.get_piece_size()} SentencePiece pieces"
        )
    for i in range(dictionary.nspecial, len(dictionary)):
        if dictionary[i] != model.id_to_piece(i):
            raise ValueError(
                f"{names} do not belong together: id {i} is {dictionary[i]!r} in fairseq, "
                f"{model.id_to_piece(i)!r} in SentencePiece"
            )
