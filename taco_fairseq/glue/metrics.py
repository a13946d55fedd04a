"""GLUE metrics of a run's saved dev predictions, in points (0-100), with scikit-learn and
scipy (accuracy, binary F1 of the positive class, Matthews correlation, Pearson and Spearman
correlation), as GLUE defines them. During fine-tuning fairseq derives the same metrics,
rounded to 0.1 points, from the validation predictions (``sentence_prediction_summable``).
"""

from typing import Dict, Sequence

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
