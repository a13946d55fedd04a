"""Test-set predictions in GLUE's submission format from the best dev run of each task.

For one pre-training checkpoint, the run of each task with the highest dev score in the
paper's metric (MNLI: on MNLI-m) is selected (the paper: "we select the best model on the
validation set"); its ``checkpoint_best.pt`` predicts the task's test split(s), written as
GLUE's ``<COLUMN>.tsv`` files (``CoLA.tsv``, ``MNLI-m.tsv``, ``MNLI-mm.tsv``, ``STS-B.tsv``,
...): a header ``index<TAB>prediction``, then GLUE's index and the predicted label (the label
as in the task's train file; STS-B: the predicted score). A complete GLUE submission also needs
``WNLI.tsv`` and ``AX.tsv``, which the paper's evaluation does not cover.
"""

import logging
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from .predict import FinetunedModel, write_predictions
from .runner import BEST_CHECKPOINT
from .tasks import get_task

logger = logging.getLogger(__name__)


def best_runs(results: Sequence[dict], checkpoint: Optional[str] = None) -> Dict[str, dict]:
    """task name → the result (from ``collect_results``) of its best dev run for ``checkpoint``.

    Raises:
        ValueError: ``checkpoint`` is None but the results hold several checkpoints, or no
            result belongs to ``checkpoint``.
    """
    names = list(dict.fromkeys(r["settings"]["checkpoint"] for r in results))
    if checkpoint is None:
        if len(names) != 1:
            raise ValueError(f"results of several checkpoints ({names}); choose one with "
                             "--checkpoint")
        checkpoint = names[0]
    mine = [r for r in results if r["settings"]["checkpoint"] == checkpoint]
    if not mine:
        raise ValueError(f"no results for checkpoint {checkpoint!r}; have {names}")
    best: Dict[str, Tuple[float, dict]] = {}
    for result in mine:
        task = get_task(result["settings"]["task"])
        score = result["dev"][task.primary_column][task.paper_metric]
        if task.name not in best or score > best[task.name][0]:
            best[task.name] = (score, result)
    return {name: result for name, (_, result) in best.items()}


def write_submission(best: Dict[str, dict], out_dir: Path, cpu: bool = False) -> List[Path]:
    """Predict the test split(s) of every task in ``best`` (from :func:`best_runs`) with its
    run's ``checkpoint_best.pt`` and write the submission files into ``out_dir``.

    Returns:
        The files written.

    Raises:
        FileNotFoundError: a run's checkpoint was deleted (``--delete-checkpoints``) or a
            task's test split was not prepared.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, result in best.items():
        task = get_task(name)
        s = result["settings"]
        run_dir = Path(result["run_dir"])
        model = FinetunedModel(run_dir / BEST_CHECKPOINT, Path(s["data"]), cpu=cpu)
        for eval_set in task.eval_sets:
            if not (Path(s["data"]) / "input0" / f"{eval_set.test_split}.idx").is_file():
                raise FileNotFoundError(
                    f"{name} has no prepared {eval_set.test_split} split in {s['data']} (its "
                    "test file was missing at preparation)"
                )
            predictions = model.predict(eval_set.test_split)
            path = out_dir / eval_set.submission_file
            write_predictions(path, predictions)
            logger.info("%s: %d test predictions of %s", path, len(predictions.indices), run_dir)
            written.append(path)
    return written
