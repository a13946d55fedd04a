"""GLUE metrics of a run's saved dev predictions, in points (0-100), with scikit-learn and
scipy (accuracy, binary F1 of the positive class, Matthews correlation, Pearson and Spearman
correlation), as GLUE defines them. During fine-tuning fairseq derives the same metrics,
rounded to 0.1 points, from the validation predictions (``sentence_prediction_summable``).
"""

from typing import Callable, Dict, Optional, Sequence

import numpy as np
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from .tasks import GlueTask


def metric_functions(task: GlueTask, positive: Optional[object] = None
                     ) -> Dict[str, Callable[[Sequence, Sequence], float]]:
    """The task's metrics (:attr:`GlueTask.metrics`) as functions of ``(gold, predictions)``
    (equal-length sequences) to a fraction, not points: scikit-learn's ``accuracy_score``,
    ``f1_score`` of the positive class and ``matthews_corrcoef``, scipy's ``pearsonr`` and
    ``spearmanr`` (NaN for constant predictions). Also usable as scikit-learn scorers
    (``make_scorer``), e.g. to choose a probe's regularization by the official metric.

    Args:
        task: the GLUE task.
        positive: F1's positive class as ``predictions`` give it; default
            :attr:`GlueTask.positive_label` (label strings), a class index for a classifier
            that predicts indices into :attr:`GlueTask.labels`.
    """
    positive = task.positive_label if positive is None else positive
    every = {
        "accuracy": accuracy_score,
        "f1": lambda gold, predictions: f1_score(gold, predictions, pos_label=positive),
        "mcc": matthews_corrcoef,
        "pearson": lambda gold, predictions: pearsonr(np.asarray(predictions, float),
                                                      np.asarray(gold, float))[0],
        "spearman": lambda gold, predictions: spearmanr(predictions, gold)[0],
    }
    return {name: every[name] for name in task.metrics}


def score_predictions(task: GlueTask, predictions: Sequence, gold: Sequence) -> Dict[str, float]:
    """The task's metrics (:attr:`GlueTask.metrics`) of one dev set, in points.

    Args:
        task: the GLUE task.
        predictions: per example, the predicted label (a string of ``task.labels``) or, for
            STS-B, the predicted score.
        gold: per example, the gold label or score, aligned with ``predictions``.

    Returns:
        metric name → 100 × value. Correlations of constant predictions are NaN (scipy).

    Raises:
        ValueError: the two sequences differ in length or are empty.
    """
    if len(predictions) != len(gold) or not len(gold):
        raise ValueError(
            f"need as many predictions as gold labels (and at least one): {len(predictions)} "
            f"vs {len(gold)}"
        )
    return {name: 100.0 * float(metric(gold, predictions))
            for name, metric in metric_functions(task).items()}
