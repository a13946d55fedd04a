"""The transformers tokenizer of a fairseq SentencePiece data-bin, with fairseq's exact ids.

fairseq's pipeline (``RobertaHubInterface.encode``, and the ids ``taco-prepare-data``
writes) is: SentencePiece pieces of the text → each piece
looked up in the fairseq ``Dictionary`` (``<s>=0 <pad>=1 </s>=2 <unk>=3``, then ``dict.txt`` in
file order, then ``<mask>`` added by the task; a piece not in it is ``<unk>``) → ``<s> ... </s>``
(pairs: ``<s> a </s> </s> b </s>``).

transformers' ``BartphoTokenizer`` is exactly this pipeline (a SentencePiece model plus a
fairseq ``dict.txt``, with RoBERTa's special tokens and templates; its name comes from the first
model that used it) and runs the ``sentencepiece`` library itself, so its pieces are
SentencePiece's, bit for bit. A ``tokenizers`` (fast) conversion of a unigram model is not:
SentencePiece sums piece scores in float32, so near-ties (``"00"+"0"`` vs ``"0"+"00"`` in
"7000") go either way depending on the rest of the line, whereas ``tokenizers`` sums in float64:
194 of the 321,012 lines of Wikipedia ``AB.txt.xz`` got other ids (2,000-piece model), against
2 (both with U+0085, see below) with this tokenizer.

One difference remains, in fairseq: it splits the pieces on Python whitespace, so a piece made
only of U+0085 (NEXT LINE, which SentencePiece's NFKC rules keep as an unknown character)
disappears there and is ``<unk>`` here. ``taco-prepare-data`` turns U+0085 into
a space before training, so the model never saw it either way.
"""

from pathlib import Path
from typing import Union

from fairseq.data import Dictionary
from transformers import BartphoTokenizer

PathLike = Union[str, Path]

#: fairseq's first symbols, which the tokenizer puts at the same ids.
FAIRSEQ_SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")
MASK = "<mask>"


def write_tokenizer_dict(dictionary: Dictionary, path: PathLike) -> None:
    """Write the symbols after fairseq's four specials as ``dict.txt`` (``symbol count``
    lines), leaving out a final ``<mask>`` (the tokenizer appends it, as the fairseq task does).

    Raises:
        ValueError: if the dictionary does not start with ``<s> <pad> </s> <unk>`` or a
            symbol contains whitespace (a ``dict.txt`` line could not hold it).
    """
    if tuple(dictionary.symbols[: len(FAIRSEQ_SPECIALS)]) != FAIRSEQ_SPECIALS:
        raise ValueError(
            f"the fairseq dictionary starts with {dictionary.symbols[:4]}, expected "
            f"{list(FAIRSEQ_SPECIALS)} (fairseq's default Dictionary)"
        )
    symbols = dictionary.symbols[len(FAIRSEQ_SPECIALS):]
    counts = dictionary.count[len(FAIRSEQ_SPECIALS):]
    if symbols and symbols[-1] == MASK:
        symbols, counts = symbols[:-1], counts[:-1]
    with open(path, "w", encoding="utf-8") as f:
        for symbol, count in zip(symbols, counts):
            if symbol.split() != [symbol]:
                raise ValueError(
                    f"fairseq dictionary symbol {symbol!r} is empty or contains whitespace"
                )
            f.write(f"{symbol} {count}\n")


def build_tokenizer(
    dictionary: Dictionary,
    sentencepiece_model: PathLike,
    workdir: PathLike,
    *,
    max_positions: int,
) -> BartphoTokenizer:
    """The transformers tokenizer giving fairseq's ids for ``dictionary`` and a SentencePiece
    model (see the module doc); ``save_pretrained`` writes it for ``AutoTokenizer``.

    Args:
        dictionary: the model's fairseq dictionary, ``<mask>`` included.
        sentencepiece_model: the data-bin's ``sentencepiece.bpe.model``.
        workdir: a directory for the tokenizer's ``dict.txt``.
        max_positions: the model's longest input in tokens, ``<s>`` and ``</s>`` included
            (``model_max_length``, used by ``truncation=True``).

    Raises:
        ValueError: from :func:`write_tokenizer_dict`, or if the tokenizer's vocabulary is not
            the dictionary symbol for symbol (the message names the first differing id).
    """
    dict_path = Path(workdir) / "dict.txt"
    write_tokenizer_dict(dictionary, dict_path)
    tokenizer = BartphoTokenizer(
        vocab_file=str(sentencepiece_model),
        monolingual_vocab_file=str(dict_path),
        model_max_length=max_positions,
    )
    vocabulary = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    if vocabulary != dictionary.symbols:
        first = next(
            (i for i, (a, b) in enumerate(zip(vocabulary, dictionary.symbols)) if a != b),
            min(len(vocabulary), len(dictionary)),
        )
        raise ValueError(
            f"the tokenizer's vocabulary ({len(vocabulary)} tokens) differs from the fairseq "
            f"dictionary ({len(dictionary)} symbols) at id {first}"
        )
    return tokenizer
