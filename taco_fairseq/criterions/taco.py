"""Criterion ``taco``: L = L_MLM + λ · L_TC (TACO §3.2)."""

import math
from dataclasses import dataclass, field
from typing import NamedTuple, Union

import torch
from torch import Tensor
from fairseq import modules, utils
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import ChoiceEnum
from fairseq.logging import metrics
from fairseq.logging.meters import safe_round
from omegaconf import II

from ..analysis.context_logging import ContextSimilarityConfig, ContextSimilarityLogger
from ..loss import global_bias, info_nce
from ..distributed import complete_negatives
from ..errors import OptionError

TC_EMBEDDINGS = ("layer-output", "token", "original-token")


class TacoLosses(NamedTuple):
    """Summed losses of one batch (see :meth:`TacoLoss.compute_losses`).

    Attributes:
        mlm_loss: scalar, masked-LM cross-entropy summed over masked tokens, nats.
        tc_loss: scalar float32, InfoNCE summed over anchors, nats (0 without anchors).
        tc_correct: anchors whose positive outscores all negatives.
        num_anchors: anchors of the batch.
        sample_size: masked tokens of the batch.
        context_similarity: the online diagnostics' logging outputs (``{}`` when off).
    """

    mlm_loss: Tensor
    tc_loss: Tensor
    tc_correct: Union[Tensor, int]
    num_anchors: int
    sample_size: Tensor
    context_similarity: dict


@dataclass
class TacoConfig(ContextSimilarityConfig):
    tc_weight: float = field(
        default=1.0, metadata={"help": "λ, the weight of the TC loss (0 gives masked_lm)"}
    )
    tc_temperature: float = field(
        default=0.07, metadata={"help": "τ, the temperature of the cosine scores"}
    )
    tc_embedding: ChoiceEnum(TC_EMBEDDINGS) = field(
        default="layer-output",
        metadata={
            "help": "e in g = h - e: the embedding layer's output for the model input "
            "(layer-output, as the official code: token + position embedding, LayerNorm, "
            "embedding dropout), the token-embedding row of the input token (token: at masked "
            "positions mostly the <mask> row) or of the original token before masking "
            "(original-token, the paper's wording)"
        },
    )
    tc_detach_keys: bool = field(
        default=True,
        metadata={
            "help": "positives and negatives carry no gradient (stop-gradient, as the "
            "official code). True by default; fairseq's command line turns the flag "
            "--tc-detach-keys into 'false'"
        },
    )
    tpu: bool = II("common.tpu")


def validate_loss_options(cfg) -> None:
    """Check the TC loss options of the criterion's config.

    Raises:
        OptionError: naming the option, its value and what is allowed.
    """
    if not cfg.tc_weight >= 0:  # also rejects NaN
        raise OptionError(f"--tc-weight (λ) must be >= 0, got {cfg.tc_weight}")
    if not cfg.tc_temperature > 0:
        raise OptionError(
            f"--tc-temperature (τ) must be > 0 (0.07 in the paper), got {cfg.tc_temperature}"
        )


def check_task(cfg, task) -> None:
    """Check that the task draws TACO's positions in a way this criterion can use.

    Raises:
        OptionError: for a task other than ``taco_masked_lm``, or
            ``--tc-cross-worker-negatives`` with ``tc_detach_keys`` false.
    """
    task_cfg = getattr(task, "cfg", None)
    if not hasattr(task_cfg, "tc_negatives"):
        raise OptionError(
            f"--criterion taco needs --task taco_masked_lm (it draws the TC positions), got "
            f"--task {getattr(task_cfg, '_name', type(task).__name__)}"
        )
    if getattr(task_cfg, "tc_cross_worker_negatives", False) and not cfg.tc_detach_keys:
        raise OptionError(
            "--tc-cross-worker-negatives needs tc_detach_keys true (the default; drop "
            "--tc-detach-keys): the keys gathered from other workers carry no gradient"
        )


@register_criterion("taco", dataclass=TacoConfig)
class TacoLoss(FairseqCriterion):
    """TACO: fairseq's masked-LM loss plus λ times the token-alignment contrastive loss.

    The objective of one update is ``mean MLM loss over its masked tokens + λ · mean TC loss
    over its anchors`` (NOTES.md "Objective"; the TC mean is over anchors, as the official
    code, which equals the paper's mean of per-sequence means when all sequences are full
    blocks). fairseq divides the gradient of the summed losses of all batches and workers of
    an update by the summed sample size (masked tokens), so each batch returns

        loss = Σ_masked CE + λ · Σ_anchors InfoNCE · max(M, 1) / A,   sample_size = masked,

    where M and A are the masked tokens and anchors of the whole update over all workers
    (``sample["taco"]["update_totals"]``, attached by ``TacoMaskedLMTask.train_step``);
    without them (validation) the batch's own counts are used.

    Needs the batches of ``taco_masked_lm`` and a RoBERTa-style model
    (``model.encoder.sentence_encoder``).

    Logged (all summable across workers): ``loss`` = mlm_loss + λ · tc_loss (bits),
    ``mlm_loss`` (bits per masked token), ``ppl`` (of mlm_loss), ``tc_loss`` (bits per anchor),
    ``tc_accuracy`` (share of anchors whose positive outscores all K negatives),
    ``tc_anchors`` (anchors per update), ``tc_skipped`` (batches per update without
    negatives, whose TC loss is skipped) and, unless ``--no-context-similarity``,
    ``intra_context_cos``, ``inter_context_cos`` and ``contextual_score``
    (:mod:`taco_fairseq.analysis.context_logging`).
    """

    def __init__(self, cfg: TacoConfig, task):
        super().__init__(task)
        validate_loss_options(cfg)
        check_task(cfg, task)
        self.tc_weight = cfg.tc_weight
        self.tc_temperature = cfg.tc_temperature
        self.tc_embedding = cfg.tc_embedding
        self.tc_detach_keys = cfg.tc_detach_keys
        self.tpu = cfg.tpu
        self.context_similarity = ContextSimilarityLogger(cfg, task.source_dictionary)

    def forward(self, model, sample, reduce=True):
        """Compute the loss of ``sample``.

        Returns:
            (loss, sample_size, logging_output) as fairseq criterions; ``loss`` is a sum in
            nats over masked tokens (MLM) plus the weighted TC sum, ``sample_size`` the number
            of masked tokens.

        Raises:
            KeyError: if ``sample`` has no ``taco`` entry (use ``--task taco_masked_lm``).
        """
        losses = self.compute_losses(model, sample)
        totals = sample["taco"].get("update_totals")
        if totals is None:
            totals = torch.tensor([float(losses.sample_size), float(losses.num_anchors)])
        masked_total, anchor_total = totals.to(losses.tc_loss.device, torch.float32).unbind()
        tc_scale = masked_total.clamp(min=1) / anchor_total.clamp(min=1)
        loss = losses.mlm_loss + (self.tc_weight * tc_scale) * losses.tc_loss

        logging_output = {
            "loss": loss if self.tpu else loss.data,
            "mlm_loss": losses.mlm_loss.data,
            "tc_loss": losses.tc_loss.data,
            "weighted_tc_loss": self.tc_weight * losses.tc_loss.data,
            "tc_correct": losses.tc_correct,
            "tc_anchors": losses.num_anchors,
            "tc_skipped": sample["taco"]["skipped"],
            "ntokens": sample["ntokens"],
            "nsentences": sample["nsentences"],
            "sample_size": losses.sample_size,
            **losses.context_similarity,
        }
        return loss, losses.sample_size, logging_output

    def compute_losses(self, model, sample) -> TacoLosses:
        """One forward pass: the summed MLM and TC losses of ``sample`` (unweighted, nats).

        Raises:
            KeyError: if ``sample`` has no ``taco`` entry (use ``--task taco_masked_lm``).
        """
        if "taco" not in sample:
            raise KeyError(
                "the batch has no TACO positions: the taco criterion needs --task taco_masked_lm"
            )
        masked_tokens = sample["target"].ne(self.padding_idx)
        sample_size = masked_tokens.int().sum()

        # As fairseq's masked_lm: when no token is masked, project all tokens.
        if self.tpu:
            masked_tokens = None
        elif masked_tokens.device == torch.device("cpu"):
            if not masked_tokens.any():
                masked_tokens = None
        else:
            masked_tokens = torch.where(
                masked_tokens.any(), masked_tokens, masked_tokens.new([True])
            )

        logits, extra = model(
            **sample["net_input"], masked_tokens=masked_tokens, return_all_hiddens=True
        )
        context = self.context_similarity.logging_output(model, sample, extra["inner_states"])
        targets = model.get_targets(sample, [logits])
        if masked_tokens is not None:
            targets = targets[masked_tokens]
        mlm_loss = modules.cross_entropy(
            logits.view(-1, logits.size(-1)),
            targets.view(-1),
            reduction="sum",
            ignore_index=self.padding_idx,
        )

        taco = sample["taco"]
        # cross-worker batches join the all-gather even without anchors of their own
        cross_worker = "negative_uniform" in taco
        zero = mlm_loss.new_zeros((), dtype=torch.float32)
        if len(taco["anchor"]) == 0 and not cross_worker:
            return TacoLosses(mlm_loss, zero, 0, 0, sample_size, context)
        with torch.set_grad_enabled(torch.is_grad_enabled() and self.tc_weight > 0):
            # [batch, seq_len, hidden], a transposed view info_nce reads without a copy
            vectors = self._global_bias(model, sample, extra["inner_states"])
            anchor, positive = taco["anchor"], taco["positive"]
            if cross_worker:
                vectors, anchor, positive, negative, dropped = complete_negatives(
                    vectors.flatten(0, 1), taco, across_workers="update_totals" in taco
                )
                taco["skipped"] = int(dropped > 0)  # logged as tc_skipped
            else:
                negative = taco["negative"]
            if len(anchor) == 0:
                return TacoLosses(mlm_loss, zero, 0, 0, sample_size, context)
            tc = info_nce(
                vectors, anchor, positive, negative, self.tc_temperature, self.tc_detach_keys
            )
        return TacoLosses(
            mlm_loss, tc.loss.sum(), tc.correct.sum(), len(anchor), sample_size, context
        )

    def _global_bias(self, model, sample, inner_states):
        """g = h − e for every position: ``[batch, seq_len, hidden]`` float32 (TACO §3.1).

        e by ``--tc-embedding``: ``layer-output``, the embedding layer's output for the model's
        input (token + position embedding, LayerNorm and, in training, the embedding dropout;
        the official code); ``token``, the token-embedding row of the input token (at masked
        positions the ``<mask>`` row, or the random or kept token's); ``original-token``, the
        row of the token before masking (``sample["target"]`` where it is not padding).
        """
        encoder = model.encoder.sentence_encoder
        hidden = inner_states[-1]
        if encoder.layer_norm is not None:  # pre-norm models normalize after the last layer
            hidden = encoder.layer_norm(hidden)
        if self.tc_embedding == "layer-output":
            embedding = inner_states[0]  # [seq_len, batch, hidden], as the hidden states
        else:
            tokens = sample["net_input"]["src_tokens"]
            if self.tc_embedding == "original-token":
                target = sample["target"]
                tokens = torch.where(target.ne(self.padding_idx), target, tokens)
            embedding = encoder.embed_tokens(tokens).transpose(0, 1)
        return global_bias(hidden, embedding).transpose(0, 1)

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        """Aggregate logging outputs from data parallel training."""

        def total(key):
            return sum(log.get(key, 0) for log in logging_outputs)

        sample_size = total("sample_size")
        anchors = total("tc_anchors")
        mlm_loss = total("mlm_loss") / max(sample_size, 1) / math.log(2)
        tc_loss = total("tc_loss") / max(anchors, 1) / math.log(2)
        weighted_tc_loss = total("weighted_tc_loss") / max(anchors, 1) / math.log(2)

        metrics.log_scalar("loss", mlm_loss + weighted_tc_loss, sample_size, round=3)
        metrics.log_scalar("mlm_loss", mlm_loss, sample_size, round=3)
        metrics.log_derived("ppl", lambda meters: utils.get_perplexity(meters["mlm_loss"].avg))
        metrics.log_scalar("tc_loss", tc_loss, anchors, round=3)
        metrics.log_scalar("_tc_correct", total("tc_correct"))
        metrics.log_scalar("_tc_anchors", anchors)
        metrics.log_derived(
            "tc_accuracy",
            lambda meters: safe_round(meters["_tc_correct"].sum / meters["_tc_anchors"].sum, 4)
            if meters["_tc_anchors"].sum > 0
            else float("nan"),
        )
        metrics.log_scalar("tc_anchors", anchors, round=0)
        metrics.log_scalar("tc_skipped", total("tc_skipped"), round=2)
        ContextSimilarityLogger.reduce_metrics(logging_outputs)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
