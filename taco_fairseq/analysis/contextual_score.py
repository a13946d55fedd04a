"""The contextual score of a checkpoint on a text corpus (paper §2.2 and appendix A.3, Table 9).

Sentences are encoded as the model saw text in pre-training (``<s>`` + SentencePiece pieces +
``</s>``), without any masking, and run through the model in batches of randomly drawn
sentences; the last-layer states of every token except ``<s>``/``</s>`` are paired with one
random other token of the same sentence and one random token of another sentence of the batch
(:func:`~taco_fairseq.diagnostics.sample_context_pairs`). Drawing the batches at random from the
whole sample of sentences makes "a token of another sentence of the batch" a uniform draw
from the corpus's other sentences, while keeping memory to one batch.

Besides the cosine of the online diagnostics (:mod:`taco_fairseq.diagnostics`), appendix
Table 9 gives, for the dot product and the L1, L2 and L10 distances, the ratio of the
intra-context mean over the inter-context mean: :data:`MEASURES`.
"""

import functools
from typing import Dict, Iterable, List, NamedTuple, Optional, Sequence

import torch
from torch import Tensor
from tqdm import tqdm

from ..diagnostics import ContextPairs, cosine, pair_sums, sample_context_pairs
from .batching import pad


def _dot(flat: Tensor, index: Tensor) -> Tensor:
    return (flat * flat[index]).sum(-1)


def _distance(flat: Tensor, index: Tensor, order: float) -> Tensor:
    # in float64: |x|^10 overflows float32 for large states
    difference = flat.double() - flat[index].double()
    return torch.linalg.vector_norm(difference, ord=order, dim=-1)


_MEASURE_FUNCTIONS = {
    "cosine": cosine, "dot": _dot,
    **{f"l{p}": functools.partial(_distance, order=float(p)) for p in (1, 2, 10)},
}
#: Measures of a pair of vectors (a, b): similarities (higher = closer) and distances.
MEASURES = tuple(_MEASURE_FUNCTIONS)


class PairSums(NamedTuple):
    """Sums of pair measures over the anchors of one or more batches (summable).

    Attributes:
        count: number of anchors (pairs of each kind).
        intra: measure name -> sum over anchors of measure(h_anchor, h_intra).
        inter: measure name -> sum over anchors of measure(h_anchor, h_inter).
    """

    count: Tensor
    intra: Dict[str, Tensor]
    inter: Dict[str, Tensor]


def pair_measure_sums(
    states: Tensor, pairs: ContextPairs, measures: Sequence[str] = ("cosine",)
) -> PairSums:
    """Sum each measure over the anchors' intra- and inter-context pairs
    (:func:`taco_fairseq.diagnostics.pair_sums`).

    Measures of vectors a, b: ``cosine`` (:func:`taco_fairseq.diagnostics.cosine`), ``dot`` =
    a·b, ``l1``/``l2``/``l10`` = ‖a − b‖_p for p = 1, 2, 10. Cosine and dot product in
    float32, the distances in float64.

    Args:
        states: ``[batch, seq_len, hidden]`` representations (e.g. last-layer states).
        pairs: from :func:`~taco_fairseq.diagnostics.sample_context_pairs` on the same
            ``[batch, seq_len]``.
        measures: names from :data:`MEASURES`.

    Returns:
        :class:`PairSums`: float64 sums (``count`` int64), no gradient.

    Raises:
        ValueError: for an unknown measure or mismatched shapes.
    """
    unknown = [m for m in measures if m not in MEASURES]
    if unknown:
        raise ValueError(f"unknown measures {unknown}; choose from {MEASURES}")
    count, intra, inter = pairs.anchor.sum(), {}, {}
    for m in measures:
        count, intra[m], inter[m] = pair_sums(states, pairs, _MEASURE_FUNCTIONS[m])
    return PairSums(count, intra, inter)


def summarize(sums: PairSums) -> Dict[str, float]:
    """Means, gaps and ratios of summed pair measures (§2.2, appendix Table 9): for every
    measure m, ``{m}_intra`` and ``{m}_inter`` (means over anchors), ``{m}_gap`` = intra −
    inter (for ``cosine``: the contextual score) and ``{m}_ratio`` = intra / inter; ``pairs``
    is the number of anchors.

    Raises:
        ValueError: if there are no pairs (no two contexts with two or more tokens).
    """
    count = int(sums.count)
    if count == 0:
        raise ValueError(
            "no intra/inter-context pairs: need at least two contexts with two or more tokens"
        )
    row = {"pairs": count}
    for measure, intra_sum in sums.intra.items():
        intra = float(intra_sum) / count
        inter = float(sums.inter[measure]) / count
        row[f"{measure}_intra"] = intra
        row[f"{measure}_inter"] = inter
        row[f"{measure}_gap"] = intra - inter
        row[f"{measure}_ratio"] = intra / inter if inter != 0 else float("nan")
    return row


def add_sums(a: PairSums, b: PairSums) -> PairSums:
    """The elementwise sum of two :class:`PairSums` with the same measures."""
    return PairSums(
        a.count + b.count,
        {m: a.intra[m] + b.intra[m] for m in a.intra},
        {m: a.inter[m] + b.inter[m] for m in a.inter},
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
        measures: names of :data:`MEASURES`.
        progress: the description of a tqdm progress bar over the batches (None: no bar).

    Returns:
        :func:`summarize` of the summed measures: ``pairs`` and, per
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
            tokens = pad(batch, dictionary.pad()).to(device)
            states, _ = model(tokens, features_only=True)
            valid = ~torch.isin(tokens, excluded)
            sums = pair_measure_sums(states, sample_context_pairs(valid, generator), measures)
            total = sums if total is None else add_sums(total, sums)
    row = summarize(total)
    row["sentences"] = len(sentences)
    return row


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
