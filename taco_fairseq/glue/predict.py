"""Predictions of a fine-tuned GLUE checkpoint on a prepared split, and their TSV files."""

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Union

import torch
from fairseq import checkpoint_utils, utils
from tqdm import tqdm

from .. import register
from ..metadata import load_lazily
from .databin import LABEL_DIR, read_indices
from .pretrained import check_glue_data

Value = Union[str, float]


@dataclass
class Predictions:
    """Per example of a split, in dataset (= TSV row) order.

    Attributes:
        indices: GLUE's example index (dev: the 0-based TSV row).
        predicted: predicted label (a string of the label dictionary) or score (STS-B).
        gold: the gold label or score (None for test splits).
    """

    indices: List[str]
    predicted: List[Value]
    gold: Optional[List[Value]]


class FinetunedModel:
    """A fine-tuned ``sentence_prediction`` checkpoint, ready to predict prepared splits."""

    def __init__(self, checkpoint: Path, data_dir: Path, *, cpu: bool = False):
        """Load ``checkpoint`` (e.g. a run's ``checkpoint_best.pt``) with the prepared GLUE
        task directory ``data_dir``, on the GPU when there is one and not ``cpu``.

        Raises:
            FileNotFoundError: the checkpoint does not exist.
            ValueError: ``data_dir`` was encoded with another dictionary or SentencePiece
                model than the checkpoint was trained with (:func:`.pretrained.check_glue_data`).
        """
        if not Path(checkpoint).is_file():
            raise FileNotFoundError(f"fine-tuned checkpoint {checkpoint} not found (runs made with "
                                    "--delete-checkpoints keep none)")
        check_glue_data(checkpoint, load_lazily(checkpoint), data_dir)
        register()  # its criterion and architecture are the plugin's
        models, cfg, task = checkpoint_utils.load_model_ensemble_and_task(
            [str(checkpoint)], arg_overrides={"data": str(data_dir)}
        )
        self.model, self.cfg, self.task = models[0], cfg, task
        self.data_dir = Path(data_dir)
        self.cuda = torch.cuda.is_available() and not cpu
        if self.cuda:
            self.model.cuda()
        self.model.eval()

    def predict(self, split: str) -> Predictions:
        """Predict every example of ``split`` in batches as fairseq's validation forms them
        (``--batch-size-valid``/``--max-tokens-valid`` of the run)."""
        task, cfg = self.task, self.cfg
        task.load_dataset(split)
        dataset = task.dataset(split)
        batches = task.get_batch_iterator(
            dataset=dataset,
            max_tokens=cfg.dataset.max_tokens_valid,
            max_sentences=cfg.dataset.batch_size_valid,
            max_positions=utils.resolve_max_positions(task.max_positions(),
                                                      self.model.max_positions()),
            required_batch_size_multiple=cfg.dataset.required_batch_size_multiple,
            seed=cfg.common.seed,
        ).next_epoch_itr(shuffle=False)
        regression = cfg.criterion.regression_target
        predicted: List[Value] = [None] * len(dataset)
        gold: List[Value] = [None] * len(dataset)
        with torch.no_grad():
            for sample in tqdm(batches, desc=f"predicting {split}", unit=" batches",
                               leave=False):
                if self.cuda:
                    sample = utils.move_to_cuda(sample)
                logits, _ = self.model(
                    **sample["net_input"], features_only=True,
                    classification_head_name=cfg.criterion.classification_head_name,
                )
                ids = sample["id"].tolist()
                if regression:
                    values = logits.view(-1).float().tolist()
                else:
                    values = self._labels(logits.argmax(dim=-1))
                    if "target" in sample:
                        for i, label in zip(ids, self._labels(sample["target"].view(-1))):
                            gold[i] = label
                for i, value in zip(ids, values):
                    predicted[i] = value
        if regression:
            gold = self._scores(split)
        return Predictions(read_indices(self.data_dir, split), predicted,
                           None if gold and gold[0] is None else gold)

    def _labels(self, classes: torch.Tensor) -> List[str]:
        labels = self.task.label_dictionary
        return [labels[c + labels.nspecial] for c in classes.tolist()]

    def _scores(self, split: str) -> Optional[List[float]]:
        """STS-B's gold scores as written in the TSV file (the model sees them as float32)."""
        path = self.data_dir / LABEL_DIR / f"{split}.label"
        if not path.is_file():
            return None
        return [float(line) for line in path.read_text(encoding="utf-8").split()]


def write_predictions(path: Path, predictions: Predictions) -> None:
    """One line per example after a header line: ``index<TAB>prediction<TAB>gold``, or
    ``index<TAB>prediction`` without gold labels (GLUE's submission format). Scores are
    written as Python's shortest exact float text."""
    columns = [predictions.indices, predictions.predicted]
    if predictions.gold is not None:
        columns.append(predictions.gold)
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f, delimiter="\t", lineterminator="\n", quoting=csv.QUOTE_NONE)
        writer.writerow(["index", "prediction", "gold"][:len(columns)])
        for row in zip(*columns):
            writer.writerow([repr(v) if isinstance(v, float) else v for v in row])


def read_predictions(path: Path, regression: bool) -> Predictions:
    """Read a file of :func:`write_predictions` (scores as floats when ``regression``)."""
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]
    convert = float if regression else str
    return Predictions([r[0] for r in rows], [convert(r[1]) for r in rows],
                       [convert(r[2]) for r in rows])
