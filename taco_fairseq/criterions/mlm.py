"""Criterion ``mlm``: fairseq's masked-LM loss with the online diagnostics, or the paper's
extended MLM "MLM+TP" (§5.3: the token-prediction loss on all positions, masked and unmasked).
"""

import math
from dataclasses import dataclass, field

import torch
from fairseq import modules, utils
from fairseq.criterions import register_criterion
from fairseq.criterions.masked_lm import MaskedLmLoss
from fairseq.dataclass import ChoiceEnum
from fairseq.logging import metrics
from omegaconf import II

from ..analysis.context_logging import ContextSimilarityConfig, ContextSimilarityLogger

MLM_POSITIONS = ("masked", "all")


@dataclass
class MlmConfig(ContextSimilarityConfig):
    mlm_positions: ChoiceEnum(MLM_POSITIONS) = field(
        default="masked",
        metadata={
            "help": "positions whose original token is predicted: the masked ones (MLM, "
            "exactly fairseq's masked_lm loss) or every non-padding position (MLM+TP)"
        },
    )
    tpu: bool = II("common.tpu")


@register_criterion("mlm", dataclass=MlmConfig)
class MlmLoss(MaskedLmLoss):
    """Masked-LM cross-entropy over the masked positions (``--mlm-positions masked``, the MLM
    baseline; same loss, gradient and sample size as fairseq's ``masked_lm``) or over all
    non-padding positions (``--mlm-positions all``: MLM+TP, the paper's §5.3 ablation).

    MLM+TP keeps the input of masked LM (15% of the positions masked, 80/10/10) and predicts
    the *original* token at every non-padding position, ``<s>`` and ``</s>`` included; its
    loss is the mean over all of them (``sample_size`` = non-padding tokens). The original
    tokens are rebuilt from the batch: fairseq's ``MaskTokensDataset`` puts the original token
    in ``target`` at the positions it selected (masked, randomly replaced or kept) and padding
    elsewhere, where the input is the unchanged original, so

        original = where(target != pad, target, src_tokens).

    Works with the ``masked_lm`` and ``taco_masked_lm`` tasks and RoBERTa-style models.

    Logged: ``loss`` (bits per predicted token), ``mlm_loss`` (bits per masked token, as
    ``masked_lm``'s loss), ``ppl`` (of mlm_loss), with MLM+TP ``tp_loss`` (bits per unmasked
    token), and the online diagnostics (:mod:`taco_fairseq.analysis.context_logging`).
    """

    def __init__(self, cfg: MlmConfig, task):
        super().__init__(cfg, task)
        self.mlm_positions = cfg.mlm_positions
        self.context_similarity = ContextSimilarityLogger(cfg, task.source_dictionary)

    def forward(self, model, sample, reduce=True):
        """Compute the loss of ``sample``.

        Returns:
            (loss, sample_size, logging_output) as fairseq criterions: ``loss`` summed in nats
            over the predicted positions, ``sample_size`` their number.
        """
        target = sample["target"]
        masked = target.ne(self.padding_idx)  # [batch, seq_len]
        if self.mlm_positions == "all":
            target = torch.where(masked, target, sample["net_input"]["src_tokens"])
        predicted = target.ne(self.padding_idx)
        sample_size = predicted.int().sum()

        # As fairseq's masked_lm: when no position is predicted, project all of them.
        if self.tpu:
            projected = None
        elif predicted.device.type == "cpu":
            projected = predicted if predicted.any() else None
        else:
            projected = torch.where(predicted.any(), predicted, predicted.new([True]))

        logits, extra = model(
            **sample["net_input"], masked_tokens=projected, return_all_hiddens=True
        )
        if projected is not None:
            target, masked = target[projected], masked[projected]
        token_loss = modules.cross_entropy(
            logits.view(-1, logits.size(-1)),
            target.view(-1),
            reduction="none",
            ignore_index=self.padding_idx,
        )
        masked = masked.view(-1)
        loss = token_loss.sum()
        logging_output = {
            "loss": loss if self.tpu else loss.data,
            "mlm_loss": token_loss[masked].sum().data,
            "masked_tokens": masked.int().sum(),
            "ntokens": sample["ntokens"],
            "nsentences": sample["nsentences"],
            "sample_size": sample_size,
            **self.context_similarity.logging_output(model, sample, extra["inner_states"]),
        }
        if self.mlm_positions == "all":
            logging_output["tp_loss"] = token_loss[~masked].sum().data
        return loss, sample_size, logging_output

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        """Aggregate logging outputs from data parallel training."""

        def total(key):
            return sum(log.get(key, 0) for log in logging_outputs)

        sample_size = total("sample_size")
        masked = total("masked_tokens")
        metrics.log_scalar(
            "loss", total("loss") / max(sample_size, 1) / math.log(2), sample_size, round=3
        )
        metrics.log_scalar(
            "mlm_loss", total("mlm_loss") / max(masked, 1) / math.log(2), masked, round=3
        )
        metrics.log_derived("ppl", lambda meters: utils.get_perplexity(meters["mlm_loss"].avg))
        if any("tp_loss" in log for log in logging_outputs):
            unmasked = sample_size - masked
            metrics.log_scalar(
                "tp_loss", total("tp_loss") / max(unmasked, 1) / math.log(2), unmasked, round=3
            )
        ContextSimilarityLogger.reduce_metrics(logging_outputs)
