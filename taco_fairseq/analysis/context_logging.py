"""Online diagnostics: intra- and inter-context cosine similarity of every batch's last-layer
states, logged by the ``taco`` and ``mlm`` criterions during training and validation.

The contextual score of the paper (§2.2, appendix A.3; :mod:`.contextual_score`) is measured on
sentences without masking, with a separate forward pass. The online version reuses the
criterion's own forward pass, so it differs in two ways: the input is the training input (15%
of tokens masked or replaced) and a context is a training sequence (with
``--sample-break-mode none`` a block of text that may span sentences and documents). Every
token of a sequence except ``<s>``, ``</s>`` and padding is paired with one random other token
of its sequence and one random token of another sequence of the batch
(:func:`~.context_similarity.sample_context_pairs`); the pairs are drawn with a generator of
their own (seeded with :data:`PAIR_SEED`), so the training run (its masks, dropout, losses and
gradients) is the same with and without the diagnostics. The work is two gathers and two dot
products per token, without gradient: far below the forward pass (measured in
docs/analysis.md).

Logged metrics: ``intra_context_cos``, ``inter_context_cos`` (means over the tokens of the
logging interval) and ``contextual_score`` (their difference); ``valid_`` prefixed during
validation. Turn them off with ``--no-context-similarity``.
"""

from dataclasses import dataclass, field
from typing import Dict, List, Optional

import torch
from fairseq.dataclass import FairseqDataclass
from fairseq.logging import metrics
from torch import Tensor

from ..diagnostics import pair_measure_sums, sample_context_pairs

#: Seed of the pairs' own generator (one per device and criterion).
PAIR_SEED = 0

#: Keys of the (summable) logging outputs.
PAIRS_KEY = "context_pairs"
INTRA_KEY = "intra_context_cos_sum"
INTER_KEY = "inter_context_cos_sum"


@dataclass
class ContextSimilarityConfig(FairseqDataclass):
    """Criterion options of the online diagnostics (a base of the criterions' configs)."""

    no_context_similarity: bool = field(
        default=False,
        metadata={
            "help": "do not log the intra/inter-context cosine similarity of the last-layer "
            "states (intra_context_cos, inter_context_cos, contextual_score)"
        },
    )


def last_layer_states(model, inner_states: List[Tensor]) -> Tensor:
    """The final states h of a RoBERTa-style encoder from its ``inner_states``.

    Args:
        model: a model with ``encoder.sentence_encoder`` (fairseq's RoBERTa).
        inner_states: ``return_all_hiddens`` output, each ``[seq_len, batch, hidden]``; the
            last is before the encoder's final LayerNorm (pre-norm models), which is applied.

    Returns:
        ``[batch, seq_len, hidden]``.
    """
    layer_norm = model.encoder.sentence_encoder.layer_norm
    hidden = inner_states[-1]
    if layer_norm is not None:
        hidden = layer_norm(hidden)
    return hidden.transpose(0, 1)


class ContextSimilarityLogger:
    """Computes and reduces the online diagnostics for a criterion.

    Args:
        cfg: a :class:`ContextSimilarityConfig` (or a config derived from it).
        dictionary: the task's dictionary (its ``<s>``, ``</s>`` and padding are excluded).
    """

    def __init__(self, cfg: ContextSimilarityConfig, dictionary):
        self.enabled = not cfg.no_context_similarity
        self.excluded = (dictionary.bos(), dictionary.eos(), dictionary.pad())
        self._generators: Dict[torch.device, torch.Generator] = {}

    def logging_output(self, model, sample, inner_states: List[Tensor]) -> Dict[str, Tensor]:
        """The batch's summable diagnostics: ``{}`` when disabled, else the number of pairs
        (``context_pairs``) and the sums of intra- and inter-context cosine similarity.

        Args:
            model: the criterion's model (RoBERTa-style).
            sample: the batch (``net_input.src_tokens [batch, seq_len]``).
            inner_states: the forward pass's ``inner_states`` (see :func:`last_layer_states`).
        """
        if not self.enabled:
            return {}
        with torch.no_grad():
            tokens = sample["net_input"]["src_tokens"]
            bos, eos, pad = self.excluded
            valid = tokens.ne(bos) & tokens.ne(eos) & tokens.ne(pad)
            pairs = sample_context_pairs(valid, self._generator(tokens.device))
            sums = pair_measure_sums(last_layer_states(model, inner_states), pairs)
        return {PAIRS_KEY: sums.count, INTRA_KEY: sums.intra["cosine"],
                INTER_KEY: sums.inter["cosine"]}

    def _generator(self, device: torch.device) -> torch.Generator:
        if device not in self._generators:
            self._generators[device] = torch.Generator(device=device).manual_seed(PAIR_SEED)
        return self._generators[device]

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        """Log ``intra_context_cos``, ``inter_context_cos`` (weighted by pairs, so means over
        a whole logging interval) and ``contextual_score``; nothing without pairs."""
        pairs = float(sum(log.get(PAIRS_KEY, 0) for log in logging_outputs))
        if pairs == 0:
            return
        for name, key in (("intra_context_cos", INTRA_KEY), ("inter_context_cos", INTER_KEY)):
            mean = float(sum(log.get(key, 0) for log in logging_outputs)) / pairs
            metrics.log_scalar(name, mean, pairs, round=4)
        metrics.log_derived("contextual_score", _contextual_score)


def _contextual_score(meters) -> Optional[float]:
    """intra − inter; None for a logging interval without pairs (e.g. ``--sample-break-mode
    eos`` batches of one-word lines), whose two means fairseq then reports as None."""
    intra, inter = meters["intra_context_cos"].avg, meters["inter_context_cos"].avg
    if intra is None or inter is None:
        return None
    return round(intra - inter, 4)
