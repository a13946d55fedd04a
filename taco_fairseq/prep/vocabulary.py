"""SentencePiece for fairseq: train a model, encode text files in parallel, write ``dict.txt``.

Id mapping. fairseq's ``Dictionary`` always starts with ``<s>=0 <pad>=1 </s>=2 <unk>=3`` and
then appends the symbols of ``dict.txt`` in file order; a ``dict.txt`` that lists these four
symbols again fails to load ("Duplicate word found"). :func:`write_fairseq_dict` therefore
lists the pieces of a model in SentencePiece id order without its control and unknown symbols,
so that

    fairseq id = 4 + (0-based line number in dict.txt)

for every listed piece. Models made by :func:`train_sentencepiece` reserve the same four
symbols at the same ids (``bos_id=0 pad_id=1 eos_id=2 unk_id=3``), so for them the fairseq id
of every piece *equals* its SentencePiece id. The masked-LM task then appends ``<mask>`` at id
``len(dict) = vocab_size``.
"""

import collections
import io
import itertools
import logging
import random
import re
from pathlib import Path
from typing import Counter, Iterable, Iterator, List, Optional, Tuple, Union

import sentencepiece as spm
from tqdm import tqdm

from .parallel import ordered_imap

logger = logging.getLogger(__name__)

PathLike = Union[str, Path]

#: The symbols fairseq's Dictionary puts at ids 0..3, as SentencePiece trains them here.
SPECIAL_PIECES = ("<s>", "<pad>", "</s>", "<unk>")
#: Added by fairseq's masked_lm task after the dictionary; must not be a piece.
MASK_SYMBOL = "<mask>"
MODEL_TYPES = ("unigram", "bpe")

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
) -> spm.SentencePieceProcessor:
    """Train a SentencePiece model on the non-empty lines of a text file and save it.

    Deterministic: the same file and arguments give the same model bytes (``num_threads``
    included: another thread count gives a slightly different model). When the file has
    more than ``max_sentences`` non-empty lines, a uniform sample of that many lines, drawn
    with ``random.Random(seed)``, is used (SentencePiece's own ``input_sentence_size``
    sampling differs from run to run even with ``set_random_generator_seed``, as of 0.2.3).
    Lines longer than SentencePiece's ``max_sentence_length`` (4192 bytes) are skipped by it.

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

    Returns:
        The trained model.

    Raises:
        ValueError: if ``vocab_size`` does not fit the text (too large for its pieces, or
            smaller than the characters it must cover); the message names ``--vocab-size``
            and the limit.
    """
    total = sum(1 for _ in _non_empty_lines(text_path))
    logger.info(
        "training a %s SentencePiece model of %d pieces on %d of %d lines of %s",
        model_type,
        vocab_size,
        min(total, max_sentences),
        total,
        text_path,
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
    too_large = _TOO_LARGE.search(error)
    if too_large:
        wanted, limit = too_large.groups()
        return (
            f"--vocab-size {wanted} is too large for this training text: SentencePiece can "
            f"make at most {limit} pieces of it. Use --vocab-size {limit} or less, or more text."
        )
    too_small = _TOO_SMALL.search(error)
    if too_small:
        wanted, needed = too_small.groups()
        return (
            f"--vocab-size {wanted} is too small: the characters of the training text (at "
            f"--character-coverage) and the special symbols need {needed} pieces. Use "
            f"--vocab-size {needed} or more, or a lower --character-coverage."
        )
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


def encode_file(
    model_path: PathLike,
    source: PathLike,
    dest: PathLike,
    *,
    workers: int = 1,
    chunk_lines: int = 2000,
) -> Counter[str]:
    """Encode a text file into space-separated SentencePiece pieces, line by line, in parallel.

    ``dest`` has exactly one line per line of ``source``, in the same order; an empty line
    stays empty (a document boundary for fairseq). Progress is shown with tqdm (in lines).

    Args:
        model_path: a SentencePiece model file.
        source: UTF-8 text.
        dest: output file (overwritten).
        workers: encoding processes; each loads the model once.
        chunk_lines: lines per task sent to a worker.

    Returns:
        How often each piece occurs in ``dest``. Characters the model does not know appear
        as their own surface string (SentencePiece's ``encode(out_type=str)``), so a key
        that is not a piece of the model counts ``<unk>`` tokens.
    """
    with open(source, encoding="utf-8") as f:
        total = sum(1 for _ in f)
    counts: Counter[str] = collections.Counter()
    with open(source, encoding="utf-8") as fin, open(dest, "w", encoding="utf-8") as fout:
        chunks = _chunks((line.rstrip("\n") for line in fin), chunk_lines)
        results = ordered_imap(
            _encode_chunk,
            chunks,
            workers=workers,
            initializer=_load_worker_model,
            initargs=(str(model_path),),
        )
        with tqdm(total=total, unit=" lines", desc=f"encoding {Path(source).name}") as progress:
            for encoded, chunk_counts in results:
                fout.writelines(line + "\n" for line in encoded)
                counts.update(chunk_counts)
                progress.update(len(encoded))
    return counts


def _chunks(items: Iterable[str], size: int) -> Iterator[List[str]]:
    items = iter(items)
    while True:
        chunk = list(itertools.islice(items, size))
        if not chunk:
            return
        yield chunk


_worker_model: Optional[spm.SentencePieceProcessor] = None


def _load_worker_model(model_path: str) -> None:
    global _worker_model
    _worker_model = spm.SentencePieceProcessor(model_file=model_path)


def _encode_chunk(lines: List[str]) -> Tuple[List[str], Counter[str]]:
    pieces = _worker_model.encode(lines, out_type=str, num_threads=1)
    return [" ".join(p) for p in pieces], collections.Counter(itertools.chain.from_iterable(pieces))


def write_fairseq_dict(
    model: spm.SentencePieceProcessor, counts: Counter[str], path: PathLike
) -> int:
    """Write the fairseq ``dict.txt`` of a SentencePiece model (id mapping: see module doc).

    One line ``<piece> <count>`` per piece in SentencePiece id order, control and unknown
    symbols left out. Counts come from ``counts`` (0 for a piece that never occurs), so
    fairseq's frequency-weighted options see real frequencies.

    Returns:
        The number of pieces written.

    Raises:
        ValueError: if a piece cannot be a fairseq symbol: it is empty, contains whitespace,
            or is ``<mask>`` (which the masked-LM task adds itself).
    """
    written = 0
    with open(path, "w", encoding="utf-8") as f:
        for i in range(model.get_piece_size()):
            if model.is_control(i) or model.is_unknown(i):
                continue
            piece = model.id_to_piece(i)
            if piece == MASK_SYMBOL or piece.split() != [piece]:
                raise ValueError(
                    f"SentencePiece piece {i} {piece!r} cannot be a fairseq dictionary symbol "
                    f"(empty, with whitespace, or {MASK_SYMBOL})"
                )
            f.write(f"{piece} {counts[piece]}\n")
            written += 1
    return written


def count_unknown(model: spm.SentencePieceProcessor, counts: Counter[str]) -> int:
    """Number of tokens in ``counts`` (from :func:`encode_file`) that the model maps to unk."""
    unk = model.unk_id()
    return sum(n for piece, n in counts.items() if model.piece_to_id(piece) == unk)
