"""Check that an exported transformers model and tokenizer reproduce fairseq exactly.

Two checks, both on real text (:mod:`taco_fairseq.hf_export.check_text`):

* **token ids**: the transformers tokenizer gives the ids of fairseq's pipeline
  (:func:`fairseq_token_ids`) on every line, sentence and pair, and the same truncated ids;
* **outputs**: in fp32 and eval mode, transformers' logits (masked LM: ``[batch, tokens,
  vocab]``; classification: ``[batch, labels]``) equal fairseq's within ``atol`` at every
  non-padding position.

Any difference raises :class:`ParityError` naming the sentence, the position and the largest
difference.
"""

from dataclasses import asdict, dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from .check_text import MASK, CheckText

#: The largest absolute logit difference the export accepts (fp32).
DEFAULT_ATOL = 1e-4


class ParityError(RuntimeError):
    """The exported model or tokenizer differs from fairseq (the message says where)."""


@dataclass
class ParityReport:
    """What :func:`check_parity` compared.

    Attributes:
        tokenized_texts: lines, sentences and pairs whose token ids were compared.
        tokenized_ids: token ids compared.
        model_inputs: sequences run through both models.
        compared_logits: logits compared (positions × vocabulary, or × labels).
        max_abs_diff: the largest absolute logit difference.
        worst_text: the input with that difference.
        atol: the tolerance.
    """

    tokenized_texts: int
    tokenized_ids: int
    model_inputs: int
    compared_logits: int
    max_abs_diff: float
    worst_text: str
    atol: float

    def as_dict(self) -> Dict:
        return asdict(self)


def fairseq_token_ids(hub, text: str, pair: Optional[str] = None) -> List[int]:
    """fairseq's token ids of a text (or pair), with ``<s>``/``</s>``; a text with ``<mask>``
    is encoded as ``RobertaHubInterface.fill_mask`` encodes it (each span between masks on its
    own, right-stripped), any other as ``RobertaHubInterface.encode``.

    Args:
        hub: a ``RobertaHubInterface`` (:func:`taco_fairseq.hub.from_pretrained`).
    """

    def pieces(segment: str) -> str:
        if MASK not in segment:
            return hub.bpe.encode(segment)
        spans = [hub.bpe.encode(span.rstrip()) for span in segment.split(MASK)]
        return f" {MASK} ".join(spans).strip()

    line = f"<s> {pieces(text)} </s>"
    if pair is not None:
        line += f" </s> {pieces(pair)} </s>"
    tokens = hub.task.source_dictionary.encode_line(
        line, append_eos=False, add_if_not_exist=False
    )
    return tokens.tolist()


def check_token_ids(hub, tokenizer, check: CheckText) -> Tuple[int, int]:
    """Compare the tokenizer's ids with :func:`fairseq_token_ids` on every line, sentence and
    pair of ``check`` (untruncated).

    Returns:
        (texts compared, ids compared).

    Raises:
        ParityError: at the first text whose ids differ (text, position, both ids).
    """
    inputs = [(t, None) for t in check.lines + check.sentences] + list(check.pairs)
    compared = 0
    for text, pair in inputs:
        expected = fairseq_token_ids(hub, text, pair)
        got = tokenizer(text, pair, verbose=False)["input_ids"]
        if got != expected:
            position = next(
                (i for i, (a, b) in enumerate(zip(got, expected)) if a != b),
                min(len(got), len(expected)),
            )
            raise ParityError(
                f"token ids differ at position {position} (transformers "
                f"{got[position:position + 5]}, fairseq {expected[position:position + 5]}) for "
                f"{_describe(text, pair)}"
            )
        compared += len(expected)
    return len(inputs), compared


def check_logits(
    hub,
    hf_model,
    tokenizer,
    inputs: Sequence[Tuple[str, Optional[str]]],
    *,
    classification_head: Optional[str] = None,
    atol: float = DEFAULT_ATOL,
    batch_size: int = 8,
) -> Tuple[int, float, str]:
    """Run ``inputs`` through both models (fp32, eval) and compare their logits.

    The transformers tokenizer truncates to ``tokenizer.model_max_length`` tokens; fairseq's
    ids are cut the same way (``<s>``, the first ``max_positions - 2`` tokens, ``</s>``), and
    the two must be equal.

    Args:
        hub: fairseq's ``RobertaHubInterface``.
        hf_model: the transformers model (``RobertaForMaskedLM`` or
            ``RobertaForSequenceClassification``).
        tokenizer: the transformers tokenizer.
        inputs: (text, pair or None).
        classification_head: compare this fairseq classification head (``[batch, labels]``)
            instead of the LM head (``[batch, tokens, vocab]``).
        atol: the largest allowed absolute difference.
        batch_size: sequences per forward pass (padded batches exercise attention masks).

    Returns:
        (logits compared, largest absolute difference, the input where it occurred).

    Raises:
        ParityError: if the truncated ids differ, or a difference exceeds ``atol`` (the
            message gives the difference, the input and the token position).
    """
    compared, worst, worst_text = 0, 0.0, ""
    for start in range(0, len(inputs), batch_size):
        batch = inputs[start:start + batch_size]
        encoded = tokenizer.pad(
            [tokenizer(text, pair, truncation=True) for text, pair in batch], return_tensors="pt"
        )
        tokens = _fairseq_batch(hub, batch, tokenizer.model_max_length)
        if not torch.equal(tokens, encoded["input_ids"]):
            row = int((tokens != encoded["input_ids"]).any(dim=1).nonzero()[0])
            raise ParityError(f"truncated token ids differ for {_describe(*batch[row])}")
        mask = encoded["attention_mask"].bool()
        with torch.no_grad():
            if classification_head is None:
                expected = hub.model(tokens)[0]
            else:
                expected = hub.model(
                    tokens, features_only=True, classification_head_name=classification_head
                )[0]
            got = hf_model(input_ids=tokens, attention_mask=encoded["attention_mask"]).logits
        diff = (got.double() - expected.double()).abs()
        if classification_head is None:
            diff = diff.masked_fill(~mask.unsqueeze(-1), 0.0)
            compared += int(mask.sum()) * diff.size(-1)
        else:
            compared += diff.numel()
        per_row = diff.flatten(1).max(dim=1).values
        row = int(per_row.argmax())
        if float(per_row[row]) > worst or not worst_text:
            worst, worst_text = float(per_row[row]), _describe(*batch[row])
        if worst > atol:
            where = ""
            if classification_head is None:
                position = int(diff[row].max(dim=-1).values.argmax())
                where = f" at token {position}"
            raise ParityError(
                f"transformers' logits differ from fairseq's by {worst:.3g} (> {atol:g})"
                f"{where} for {worst_text}"
            )
    return compared, worst, worst_text


def check_parity(
    hub,
    hf_model,
    tokenizer,
    check: CheckText,
    *,
    classification_head: Optional[str] = None,
    atol: float = DEFAULT_ATOL,
) -> ParityReport:
    """Both checks of the module doc: token ids on all of ``check``, then logits on its
    sentences and pairs.

    Raises:
        ParityError: from :func:`check_token_ids` or :func:`check_logits`.
    """
    texts, ids = check_token_ids(hub, tokenizer, check)
    singles = [(t, None) for t in check.sentences]
    pairs = list(check.pairs)
    compared, worst, worst_text = 0, 0.0, ""
    for inputs in (singles, pairs):
        if not inputs:
            continue
        n, diff, text = check_logits(
            hub, hf_model, tokenizer, inputs, classification_head=classification_head, atol=atol
        )
        compared += n
        if diff >= worst:
            worst, worst_text = diff, text
    return ParityReport(
        tokenized_texts=texts, tokenized_ids=ids, model_inputs=len(singles) + len(pairs),
        compared_logits=compared, max_abs_diff=worst, worst_text=worst_text, atol=atol,
    )


def _fairseq_batch(hub, batch, max_positions: int) -> torch.Tensor:
    """fairseq's ids of ``batch``, cut to ``max_positions`` tokens, right-padded:
    ``[batch, longest]``."""
    dictionary = hub.task.source_dictionary
    rows = []
    for text, pair in batch:
        ids = fairseq_token_ids(hub, text, pair)
        if len(ids) > max_positions:
            ids = ids[: max_positions - 1] + [dictionary.eos()]
        rows.append(ids)
    tokens = torch.full((len(rows), max(map(len, rows))), dictionary.pad(), dtype=torch.long)
    for i, ids in enumerate(rows):
        tokens[i, : len(ids)] = torch.tensor(ids)
    return tokens


def _describe(text: str, pair: Optional[str] = None) -> str:
    shown = repr(text if len(text) <= 200 else text[:200] + "...")
    if pair is not None:
        shown += " + " + repr(pair if len(pair) <= 200 else pair[:200] + "...")
    return f"the text {shown}"
