"""GLUE metrics, in points (0-100).

Two routes, which must agree (``tests/test_glue_metrics.py``):

* :func:`score_predictions`: from a run's saved dev predictions, with scikit-learn and scipy
  (accuracy, binary F1 of the positive class, Matthews correlation, Pearson and Spearman
  correlation), as GLUE defines them;
* :func:`confusion_metrics` and :func:`pearson_from_moments`: from statistics that are sums
  over examples (a confusion matrix; n, Σx, Σy, Σx², Σy², Σxy), so fairseq can add them up
  over validation batches and data-parallel workers (``sentence_prediction_summable``).
  Spearman's correlation needs the ranks of all predictions and has no such form.
"""

import math
from typing import Dict, Optional, Sequence

import numpy as np
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from .tasks import GlueTask


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
    scorers = {
        "accuracy": lambda: accuracy_score(gold, predictions),
        "f1": lambda: f1_score(gold, predictions, pos_label=task.positive_label),
        "mcc": lambda: matthews_corrcoef(gold, predictions),
        "pearson": lambda: pearsonr(np.asarray(predictions, float), np.asarray(gold, float))[0],
        "spearman": lambda: spearmanr(predictions, gold)[0],
    }
    return {name: 100.0 * float(scorers[name]()) for name in task.metrics}


def confusion_metrics(confusion: np.ndarray, positive: Optional[int] = None) -> Dict[str, float]:
    """Accuracy, Matthews correlation and (with ``positive``) F1 from a confusion matrix.

    Args:
        confusion: ``[classes, classes]`` counts, ``confusion[gold, predicted]``.
        positive: the class index whose F1 is wanted (GLUE: the paraphrase/duplicate class).

    Returns:
        ``accuracy``, ``mcc`` and ``f1`` in points. MCC is the multi-class form of
        Gorodkin (2004), as scikit-learn's ``matthews_corrcoef``:
        (c·s − Σ_k p_k t_k) / √((s² − Σ_k p_k²)(s² − Σ_k t_k²)) with c correct, s examples,
        t_k gold and p_k predicted counts of class k; 0 when the denominator is 0 (as
        scikit-learn). F1 = 2·tp / (2·tp + fp + fn), 0 without any positive (as scikit-learn).

    Raises:
        ValueError: an empty matrix (no examples).
    """
    confusion = np.asarray(confusion, dtype=np.float64)
    total = confusion.sum()
    if total <= 0:
        raise ValueError("no examples: the confusion matrix is all zeros")
    gold = confusion.sum(axis=1)
    predicted = confusion.sum(axis=0)
    correct = np.trace(confusion)
    denominator = math.sqrt((total**2 - predicted @ predicted) * (total**2 - gold @ gold))
    mcc = (correct * total - predicted @ gold) / denominator if denominator else 0.0
    result = {"accuracy": 100.0 * correct / total, "mcc": 100.0 * mcc}
    if positive is not None:
        tp = confusion[positive, positive]
        f1_denominator = gold[positive] + predicted[positive]
        result["f1"] = 100.0 * 2 * tp / f1_denominator if f1_denominator else 0.0
    return result


def pearson_from_moments(n: float, sx: float, sy: float, sxx: float, syy: float,
                         sxy: float) -> float:
    """Pearson's r (in points) of n pairs (x, y) from the sums Σx, Σy, Σx², Σy², Σxy:
    (n·Σxy − Σx·Σy) / √((n·Σx² − (Σx)²)(n·Σy² − (Σy)²)); NaN when either variance is 0
    (as scipy). Sums should be float64: the formula subtracts numbers of size n²·x².
    """
    covariance = n * sxy - sx * sy
    variance = (n * sxx - sx * sx) * (n * syy - sy * sy)
    if variance <= 0:
        return math.nan
    return 100.0 * covariance / math.sqrt(variance)
