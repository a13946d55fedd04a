"""The contextual score of a checkpoint on a text corpus (paper §2.2 and appendix A.3, Table 9).

Sentences are encoded as the model saw text in pre-training (``<s>`` + SentencePiece pieces +
``</s>``), without any masking, and run through the model in batches of randomly drawn
sentences; the last-layer states of every token except ``<s>``/``</s>`` are paired with one
random other token of the same sentence and one random token of another sentence of the batch
(:func:`~taco_fairseq.diagnostics.sample_context_pairs`). Drawing the batches at random from the
whole sample of sentences makes "a token of another sentence of the batch" a uniform draw
from the corpus's other sentences, while keeping memory to one batch.
"""

from typing import Dict, Iterable, List, NamedTuple, Optional, Sequence

import torch
from torch import Tensor
from tqdm import tqdm

from ..diagnostics import (
    MEASURES,
    add_sums,
    pair_measure_sums,
    sample_context_pairs,
    summarize,
)


class EncodedSentences(NamedTuple):
    """Sentences as token ids.

    Attributes:
        tokens: one ``[length]`` int64 tensor per kept sentence (``<s>`` … ``</s>``).
        too_long: sentences dropped for exceeding the model's maximum positions.
        too_short: sentences dropped for having fewer than two pieces (no intra pair).
    """

    tokens: List[Tensor]
    too_long: int
    too_short: int


def encode_sentences(hub, sentences: Sequence[str]) -> EncodedSentences:
    """Encode sentences with a checkpoint's SentencePiece model and dictionary
    (``hub.encode``: ``<s>`` pieces ``</s>``).

    Sentences longer than the model's ``max_positions`` are dropped (counted), so are
    sentences of fewer than two pieces, which have no intra-context pair.
    """
    max_positions = hub.model.max_positions()
    kept, too_long, too_short = [], 0, 0
    for sentence in sentences:
        tokens = hub.encode(sentence)
        if len(tokens) > max_positions:
            too_long += 1
        elif len(tokens) < 4:
            too_short += 1
        else:
            kept.append(tokens)
    return EncodedSentences(kept, too_long, too_short)


def contextual_score(
    model,
    sentences: Sequence[Tensor],
    dictionary,
    batch_size: int = 64,
    seed: int = 1,
    measures: Sequence[str] = MEASURES,
    progress: Optional[str] = None,
) -> Dict[str, float]:
    """Intra- and inter-context statistics of a model's last-layer states over sentences.

    Args:
        model: a RoBERTa-style fairseq model (``model(tokens, features_only=True)`` returns
            ``[batch, seq_len, hidden]`` last-layer states); put in eval mode here.
        sentences: ``[length]`` int64 token ids, each ``<s>`` … ``</s>`` (e.g.
            :func:`encode_sentences`).
        dictionary: the model's dictionary (padding, ``<s>``, ``</s>``).
        batch_size: sentences per forward pass (>= 2); a token's inter-context partner is
            drawn from the other sentences of its batch.
        seed: seeds the order of the sentences and the pairs.
        measures: names of :data:`~taco_fairseq.diagnostics.MEASURES`.
        progress: the description of a tqdm progress bar over the batches (None: no bar).

    Returns:
        :func:`~taco_fairseq.diagnostics.summarize` of the summed measures: ``pairs`` and, per
        measure, ``_intra``, ``_inter``, ``_gap`` and ``_ratio`` (``cosine_gap`` is the
        contextual score), plus ``sentences``.

    Raises:
        ValueError: if ``batch_size < 2`` or there are fewer than two sentences.
    """
    if batch_size < 2:
        raise ValueError(f"batch size must be >= 2 (inter-context pairs), got {batch_size}")
    if len(sentences) < 2:
        raise ValueError(
            f"need at least two sentences of two or more pieces, got {len(sentences)}"
        )
    model.eval()
    device = next(model.parameters()).device
    order = torch.randperm(len(sentences), generator=torch.Generator().manual_seed(seed))
    generator = torch.Generator(device=device).manual_seed(seed)
    excluded = torch.tensor([dictionary.bos(), dictionary.eos(), dictionary.pad()], device=device)
    # a last batch of one sentence would have no inter-context pairs: merge it into the previous
    starts = list(range(0, len(sentences), batch_size))
    if len(sentences) - starts[-1] < 2:
        starts.pop()
    ends = starts[1:] + [len(sentences)]
    total = None
    with torch.no_grad():
        for start, end in tqdm(list(zip(starts, ends)), desc=progress, disable=progress is None):
            batch = [sentences[i] for i in order[start:end].tolist()]
            tokens = _pad(batch, dictionary.pad()).to(device)
            states, _ = model(tokens, features_only=True)
            valid = ~torch.isin(tokens, excluded)
            sums = pair_measure_sums(states, sample_context_pairs(valid, generator), measures)
            total = sums if total is None else add_sums(total, sums)
    row = summarize(total)
    row["sentences"] = len(sentences)
    return row


def _pad(sequences: List[Tensor], pad: int) -> Tensor:
    """``[batch, longest]`` right-padded."""
    return torch.nn.utils.rnn.pad_sequence(sequences, batch_first=True, padding_value=pad)



def score_checkpoints(
    checkpoints: Iterable,
    sentences: Sequence[str],
    batch_size: int = 64,
    seed: int = 1,
    progress: bool = False,
) -> List[Dict]:
    """:func:`contextual_score` of each checkpoint on the same sentences.

    Args:
        checkpoints: :class:`~.checkpoints.Checkpoint` objects (e.g. from
            :func:`~.checkpoints.iter_run_checkpoints`).
        sentences: raw text sentences (e.g. :func:`~.sentences.sample_sentences`), encoded
            once per data-bin and maximum length.
        batch_size, seed: as :func:`contextual_score`.
        progress: show a progress bar per checkpoint.

    Returns:
        One row per checkpoint: ``run``, ``checkpoint`` (path), ``updates``, then
        :func:`contextual_score`'s statistics and the sentences dropped as ``too_long`` and
        ``too_short``.
    """
    encoded = {}
    rows = []
    for checkpoint in checkpoints:
        hub = checkpoint.hub
        key = (hub.cfg.task.data, hub.model.max_positions())
        if key not in encoded:
            encoded[key] = encode_sentences(hub, sentences)
        kept = encoded[key]
        stats = contextual_score(
            hub.model, kept.tokens, hub.task.source_dictionary, batch_size, seed,
            progress=f"{checkpoint.run} @ {checkpoint.updates} updates" if progress else None,
        )
        rows.append({
            "run": checkpoint.run, "checkpoint": str(checkpoint.path),
            "updates": checkpoint.updates, **stats,
            "too_long": kept.too_long, "too_short": kept.too_short,
        })
    return rows
