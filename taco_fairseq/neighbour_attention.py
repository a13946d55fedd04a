"""Neighbour attention: the share of its attention a piece puts on the tokens next to it, the
sign that a model has left the bag-of-words plateau of early masked-LM training.

Early in pre-training a small masked LM predicts each masked token from the bag of words of its
block: its attention is about uniform over the positions, its loss stalls (about 9 bits per
masked token on this project's Wikipedia data-bin), and it has not learnt word order. The runs
that leave this plateau do so when the first layer's heads learn to look at the neighbouring
tokens (docs/results.md, the part-of-speech study): the first layer's *neighbour share*, the
attention weight of a piece ``i`` on positions ``i − 1`` and ``i + 1`` averaged over heads and
pieces, jumps from about its uniform value to several times it.

Here: the per-head weights of fairseq's ``MultiheadAttention`` (:func:`head_weights`), the
neighbour share of a batch as sums (:func:`neighbour_sums`, shared by the probes'
:func:`taco_fairseq.glue.probes.neighbour_attention` and the criteria), its online logging at
validation by the ``mlm`` and ``taco`` criteria (:class:`NeighbourShareLogger`: metrics
``neighbour_share`` and ``neighbour_share_uniform``) and the one log line of ``fairseq-train``
at the first validation where a run leaves the plateau (:func:`report_plateau_exit`).
"""

import logging
from dataclasses import dataclass, field
from typing import Dict, NamedTuple, Optional

import torch
from fairseq.dataclass import FairseqDataclass
from fairseq.logging import metrics
from torch import Tensor

logger = logging.getLogger(__name__)

#: A run has left the plateau once the first layer's neighbour share on the validation blocks
#: is at least this many times its uniform value. On the plateau the share stays at or below
#: uniform (0.94–1.0× in the part-of-speech study's plateau runs, 0.98× in issue 42's pilot);
#: the runs that left it went to 1.7× (a run just leaving) and then 6–10×.
EXIT_RATIO = 1.5
#: Keys of the (summable) logging outputs: the pieces' summed share, uniform share, count.
SHARE_KEY = "neighbour_share_sum"
UNIFORM_KEY = "neighbour_share_uniform_sum"
PIECES_KEY = "neighbour_share_pieces"
#: The task-state entry (saved with every checkpoint) that remembers the last validation.
STATE_KEY = "neighbour_share_validation"


@dataclass
class NeighbourShareConfig(FairseqDataclass):
    """Criterion option of the validation metric ``neighbour_share``."""

    no_neighbour_share: bool = field(default=False, metadata={
        "help": "do not log the first layer's attention share on the neighbouring tokens at "
        "validation (neighbour_share, neighbour_share_uniform) nor the line saying when the "
        "run leaves the bag-of-words plateau"})


def head_weights(attention, query: Tensor, padding: Optional[Tensor]) -> Tensor:
    """Per-head attention weights of fairseq's ``MultiheadAttention`` (self-attention, no
    attention mask, no bias_k/v); fairseq returns them only averaged over heads.

    Args:
        attention: the layer's ``self_attn``.
        query: its input ``[length, batch, hidden]``.
        padding: ``[batch, length]``, True at padding, or None.

    Returns:
        ``[batch, heads, length, length]`` float32, ``softmax(q kᵀ / √d)`` (Vaswani et al.
        2017, eq. 1).
    """
    length, batch, _ = query.shape
    heads, d = attention.num_heads, attention.head_dim
    q = (attention.q_proj(query) * attention.scaling).view(length, batch, heads, d)
    k = attention.k_proj(query).view(length, batch, heads, d)
    scores = torch.einsum("ibhd,jbhd->bhij", q, k).float()
    if padding is not None:
        scores = scores.masked_fill(padding[:, None, None, :].bool(), float("-inf"))
    return scores.softmax(-1)


class NeighbourSums(NamedTuple):
    """Sums over the pieces of a batch (float64 scalars): ``share`` (a piece's weight on its
    neighbours, mean over heads), ``uniform`` (what uniform attention over the row's ``n``
    non-padding positions gives: neighbours / n, 2/n inside the row) and ``pieces``."""

    share: Tensor
    uniform: Tensor
    pieces: Tensor


def neighbour_sums(weights: Tensor, pieces: Tensor, padding: Optional[Tensor]) -> NeighbourSums:
    """The neighbour share of a batch, as sums over its pieces.

    Args:
        weights: ``[batch, heads, length, length]`` attention weights (:func:`head_weights`).
        pieces: ``[batch, length]`` bool, the positions measured (not ``<s>``, ``</s>``,
            padding).
        padding: ``[batch, length]``, True at padding, or None.

    Returns:
        :class:`NeighbourSums`; a piece at the end of its row has one neighbour, counted so in
        its uniform value.
    """
    share = weights.new_zeros(weights.shape[:3])  # [batch, heads, length]
    share[..., 1:] += weights.diagonal(-1, -2, -1)  # weight of i on i - 1
    share[..., :-1] += weights.diagonal(1, -2, -1)  # weight of i on i + 1
    real = (torch.ones_like(pieces) if padding is None else ~padding.bool()).double()
    neighbours = torch.zeros_like(real)
    neighbours[:, 1:] += real[:, :-1]
    neighbours[:, :-1] += real[:, 1:]
    uniform = neighbours / real.sum(1, keepdim=True).clamp(min=1)
    pieces = pieces.bool()
    return NeighbourSums(share.mean(1)[pieces].double().sum(), uniform[pieces].sum(),
                         pieces.sum().double())


class NeighbourShareLogger:
    """The first layer's neighbour share of the validation batches, in a criterion's logging
    outputs (nothing in training, nothing with ``--no-neighbour-share``). It recomputes the
    first layer's weights from the encoder's ``inner_states[0]`` (the layer's input):
    one extra projection of queries and keys per validation batch."""

    def __init__(self, cfg: NeighbourShareConfig, dictionary):
        self.enabled = not getattr(cfg, "no_neighbour_share", False)
        self.special = torch.tensor([dictionary.bos(), dictionary.eos(), dictionary.pad()])
        self.pad = dictionary.pad()

    def logging_output(self, model, tokens: Tensor, inner_states) -> Dict[str, Tensor]:
        """The summable :data:`SHARE_KEY`, :data:`UNIFORM_KEY` and :data:`PIECES_KEY` of a
        validation batch (``tokens`` ``[batch, length]``, the model input); ``{}`` in training
        or when disabled."""
        if not self.enabled or model.training:
            return {}
        layer = model.encoder.sentence_encoder.layers[0]
        with torch.no_grad():
            query = inner_states[0]  # [length, batch, hidden]
            if getattr(layer, "normalize_before", False):
                query = layer.self_attn_layer_norm(query)
            padding = tokens.eq(self.pad)
            padding = padding if padding.any() else None
            weights = head_weights(layer.self_attn, query, padding)
            pieces = ~torch.isin(tokens, self.special.to(tokens.device))
            sums = neighbour_sums(weights, pieces, padding)
        return {SHARE_KEY: sums.share, UNIFORM_KEY: sums.uniform, PIECES_KEY: sums.pieces}

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        """Log ``neighbour_share`` and ``neighbour_share_uniform`` (means over the pieces of a
        validation); nothing without pieces (training)."""
        pieces = float(sum(log.get(PIECES_KEY, 0) for log in logging_outputs))
        if pieces == 0:
            return
        for name, key in (("neighbour_share", SHARE_KEY),
                          ("neighbour_share_uniform", UNIFORM_KEY)):
            total = float(sum(log.get(key, 0) for log in logging_outputs))
            metrics.log_scalar(name, total / pieces, pieces, round=4)


def report_plateau_exit(stats: dict, task) -> Optional[str]:
    """After a validation (``stats``: fairseq's validation stats with ``num_updates``): log one
    line the first time ``neighbour_share`` is at least :data:`EXIT_RATIO` times
    ``neighbour_share_uniform``, the run's exit from the bag-of-words plateau, naming the
    previous validation. The last validation is remembered in ``task.state`` (saved in every
    checkpoint's ``task_state``), so a resumed run neither repeats the line nor misses it.

    Returns:
        The line logged, or None (no line: no metric, still on the plateau, or left before).
    """
    share, uniform = stats.get("neighbour_share"), stats.get("neighbour_share_uniform")
    state = getattr(task, "state", None)
    if share is None or not uniform or state is None:
        return None
    previous = state.state_dict.get(STATE_KEY) or {}
    update = int(stats.get("num_updates", 0))
    ratio = float(share) / float(uniform)
    left_at = previous.get("left_at")
    line = None
    if left_at is None and ratio >= EXIT_RATIO:
        left_at = update
        before = (f"; at the previous validation (update {previous['update']}) it was "
                  f"{previous['share']:.4f}, {previous['ratio']:.2f}×" if previous else "")
        line = (f"update {update}: left the bag-of-words plateau: the first layer's attention "
                f"share on the neighbouring tokens is {share:.4f}, {ratio:.2f}× its uniform value "
                f"{uniform:.4f} (the exit: >= {EXIT_RATIO:g}×){before}")
        logger.info(line)
    state.merge_state_dict({STATE_KEY: {"update": update, "share": float(share),
                                        "ratio": ratio, "left_at": left_at}})
    return line
