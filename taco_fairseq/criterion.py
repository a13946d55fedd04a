"""The criteria: ``mlm`` (fairseq's masked-LM loss, or MLM+TP, with the online diagnostics),
``taco`` (``mlm`` + λ · the TC loss, TACO §3.2) and ``sentence_prediction_summable`` (fairseq's
``sentence_prediction`` whose GLUE metrics are merged over data-parallel workers)."""

import logging
import math
from dataclasses import dataclass, field
from typing import NamedTuple, Optional

import torch
from fairseq import modules, utils
from fairseq.criterions import register_criterion
from fairseq.criterions.masked_lm import MaskedLmLoss
from fairseq.criterions.sentence_prediction import (SentencePredictionConfig,
                                                    SentencePredictionCriterion)
from fairseq.dataclass import ChoiceEnum
from fairseq.logging import metrics
from fairseq.logging.meters import safe_round
from omegaconf import II
from torch import Tensor

from .batch import CrossWorkerTacoBatch
from .diagnostics import ContextSimilarityConfig, ContextSimilarityLogger, last_layer_states
from .distributed import complete_negatives
from .errors import OptionError
from .loss import global_bias, info_nce
from .neighbour_attention import NeighbourShareConfig, NeighbourShareLogger
from .totals import tc_scale

logger = logging.getLogger(__name__)

MLM_POSITIONS = ("masked", "all")
TC_EMBEDDINGS = ("layer-output", "token", "original-token")


def _total(logging_outputs, key):
    return sum(log.get(key, 0) for log in logging_outputs)


def _bits(logging_outputs, key, count):
    """The summed nats of ``key`` per ``count``, in bits; None when ``count`` is 0 (no value:
    fairseq's meters skip None, where a 0 logged with weight 0 would be shown as the value of
    a logging interval without any other)."""
    return _total(logging_outputs, key) / count / math.log(2) if count else None


@dataclass
class MlmConfig(ContextSimilarityConfig, NeighbourShareConfig):
    mlm_positions: ChoiceEnum(MLM_POSITIONS) = field(default="masked", metadata={
        "help": "positions whose original token is predicted: the masked ones (MLM, exactly "
        "fairseq's masked_lm loss) or every non-padding position (MLM+TP)"})
    tpu: bool = II("common.tpu")


class MlmOutput(NamedTuple):
    """One forward pass of :meth:`MlmLoss.mlm_forward`: ``loss`` (scalar, nats summed over
    the ``sample_size`` predicted positions), the summable ``logging_output`` (nats), the
    encoder's ``inner_states`` and final states ``hidden`` (``[seq_len, batch, hidden]``)."""

    loss: Tensor
    sample_size: Tensor
    logging_output: dict
    inner_states: list
    hidden: Tensor


@register_criterion("mlm", dataclass=MlmConfig)
class MlmLoss(MaskedLmLoss):
    """Masked-LM cross-entropy over the masked positions (fairseq's ``masked_lm`` loss) or, with
    ``--mlm-positions all`` (MLM+TP, §5.3), of the original token at every non-padding position.

    Logged: ``loss``, ``mlm_loss`` and ``tp_loss`` (MLM+TP) in bits per predicted, masked and
    unmasked token, ``ppl`` of ``mlm_loss``, the online diagnostics (:mod:`.diagnostics`) and,
    at validation, the first layer's neighbour share (:mod:`.neighbour_attention`).
    """

    def __init__(self, cfg, task):
        super().__init__(cfg, task)
        self.mlm_positions = getattr(cfg, "mlm_positions", "masked")
        self.context_similarity = ContextSimilarityLogger(cfg, task.source_dictionary)
        self.neighbour_share = NeighbourShareLogger(cfg, task.source_dictionary)

    def forward(self, model, sample, reduce=True):
        """``(loss, sample_size, logging_output)``, as fairseq's criteria: the loss summed in
        nats over the predicted positions, ``sample_size`` their number."""
        out = self.mlm_forward(model, sample)
        logging_output = {**out.logging_output, "loss": out.loss if self.tpu else out.loss.data}
        return out.loss, out.sample_size, logging_output

    def mlm_forward(self, model, sample) -> MlmOutput:
        """The model's forward pass on ``sample`` and its (MLM or MLM+TP) loss."""
        target = sample["target"]
        masked = target.ne(self.padding_idx)  # [batch, seq_len]
        if self.mlm_positions == "all":
            target = torch.where(masked, target, sample["net_input"]["src_tokens"])
        predicted = target.ne(self.padding_idx)
        # as fairseq's masked_lm: when no position is predicted, project all of them
        if self.tpu:
            projected = None
        elif predicted.device.type == "cpu":
            projected = predicted if predicted.any() else None
        else:
            projected = torch.where(predicted.any(), predicted, predicted.new([True]))
        logits, extra = model(**sample["net_input"], masked_tokens=projected,
                              return_all_hiddens=True)
        if projected is not None:
            target, masked = target[projected], masked[projected]
        token_loss = modules.cross_entropy(logits.view(-1, logits.size(-1)), target.view(-1),
                                           reduction="none", ignore_index=self.padding_idx)
        masked = masked.view(-1)
        sample_size = predicted.int().sum()
        hidden = last_layer_states(model, extra["inner_states"])
        logging_output = {
            "mlm_loss": token_loss[masked].sum().data,
            "masked_tokens": masked.int().sum(),
            "ntokens": sample["ntokens"],
            "nsentences": sample["nsentences"],
            "sample_size": sample_size,
            **self.context_similarity.logging_output(sample, hidden),
            **self.neighbour_share.logging_output(model, sample["net_input"]["src_tokens"],
                                                  extra["inner_states"]),
        }
        if self.mlm_positions == "all":
            logging_output["tp_loss"] = token_loss[~masked].sum().data
        return MlmOutput(token_loss.sum(), sample_size, logging_output, extra["inner_states"],
                         hidden)

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        """Aggregate logging outputs from data parallel training."""
        sample_size = _total(logging_outputs, "sample_size")
        masked = _total(logging_outputs, "masked_tokens")
        metrics.log_scalar("loss", cls.loss_bits(logging_outputs), sample_size, round=3)
        metrics.log_scalar("mlm_loss", _bits(logging_outputs, "mlm_loss", masked), masked,
                           round=3)
        metrics.log_derived("ppl", lambda meters: utils.get_perplexity(meters["mlm_loss"].avg))
        if any("tp_loss" in log for log in logging_outputs):
            unmasked = sample_size - masked
            metrics.log_scalar("tp_loss", _bits(logging_outputs, "tp_loss", unmasked), unmasked,
                               round=3)
        ContextSimilarityLogger.reduce_metrics(logging_outputs)
        NeighbourShareLogger.reduce_metrics(logging_outputs)

    @staticmethod
    def loss_bits(logging_outputs) -> float:
        """The logged ``loss``: bits per predicted token."""
        return _bits(logging_outputs, "loss", _total(logging_outputs, "sample_size"))


@dataclass
class TacoConfig(ContextSimilarityConfig, NeighbourShareConfig):
    tc_weight: float = field(default=1.0, metadata={
        "help": "λ, the weight of the TC loss (0 gives masked_lm)"})
    tc_temperature: float = field(default=0.07, metadata={
        "help": "τ, the temperature of the cosine scores"})
    tc_embedding: ChoiceEnum(TC_EMBEDDINGS) = field(default="layer-output", metadata={
        "help": "e in g = h - e: the embedding layer's output for the model input (layer-output, "
        "as the official code: token + position embedding, LayerNorm, embedding dropout), the "
        "token-embedding row of the input token (token: at masked positions mostly the <mask> "
        "row) or of the original token before masking (original-token, the paper's wording)"})
    tc_key_gradients: bool = field(default=False, metadata={
        "help": "positives and negatives carry gradient (without it they are detached, a "
        "stop-gradient, as in the official code); not with --tc-cross-worker-negatives"})
    tc_detach_keys: bool = field(default=True, metadata={
        "help": "deprecated, removed in the next release: use --tc-key-gradients (the flag "
        "--tc-detach-keys sets this false, which means --tc-key-gradients)"})
    tpu: bool = II("common.tpu")


#: The deprecated spelling of ``tc_key_gradients``, its negation (default true; its flag
#: ``--tc-detach-keys`` set it false): it still works, with a warning, until the next release.
DEPRECATED_DETACH_KEYS = "tc_detach_keys"


def keys_carry_gradient(tc_key_gradients: Optional[bool],
                        tc_detach_keys: Optional[bool]) -> Optional[bool]:
    """Whether the positives and negatives carry gradient, given the values of
    ``tc_key_gradients`` and of its deprecated negation ``tc_detach_keys`` (as a config or a
    checkpoint holds them; either one asks for it): None when both are None (a checkpoint that
    records neither)."""
    if tc_key_gradients is None and tc_detach_keys is None:
        return None
    return bool(tc_key_gradients) or tc_detach_keys is False


class TacoLosses(NamedTuple):
    """Summed, unweighted losses of one batch (:meth:`TacoLoss.compute_losses`), in nats:
    ``mlm_loss`` over the ``sample_size`` masked tokens, ``tc_loss`` (float32) over the
    ``num_anchors`` anchors, ``tc_correct`` of them ranking their positive first; ``skipped`` 1
    when the batch has no negatives; the MLM part's ``logging_output``."""

    mlm_loss: Tensor
    tc_loss: Tensor
    tc_correct: Tensor
    num_anchors: int
    sample_size: Tensor
    skipped: int
    logging_output: dict


#: τ outside it makes the TC loss degenerate: 1/τ, the largest score cos/τ, must lie in
#: [2, 100] (:func:`check_temperature`; the paper's τ = 0.07 gives 1/τ ≈ 14).
TEMPERATURE_RANGE = (0.01, 0.5)


def check_temperature(temperature: float, num_negatives: int) -> None:
    """Check ``--tc-temperature`` τ; warn (once: the criterion is built once) outside
    :data:`TEMPERATURE_RANGE`. The scores are cos/τ in [−1/τ, 1/τ]; an anchor's loss, with K =
    ``num_negatives``, lies between log2(1 + K·exp(−2/τ)) bits (perfectly aligned vectors) and
    chance, log2(K + 1) bits: above the range it cannot move from chance (TC is in effect off);
    below it a misranked anchor costs up to 2/τ nats, with a gradient of order 1/τ that swamps
    the MLM loss (CLIP, Radford et al. 2021, caps its learned 1/τ at 100).

    Raises:
        OptionError: τ not > 0 (also NaN).
    """
    if not temperature > 0:
        raise OptionError(f"--tc-temperature (τ) must be > 0 (0.07 in the paper), got "
                          f"{temperature}")
    low, high = TEMPERATURE_RANGE
    advice = f"Use a τ in [{low:g}, {high:g}] (0.07 in the paper)"
    if temperature > high:
        chance = math.log2(num_negatives + 1)
        # chance − floor = log2((K + 1) / (1 + K·exp(−2/τ))), without cancellation at large τ
        width = -math.log1p(num_negatives * math.expm1(-2 / temperature)
                            / (num_negatives + 1)) / math.log(2)
        logger.warning(
            f"--tc-temperature {temperature:g}: above {high:g}, the scores cos/τ lie within "
            f"±{1 / temperature:.3g}, so the TC loss stays between {chance - width:.6f} bits "
            f"(perfectly aligned vectors) and {chance:.6f} bits (chance, log2(K+1)), a range "
            f"of {width:.3g} bits, and its gradient is at most 1/τ: TC is in effect off. "
            f"{advice}")
    elif temperature < low:
        logger.warning(
            f"--tc-temperature {temperature:g}: below {low:g}, the scores cos/τ reach "
            f"±{1 / temperature:.3g}, so a misranked anchor costs up to {2 / temperature:.3g} "
            f"nats with a gradient of order 1/τ, which swamps the MLM loss. {advice}")


@register_criterion("taco", dataclass=TacoConfig)
class TacoLoss(MlmLoss):
    """TACO (§3.2): ``mlm`` plus λ times the TC loss, on ``taco_masked_lm``'s batches.

    An update minimizes mean MLM loss over its M masked tokens + λ · mean InfoNCE over its A
    anchors (the official code's mean). fairseq divides by the summed sample size (masked
    tokens), so a batch returns ``Σ CE + λ · Σ InfoNCE · max(M, 1) / max(A, 1)``, M and A over
    the whole update and all workers (:mod:`taco_fairseq.totals`: in a training step
    ``TacoBatch.all_worker_totals``; otherwise the batch's own).

    Logged: ``mlm``'s metrics, ``loss`` = mlm_loss + λ · tc_loss (bits), ``tc_loss`` (bits per
    anchor), ``tc_accuracy`` (share of anchors whose positive outscores all K negatives),
    ``tc_anchors`` and ``tc_skipped`` (per update: anchors; batches without negatives).
    """

    def __init__(self, cfg: TacoConfig, task):
        super().__init__(cfg, task)
        if not 0 <= cfg.tc_weight < math.inf:  # also rejects NaN
            raise OptionError(f"--tc-weight (λ) must be a finite number >= 0 (1 in the paper), "
                              f"got {cfg.tc_weight}")
        task_cfg = getattr(task, "cfg", None)
        if not hasattr(task_cfg, "tc_negatives"):
            raise OptionError(
                f"--criterion taco needs --task taco_masked_lm (it draws the TC positions), got "
                f"--task {getattr(task_cfg, '_name', type(task).__name__)}")
        check_temperature(cfg.tc_temperature, task_cfg.tc_negatives)
        if not cfg.tc_detach_keys:
            logger.warning(
                "--tc-detach-keys (criterion.tc_detach_keys: false) is deprecated and will be "
                "removed in the next release: use --tc-key-gradients (criterion."
                "tc_key_gradients: true), which means the same")
        self.tc_key_gradients = keys_carry_gradient(cfg.tc_key_gradients, cfg.tc_detach_keys)
        if task_cfg.tc_cross_worker_negatives and self.tc_key_gradients:
            raise OptionError(
                "--tc-cross-worker-negatives needs the positives and negatives detached: the "
                "keys gathered from other workers carry no gradient. Leave out "
                "--tc-key-gradients (or the deprecated --tc-detach-keys), or "
                "--tc-cross-worker-negatives")
        self.tc_weight = cfg.tc_weight
        self.tc_temperature = cfg.tc_temperature
        self.tc_embedding = cfg.tc_embedding

    def forward(self, model, sample, reduce=True):
        """``(loss, sample_size, logging_output)`` as fairseq's criteria (see the class doc)."""
        losses = self.compute_losses(model, sample)
        scale = tc_scale(sample["taco"].all_worker_totals, losses.sample_size,
                         losses.num_anchors, losses.tc_loss.device)
        loss = losses.mlm_loss + (self.tc_weight * scale) * losses.tc_loss
        logging_output = {
            **losses.logging_output,
            "loss": loss if self.tpu else loss.data,
            "tc_loss": losses.tc_loss.data,
            "weighted_tc_loss": self.tc_weight * losses.tc_loss.data,
            "tc_correct": losses.tc_correct,
            "tc_anchors": losses.num_anchors,
            "tc_skipped": losses.skipped,
        }
        return loss, losses.sample_size, logging_output

    def compute_losses(self, model, sample) -> TacoLosses:
        """One forward pass: the summed MLM and TC losses of ``sample``.

        Raises:
            KeyError: if ``sample`` has no ``taco`` entry (use ``--task taco_masked_lm``).
        """
        if "taco" not in sample:
            raise KeyError("the batch has no TACO positions: the taco criterion needs --task "
                           "taco_masked_lm")
        mlm = self.mlm_forward(model, sample)
        taco = sample["taco"]
        cross_worker = isinstance(taco, CrossWorkerTacoBatch)
        skipped = int(getattr(taco, "skipped", False))
        # the same types with and without a TC term: fairseq's all_reduce_dict reduces Python
        # numbers and tensors in separate buffers, which must match across workers
        no_tc = TacoLosses(mlm.loss, mlm.loss.new_zeros((), dtype=torch.float32),
                           mlm.loss.new_zeros((), dtype=torch.long), 0, mlm.sample_size, skipped,
                           mlm.logging_output)
        # cross-worker batches join the all-gather even without anchors of their own
        if len(taco.anchor) == 0 and not cross_worker:
            return no_tc
        taco = taco.to(mlm.loss.device)
        with torch.set_grad_enabled(torch.is_grad_enabled() and self.tc_weight > 0):
            # [batch, seq_len, hidden], a transposed view info_nce reads without a copy
            vectors = global_bias(mlm.hidden, self.static_embedding(
                model, sample, mlm.inner_states)).transpose(0, 1)
            if cross_worker:
                vectors, anchor, positive, negative, dropped = complete_negatives(
                    vectors.flatten(0, 1), taco, across_workers=taco.training)
                no_tc = no_tc._replace(skipped=int(dropped > 0))
            else:
                anchor, positive, negative = taco.anchor, taco.positive, taco.negative
            if len(anchor) == 0:
                return no_tc
            tc = info_nce(vectors, anchor, positive, negative, self.tc_temperature,
                          detach_keys=not self.tc_key_gradients)
        return no_tc._replace(tc_loss=tc.loss.sum(), tc_correct=tc.correct.sum(),
                              num_anchors=len(anchor))

    def static_embedding(self, model, sample, inner_states) -> Tensor:
        """e of the global bias g = h − e (TACO §3.1) for every position, by ``--tc-embedding``:
        ``[seq_len, batch, hidden]`` as the encoder's ``inner_states``, of which ``layer-output``
        is the first."""
        if self.tc_embedding == "layer-output":
            return inner_states[0]
        tokens = sample["net_input"]["src_tokens"]
        if self.tc_embedding == "original-token":
            target = sample["target"]
            tokens = torch.where(target.ne(self.padding_idx), target, tokens)
        return model.encoder.sentence_encoder.embed_tokens(tokens).transpose(0, 1)

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        """Aggregate logging outputs from data parallel training."""
        super().reduce_metrics(logging_outputs)
        anchors = _total(logging_outputs, "tc_anchors")
        metrics.log_scalar("tc_loss", _bits(logging_outputs, "tc_loss", anchors), anchors, round=3)
        metrics.log_scalar("_tc_correct", _total(logging_outputs, "tc_correct"))
        metrics.log_derived("tc_accuracy", lambda meters: safe_round(
            meters["_tc_correct"].sum / meters["tc_anchors"].sum, 4)
            if meters["tc_anchors"].sum > 0 else float("nan"))
        metrics.log_scalar("tc_anchors", anchors, round=0)
        metrics.log_scalar("tc_skipped", _total(logging_outputs, "tc_skipped"), round=2)
        metrics.log_scalar_sum("skipped_updates", int(cls.loss_bits(logging_outputs) is None))

    @staticmethod
    def loss_bits(logging_outputs) -> Optional[float]:
        """The logged ``loss``: mlm_loss + λ · tc_loss, in bits, of the terms that have
        tokens; None for an update (at validation: a batch) without a masked token and an
        anchor, which trains on nothing (zero loss and gradient; counted in
        ``skipped_updates``)."""
        terms = [_bits(logging_outputs, "mlm_loss", _total(logging_outputs, "masked_tokens")),
                 _bits(logging_outputs, "weighted_tc_loss", _total(logging_outputs, "tc_anchors"))]
        terms = [term for term in terms if term is not None]
        return sum(terms) if terms else None


@register_criterion("sentence_prediction_summable", dataclass=SentencePredictionConfig)
class SummableSentencePredictionCriterion(SentencePredictionCriterion):
    """fairseq's ``sentence_prediction`` whose GLUE metrics are merged over data-parallel workers.

    With ``--report-mcc``, ``--report-acc-and-f1`` or ``--report-pearson-and-spearman``,
    fairseq's criterion logs the lists of a validation batch's predictions and targets but
    declares its logging outputs summable, so with two or more workers fairseq's
    ``Trainer._fast_stat_sync_sum`` adds lists to numbers and fails (``TypeError``). Here they
    are then gathered (fairseq's ``all_gather_list``, one batch at a time; with CUDA within
    ``--all-gather-list-size`` bytes) and fairseq's own ``reduce_metrics`` derives the metrics.

    Raises:
        OptionError: ``--report-mcc``/``--report-acc-and-f1`` with ``--regression-target`` or
            class labels that are not integers, or ``--report-acc-and-f1`` with more than two
            labels or two without 1 (fairseq's metrics would fail at the first validation).
    """

    def __init__(self, cfg: SentencePredictionConfig, task):
        super().__init__(cfg, task)
        if self.regression_target and (self.report_mcc or self.report_acc_and_f1):
            raise OptionError("--report-mcc/--report-acc-and-f1 are metrics of classes, not of "
                              "--regression-target scores: use --report-pearson-and-spearman")
        if self.keep_pred_and_targ and not self.regression_target:
            nspecial = self.label_dict.nspecial
            labels = self.label_dict.symbols[nspecial:nspecial + task.cfg.num_classes]
            try:
                values = {int(label) for label in labels}  # as fairseq's criterion reads them
            except ValueError:
                raise OptionError("--report-mcc/--report-acc-and-f1 need integer class labels "
                                  f"(as GLUE's CoLA, MRPC, QQP); the label dictionary has "
                                  f"{labels}") from None
            if self.report_acc_and_f1 and (len(values) > 2 or len(values) == 2 and 1 not in values):
                raise OptionError("--report-acc-and-f1 (binary F1 of label 1) needs at most two "
                                  "labels, one of them 1 (GLUE's MRPC, QQP: 0 and 1); the label "
                                  f"dictionary has {labels}")

    def logging_outputs_can_be_summed(self) -> bool:
        """False when the logging outputs hold lists of predictions (``--report-*``)."""
        return not self.keep_pred_and_targ
