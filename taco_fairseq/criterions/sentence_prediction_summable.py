"""``sentence_prediction_summable``: fairseq's ``sentence_prediction`` whose GLUE metrics
survive data-parallel validation.

fairseq's criterion logs, in validation with ``--report-mcc``, ``--report-acc-and-f1`` or
``--report-pearson-and-spearman``, the *lists* of predictions and targets of each batch, yet
declares its logging outputs summable; with more than one worker fairseq then adds them up
across workers (``Trainer._fast_stat_sync_sum``), which fails on lists (``TypeError``), and
gathering them instead (``all_gather_list``) is bounded by ``--all-gather-list-size``.

This criterion computes the loss, the accuracy and the predictions exactly as fairseq's, but
turns each batch's predictions into sums before logging them:

* classification: the confusion matrix, one count per (gold, predicted) pair of label values
  (``_cm_{gold}_{pred}``, the integer labels fairseq's criterion reports), from which
  accuracy, Matthews correlation (``mcc``), F1 of label 1 (``f1``, as fairseq's
  ``f1_score`` default) and ``acc_and_f1`` follow exactly;
* regression: n, Σx, Σy, Σx², Σy², Σxy (``_reg_*``, float64), from which Pearson's
  correlation (``pearson``) follows exactly.

Spearman's correlation needs the ranks of all predictions and is not logged; the GLUE runner
computes it from the saved dev predictions. Metrics are in points (0-100), unrounded.
"""

from collections import Counter

import numpy as np
import torch
from fairseq.criterions import register_criterion
from fairseq.criterions.sentence_prediction import (
    SentencePredictionConfig,
    SentencePredictionCriterion,
)
from fairseq.logging import metrics

from ..glue.metrics import confusion_metrics, pearson_from_moments

_CONFUSION = "_cm_"
_MOMENTS = ("_reg_n", "_reg_x", "_reg_y", "_reg_xx", "_reg_yy", "_reg_xy")


@register_criterion("sentence_prediction_summable", dataclass=SentencePredictionConfig)
class SummableSentencePredictionCriterion(SentencePredictionCriterion):
    """fairseq's ``sentence_prediction`` with summable GLUE statistics (see the module doc).

    Options are those of ``sentence_prediction``. The report flags keep their meaning:
    ``--report-mcc`` logs ``mcc``, ``--report-acc-and-f1`` logs ``f1`` and ``acc_and_f1``,
    ``--report-pearson-and-spearman`` logs ``pearson`` (not ``spearman``).
    """

    def __init__(self, cfg: SentencePredictionConfig, task):
        super().__init__(cfg, task)
        if self.keep_pred_and_targ and not self.regression_target:
            # fairseq's criterion reports label values, int(label string), as fairseq does
            nspecial = self.label_dict.nspecial
            symbols = self.label_dict.symbols[nspecial:nspecial + task.cfg.num_classes]
            try:
                self.label_values = sorted(int(s) for s in symbols)
            except ValueError:
                raise ValueError(
                    "--report-mcc/--report-acc-and-f1 need integer class labels (as GLUE's "
                    f"CoLA, MRPC, QQP); the label dictionary has {symbols}"
                ) from None

    def forward(self, model, sample, reduce=True):
        """Loss, sample size and logging outputs as fairseq's ``sentence_prediction``, the
        prediction/target lists replaced by summable statistics."""
        loss, sample_size, logging_output = super().forward(model, sample, reduce)
        pred = logging_output.pop("pred", None)
        targ = logging_output.pop("targ", None)
        if pred is not None:
            if self.regression_target:
                logging_output.update(_moments(pred, targ))
            else:
                logging_output.update(self._confusion(pred, targ))
        return loss, sample_size, logging_output

    def _confusion(self, pred, targ):
        # every pair is logged, zeros included: all workers must log the same keys
        counts = Counter(zip(targ, pred))
        values = self.label_values
        return {f"{_CONFUSION}{g}_{p}": counts[g, p] for g in values for p in values}

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        """fairseq's loss and accuracy, plus ``mcc``/``f1``/``acc_and_f1``/``pearson`` from
        the summed statistics (hidden ``_cm_*``/``_reg_*`` meters, summed over batches)."""
        super().reduce_metrics(logging_outputs)
        if not logging_outputs:
            return
        keys = [k for k in logging_outputs[0] if k.startswith(_CONFUSION) or k in _MOMENTS]
        for key in keys:
            metrics.log_scalar(key, sum(float(log.get(key, 0)) for log in logging_outputs))

        def reported(flag):
            return any(log.get(flag, False) for log in logging_outputs)

        if keys and keys[0].startswith(_CONFUSION):
            if reported("report_mcc"):
                metrics.log_derived("mcc", lambda m: _confusion_metric(m, "mcc"))
            if reported("report_acc_and_f1"):
                metrics.log_derived("f1", lambda m: _confusion_metric(m, "f1"))
                metrics.log_derived(
                    "acc_and_f1",
                    lambda m: (_confusion_metric(m, "f1") + _confusion_metric(m, "accuracy")) / 2,
                )
        elif keys and reported("report_pearson_and_spearman"):
            metrics.log_derived(
                "pearson", lambda m: pearson_from_moments(*(m[k].sum for k in _MOMENTS))
            )


def _moments(pred, targ):
    x = torch.tensor(pred, dtype=torch.float64)
    y = torch.tensor(targ, dtype=torch.float64)
    values = (len(pred), x.sum(), y.sum(), (x * x).sum(), (y * y).sum(), (x * y).sum())
    return {key: float(v) for key, v in zip(_MOMENTS, values)}


def _confusion_metric(meters, name):
    pairs = [k[len(_CONFUSION):].split("_") for k in meters if k.startswith(_CONFUSION)]
    values = sorted({int(gold) for gold, _ in pairs})
    confusion = np.array([[meters[f"{_CONFUSION}{g}_{p}"].sum for p in values] for g in values])
    positive = values.index(1) if 1 in values else None  # F1 of label 1, as fairseq's
    return confusion_metrics(confusion, positive).get(name, float("nan"))
