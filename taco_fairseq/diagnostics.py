"""Intra- and inter-context similarity (TACO §2.2, A.3), and the online diagnostics of the
``taco`` and ``mlm`` criteria. A.3: "For every token w_i in the corpus, we randomly sample a
positive token w_{j≠i} within the same context (sentence) and another token w_k from other
sentences"; the *contextual score* is mean cos(h_i, h_j) (intra) − mean cos(h_i, h_k) (inter).
A context is a row of a padded ``[batch, seq_len]`` batch. Online, the pairs come from their
own generator (:data:`PAIR_SEED`), so training is the same without the diagnostics.
"""

from dataclasses import dataclass, field
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

import torch
import torch.nn.functional as F
from fairseq.dataclass import FairseqDataclass
from fairseq.logging import metrics
from torch import Tensor

from .loss import NORM_EPS
from .sampling import outside_row, uniform_below

#: Seed of the online pairs' own generator (one per device and criterion).
PAIR_SEED = 0
#: Keys of the (summable) logging outputs.
PAIRS_KEY = "context_pairs"
INTRA_KEY = "intra_context_cos_sum"
INTER_KEY = "inter_context_cos_sum"


class ContextPairs(NamedTuple):
    """Partners of every position, ``[batch, seq_len]``: ``anchor`` (bool, has both),
    ``intra`` and ``inter`` (int64 flat index of a valid position of the same row, other than
    itself, and of another row; meaningful only where ``anchor``)."""

    anchor: Tensor
    intra: Tensor
    inter: Tensor


def sample_context_pairs(valid: Tensor, generator: torch.Generator) -> ContextPairs:
    """Draw partners for every ``valid`` position (``[batch, seq_len]`` bool), uniformly among
    the other valid positions of its row and those of the other rows, from ``generator`` (on
    ``valid``'s device); static shapes, no host synchronization.

    Raises:
        ValueError: if ``valid`` is not a 2-d bool tensor.
    """
    if valid.dim() != 2 or valid.dtype != torch.bool:
        raise ValueError(f"valid must be a [batch, seq_len] bool tensor, got {valid.dtype} "
                         f"{tuple(valid.shape)}")
    batch, seq_len = valid.shape
    row_cum = valid.long().cumsum(1)  # [B, T]: valid positions up to and including t
    row_len = row_cum[:, -1:]  # [B, 1]
    row_start = row_len.cumsum(0) - row_len  # [B, 1]: rank of the row's first valid position
    flat_cum = (row_cum + row_start).flatten()  # [B·T]: valid positions of the batch up to here
    total = flat_cum[-1]
    uniform = torch.rand((2, batch, seq_len), generator=generator, device=valid.device,
                         dtype=torch.float64)
    # ranks: within the row without the anchor itself (rank row_cum − 1), then over the batch
    intra_rank = outside_row(uniform_below(uniform[0], row_len - 1), row_cum - 1, 1)
    intra_column = torch.searchsorted(row_cum, intra_rank + 1).clamp(max=seq_len - 1)
    intra = torch.arange(batch, device=valid.device).unsqueeze(1) * seq_len + intra_column
    inter_rank = outside_row(uniform_below(uniform[1], total - row_len), row_start, row_len)
    inter = torch.searchsorted(flat_cum, inter_rank.flatten() + 1).clamp(max=batch * seq_len - 1)
    anchor = valid & (row_len >= 2) & (total - row_len >= 1)
    return ContextPairs(anchor, intra, inter.view(batch, seq_len))


def cosine(flat: Tensor, index: Tensor) -> Tensor:
    """``[..., rows]``: cos(a, b) (norms at least ``NORM_EPS``) of every row a of ``flat``
    (``[rows, hidden]``) and the row b that ``index`` (``[..., rows]`` int64) points to."""
    unit = F.normalize(flat, dim=-1, eps=NORM_EPS)
    return (unit * unit[index]).sum(-1)


def pair_sums(states: Tensor, pairs: ContextPairs,
              measure: Callable[[Tensor, Tensor], Tensor] = cosine) -> Tuple[Tensor, ...]:
    """``(anchors, intra, inter)``: the number of anchors (int64) and the float64 sums over
    them of ``measure`` of (anchor, intra) and (anchor, inter) ``states`` (``[batch, seq_len,
    hidden]``, no gradient) for the ``pairs`` of :func:`sample_context_pairs`. ``measure``, as
    :func:`cosine`, is called once, on float32 ``[batch·seq_len, hidden]`` rows and both
    partners' indices ``[2, batch·seq_len]``.

    Raises:
        ValueError: for mismatched shapes.
    """
    if states.dim() != 3 or states.shape[:2] != pairs.anchor.shape:
        raise ValueError(f"states must be [batch, seq_len, hidden] with [batch, seq_len] = "
                         f"{tuple(pairs.anchor.shape)}, got {tuple(states.shape)}")
    with torch.no_grad():
        flat = states.detach().flatten(0, 1).float()  # [B·T, hidden]
        anchor = pairs.anchor.flatten()
        partners = torch.stack([pairs.intra.flatten(), pairs.inter.flatten()])  # [2, B·T]
        intra, inter = torch.where(anchor, measure(flat, partners), 0).double().sum(-1)
    return anchor.sum(), intra, inter


@dataclass
class ContextSimilarityConfig(FairseqDataclass):
    """Criterion option of the online diagnostics (a base of the criteria's configs)."""

    no_context_similarity: bool = field(default=False, metadata={
        "help": "do not log the intra/inter-context cosine similarity of the last-layer "
        "states (intra_context_cos, inter_context_cos, contextual_score)"})


def last_layer_states(model, inner_states: List[Tensor]) -> Tensor:
    """``[seq_len, batch, hidden]``: the final states h of a RoBERTa encoder
    (``model.encoder.sentence_encoder``) from its ``return_all_hiddens`` ``inner_states``, whose
    last entry precedes the final LayerNorm of pre-norm models (applied here)."""
    layer_norm = model.encoder.sentence_encoder.layer_norm
    hidden = inner_states[-1]
    return hidden if layer_norm is None else layer_norm(hidden)


class ContextSimilarityLogger:
    """The online diagnostics of a criterion: every token but ``<s>``, ``</s>`` and padding
    is an anchor when its row has another such token and another row has one."""

    def __init__(self, cfg: ContextSimilarityConfig, dictionary):
        self.enabled = not cfg.no_context_similarity
        self.excluded = (dictionary.bos(), dictionary.eos(), dictionary.pad())
        self._generators: Dict[torch.device, torch.Generator] = {}

    def logging_output(self, sample, hidden: Tensor) -> Dict[str, Tensor]:
        """The batch's summable pair count and cosine sums of ``hidden`` (``[seq_len, batch,
        hidden]`` final states); ``{}`` with ``--no-context-similarity``."""
        if not self.enabled:
            return {}
        with torch.no_grad():
            tokens = sample["net_input"]["src_tokens"]
            bos, eos, pad = self.excluded
            valid = tokens.ne(bos) & tokens.ne(eos) & tokens.ne(pad)
            if tokens.device not in self._generators:
                self._generators[tokens.device] = torch.Generator(tokens.device).manual_seed(
                    PAIR_SEED)
            pairs = sample_context_pairs(valid, self._generators[tokens.device])
            count, intra, inter = pair_sums(hidden.transpose(0, 1), pairs)
        return {PAIRS_KEY: count, INTRA_KEY: intra, INTER_KEY: inter}

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        """Log ``intra_context_cos``, ``inter_context_cos`` (means over the pairs of a logging
        interval) and ``contextual_score`` (their difference); nothing without pairs."""
        pairs = float(sum(log.get(PAIRS_KEY, 0) for log in logging_outputs))
        if pairs == 0:
            return
        for name, key in (("intra_context_cos", INTRA_KEY), ("inter_context_cos", INTER_KEY)):
            mean = float(sum(log.get(key, 0) for log in logging_outputs)) / pairs
            metrics.log_scalar(name, mean, pairs, round=4)
        metrics.log_derived("contextual_score", _contextual_score)


def _contextual_score(meters) -> Optional[float]:
    """intra − inter; None for a logging interval without pairs."""
    intra, inter = meters["intra_context_cos"].avg, meters["inter_context_cos"].avg
    if intra is None or inter is None:
        return None
    return round(intra - inter, 4)
