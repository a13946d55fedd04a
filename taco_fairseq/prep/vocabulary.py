"""SentencePiece for fairseq: train a model, write its ``dict.txt``, encode text with a pair of them.

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

Any other ``dict.txt`` of a model, such as the frequency-ordered one ``fairseq-preprocess
--only-source`` builds from ``spm_encode``'s output, maps pieces to its ids by their text;
:class:`DictionaryEncoder` gives the ids of text for either kind, the one implementation every
command that tokenizes for a data-bin uses.
"""

import io
import itertools
import logging
import random
import re
import threading
import time
from pathlib import Path
from typing import Callable, Iterator, List, Optional, Sequence, TypeVar, Union

import numpy as np
import sentencepiece as spm
from fairseq.data import Dictionary
from tqdm import tqdm

logger = logging.getLogger(__name__)

PathLike = Union[str, Path]

#: The symbols fairseq's Dictionary puts at ids 0..3, as SentencePiece trains them here.
SPECIAL_PIECES = ("<s>", "<pad>", "</s>", "<unk>")
#: Added by fairseq's masked_lm task after the dictionary; must not be a piece.
MASK_SYMBOL = "<mask>"
MODEL_TYPES = ("unigram", "bpe")
#: :class:`DictionaryEncoder` refuses a ``dict.txt`` holding fewer than this share of the
#: model's pieces: one made from text the model encoded holds nearly all of them (1,993 of the
#: 1,997 in ``tests/test_fairseq_databin.py``: pieces that no segmentation used are missing).
MIN_SHARED_PIECES = 0.5
#: SentencePiece's ``max_sentence_length`` (its default): training skips longer lines (bytes).
MAX_SENTENCE_BYTES = 4192
#: SentencePiece's trainer threads by default (``num_threads``, SentencePiece's own default).
#: The model depends on the thread count, so it is a fixed number rather than the machine's
#: CPU count: the same command gives the same model on every machine.
TRAINER_THREADS = 16
#: The most trainer threads SentencePiece accepts (``trainer_interface.cc``, as of 0.2.3).
MAX_TRAINER_THREADS = 1024

_TOO_LARGE = re.compile(r"Vocabulary size too high \((\d+)\)\. Please set it to a value <= (\d+)")
_TOO_SMALL = re.compile(r"Vocabulary size is smaller than required_chars\. (\d+) vs (\d+)")


def check_trainer_threads(num_threads: int) -> None:
    """Raise ValueError naming ``--num-threads`` unless ``num_threads`` is in
    1..:data:`MAX_TRAINER_THREADS`, SentencePiece's range (it fails with an internal error
    otherwise)."""
    if not 1 <= num_threads <= MAX_TRAINER_THREADS:
        raise ValueError(f"--num-threads must be in 1..{MAX_TRAINER_THREADS} (SentencePiece's "
                         f"limit on trainer threads), got {num_threads}")


def train_sentencepiece(
    text_path: Union[PathLike, Sequence[PathLike]],
    model_path: PathLike,
    *,
    vocab_size: int,
    model_type: str = "unigram",
    character_coverage: float = 0.9995,
    max_sentences: int = 1_000_000,
    seed: int = 1,
    num_threads: int = TRAINER_THREADS,
    source: Optional[str] = None,
) -> spm.SentencePieceProcessor:
    """Train a SentencePiece model on the non-empty lines of text files and save it.

    Deterministic: the same file and arguments give the same model bytes, on any machine
    (``num_threads`` included: another thread count gives a slightly different model, which is
    why it defaults to the fixed :data:`TRAINER_THREADS`, not the CPU count). When the file has
    more than ``max_sentences`` non-empty lines, a uniform sample of that many lines, drawn
    with ``random.Random(seed)``, is used (SentencePiece's own ``input_sentence_size``
    sampling differs from run to run even with ``set_random_generator_seed``, as of 0.2.3).
    Lines longer than SentencePiece's ``max_sentence_length`` (:data:`MAX_SENTENCE_BYTES`) are
    skipped by it (counted in the log line). The trainer runs in a thread of its own, so that a
    Ctrl-C ends the call at once (:func:`interruptible`).

    Args:
        text_path: UTF-8 text, one sentence or paragraph per line; or several such files,
            read as one (e.g. the shards of a training split).
        model_path: where to write the model (e.g. ``sentencepiece.bpe.model``).
        vocab_size: pieces in the model, including ``<s> <pad> </s> <unk>`` (ids 0..3).
        model_type: ``"unigram"`` or ``"bpe"``.
        character_coverage: fraction of characters the model covers; rarer characters
            become ``<unk>``.
        max_sentences: at most this many lines are used, which bounds the trainer's memory.
        seed: seed of the line sample.
        num_threads: trainer threads, 1..:data:`MAX_TRAINER_THREADS` (changes the model, see
            above; more threads than CPUs cost no time, docs/performance.md).
        source: what the text was made of, for messages (default: ``text_path``).

    Returns:
        The trained model.

    Raises:
        ValueError: if ``num_threads`` is not in 1..:data:`MAX_TRAINER_THREADS` (checked
            before any work; the message names ``--num-threads``); if ``vocab_size`` does not
            fit the text (too large for its pieces, or smaller than the characters it must
            cover); the message names ``--vocab-size`` and the limit; if no line is short
            enough for SentencePiece (e.g. a text without line breaks), naming ``source``
            and the fix.
    """
    check_trainer_threads(num_threads)
    paths = [text_path] if isinstance(text_path, (str, Path)) else list(text_path)
    total = too_long = longest = 0
    for line in _non_empty_lines(paths):
        size = len(line.encode("utf-8"))
        total += 1
        too_long += size > MAX_SENTENCE_BYTES
        longest = max(longest, size)
    if total and too_long == total:  # SentencePiece: "INTERNAL ... !sentences_.empty()"
        raise ValueError(
            f"{source or ' '.join(map(str, paths))}: every line of the training text is longer "
            f"than the {MAX_SENTENCE_BYTES} bytes SentencePiece trains on (the longest has "
            f"{longest:,} bytes), so it has nothing to learn from. Break the text into lines: a "
            "sentence or paragraph per line (the lines of a file stay one document)."
        )
    sample = min(total, max_sentences)
    logger.info(
        "training a %s SentencePiece model of %d pieces on %d of %d lines of %s (%d lines "
        "longer than %d bytes are skipped by SentencePiece; it reports no progress after "
        "reading them)",
        model_type,
        vocab_size,
        sample,
        total,
        " ".join(map(str, paths)),
        too_long,
        MAX_SENTENCE_BYTES,
    )
    model = io.BytesIO()
    start = time.perf_counter()
    try:
        interruptible(lambda: spm.SentencePieceTrainer.train(
            sentence_iterator=iter(tqdm(
                _sample_lines(paths, total, max_sentences, seed),
                total=sample,
                unit=" lines",
                desc="SentencePiece: loading the sample",
            )),
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
        ))
    except RuntimeError as e:
        message = _vocab_size_message(str(e))
        if message is None:
            raise
        raise ValueError(message) from e
    logger.info("trained the SentencePiece model in %.1f s", time.perf_counter() - start)
    Path(model_path).write_bytes(model.getvalue())
    return spm.SentencePieceProcessor(model_proto=model.getvalue())


_T = TypeVar("_T")


def interruptible(work: Callable[[], _T]) -> _T:
    """``work()``, run in a daemon thread while this thread waits for it.

    Long native code that releases the GIL (SentencePiece training: minutes on a large
    corpus) keeps Python's signal handlers from running in the thread that called it, so a
    Ctrl-C would wait for its end; here the waiting thread takes the KeyboardInterrupt at once,
    and ``work`` goes on in the background until the process ends. End the process with
    ``os._exit`` then (as ``taco-prepare-data`` does): the interpreter's shutdown stops a
    thread that calls back into Python from C++ (SentencePiece reading its sentences or
    writing the model) with "terminate called without an active exception" (SIGABRT).

    Raises:
        what ``work`` raises; KeyboardInterrupt.
    """
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["result"] = work()
        except BaseException as e:  # noqa: B036 - handed to the waiting thread
            outcome["error"] = e

    thread = threading.Thread(target=run, name="interruptible", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(0.1)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


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


def _non_empty_lines(paths: Sequence[PathLike]) -> Iterator[str]:
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.rstrip("\n")
                if line:
                    yield line


def _sample_lines(paths: Sequence[PathLike], total: int, size: int, seed: int) -> Iterator[str]:
    """The non-empty lines of ``paths`` if ``total <= size``, else ``size`` of them, in order."""
    lines = _non_empty_lines(paths)
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



class DictionaryEncoder:
    """Text → the ids of a fairseq ``dict.txt`` through a SentencePiece model: the ids that
    ``spm_encode`` (``encode(out_type=str)``) followed by ``fairseq-preprocess --only-source
    --srcdict dict.txt`` give, and fairseq's ``RobertaHubInterface.encode`` with ``--bpe
    sentencepiece`` (without its ``<s>``/``</s>``): each piece's text is looked up in the
    dictionary, a missing one is ``<unk>``, fairseq splits the pieces at whitespace.

    Two routes to those ids, chosen once from the pair:

    * **fast** (:attr:`identity`): ``dict.txt`` lists the model's pieces in SentencePiece id
      order (:func:`write_fairseq_dict`, the data-bins of ``taco-prepare-data``), so fairseq
      id = SentencePiece id and the ids are used as they are.
    * **lookup**: any other ``dict.txt``, e.g. the frequency-ordered one ``fairseq-preprocess
      --only-source`` builds from ``spm_encode``'s output (its own order, and symbols such as
      the characters SentencePiece does not know, which ``spm_encode`` writes as they are).
      :attr:`lookup` maps SentencePiece ids to fairseq ids. Only two kinds of SentencePiece id
      have a fairseq id that depends on the text they cover: the unknown id (its text is the
      unknown characters themselves, which ``dict.txt`` may list) and pieces fairseq would
      split (empty, or holding whitespace). A line holding such an id is encoded by fairseq's
      ``Dictionary.encode_line`` from its pieces joined by spaces (SentencePiece gives their
      text, ``encode(out_type=str)``); all other lines through the array.

    Args:
        model: the SentencePiece model.
        dictionary: the fairseq ``Dictionary`` of ``dict.txt`` (as loaded, without ``<mask>``).
        names: the two files, for messages (e.g. ``"data-bin/dict.txt and its model"``).

    Attributes:
        identity: the fast route applies.
        lookup: int64 array ``[model pieces]``, SentencePiece id → fairseq id.
        missing_pieces: pieces of the model (not control or unknown) that are not symbols of
            the dictionary (they become ``<unk>``).
        extra_symbols: symbols of the dictionary after its four specials that are no piece of
            the model (unknown characters, fairseq's ``madeupword`` padding, ...).

    Raises:
        ValueError: fewer than :data:`MIN_SHARED_PIECES` of the model's pieces are symbols of
            the dictionary (the message names ``names`` and both counts).
    """

    def __init__(self, model: spm.SentencePieceProcessor, dictionary: Dictionary, names: str):
        self.model = model
        self.dictionary = dictionary
        size = model.get_piece_size()
        pieces = [model.id_to_piece(i) for i in range(size)]
        unk = dictionary.unk()
        self.lookup = np.array([dictionary.indices.get(p, unk) for p in pieces], dtype=np.int64)
        self.identity = (
            len(dictionary) == size
            and pieces == dictionary.symbols
            and model.unk_id() == unk
        )
        self._text_dependent = np.array(
            [model.is_unknown(i) or p.split() != [p] for i, p in enumerate(pieces)], dtype=bool
        )
        normal = [i for i in range(size) if not (model.is_control(i) or model.is_unknown(i))]
        self.missing_pieces = sum(int(self.lookup[i] == unk) for i in normal)
        self.extra_symbols = len(set(dictionary.symbols[dictionary.nspecial:]) - set(pieces))
        shared = len(normal) - self.missing_pieces
        if shared < MIN_SHARED_PIECES * len(normal):
            raise ValueError(
                f"{names} do not belong together: only {shared} of the model's {len(normal)} "
                f"pieces are dict.txt symbols (a dict.txt made from text this model encoded "
                f"holds nearly all of them); use the dict.txt made with this model"
            )
        if not self.identity:
            logger.info(
                "%s: dict.txt is not in SentencePiece id order (e.g. made by fairseq-preprocess): "
                "pieces are looked up in it, as fairseq-preprocess --srcdict does; %d of the "
                "model's %d pieces are not in it (they become <unk>), %d of its %d symbols are "
                "no piece", names, self.missing_pieces, len(normal), self.extra_symbols,
                len(dictionary) - dictionary.nspecial,
            )

    def encode(self, lines: Sequence[str], num_threads: int = 1) -> List[np.ndarray]:
        """The fairseq ids of each line (int64 arrays ``[pieces]``, no ``</s>``).

        Args:
            lines: text, one entry per line (SentencePiece encodes each as a whole).
            num_threads: SentencePiece's encoding threads.
        """
        lines = list(lines)
        ids = self.model.encode(lines, out_type=int, num_threads=num_threads)
        if self.identity or not ids:
            return [np.asarray(i, dtype=np.int64) for i in ids]
        ends = np.cumsum(np.fromiter(map(len, ids), dtype=np.int64, count=len(ids)))
        flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int64, count=ends[-1])
        encoded = np.split(self.lookup[flat], ends[:-1])
        text_lines = np.unique(np.searchsorted(
            ends, np.flatnonzero(self._text_dependent[flat]), side="right"))
        if len(text_lines):
            pieces = self.model.encode([lines[i] for i in text_lines], out_type=str,
                                       num_threads=num_threads)
            for i, line_pieces in zip(text_lines, pieces):
                encoded[i] = self.dictionary.encode_line(
                    " ".join(line_pieces), add_if_not_exist=False, append_eos=False
                ).numpy().astype(np.int64)
        return encoded
