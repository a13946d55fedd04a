"""The fine-tuning recipe: hyper-parameters and the ``fairseq-train`` command line of one run.

The structure is fairseq's RoBERTa GLUE recipe (task and criterion ``sentence_prediction``,
``--init-token 0 --separator-token 2``, ``--restore-file`` with ``--reset-optimizer
--reset-dataloader --reset-meters``, a classification head, or ``--regression-target
--num-classes 1`` for STS-B); the criterion is its data-parallel-safe variant
``sentence_prediction_summable``. Hyper-parameters follow the paper (§4: grid batch size
{16, 32, 64, 128} × learning rate {1e-5, 2e-5, 3e-5, 5e-5} × epochs {4, 6}, Adam) and, for a
single run and what the paper leaves open, the authors' fine-tuning scripts
(``finetune_small.sh``/``finetune_base.sh`` of the official code: batch 32, lr 5e-5 and 4
epochs for BERT-small, lr 3e-5 and 6 epochs for BERT-base, 100 warm-up steps then linear
decay, and the HuggingFace Trainer defaults: AdamW with betas (0.9, 0.999), eps 1e-8, no
weight decay, gradient clipping at 1.0). The paper's per-task values for small models (its
Table 7) are not in the text; these defaults are the same for every task.

``examples/taco/config/finetuning/*.yaml`` hold the same recipe as hydra configs;
``tests/test_glue_recipes.py`` checks that they agree with this module.
"""

import itertools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from .tasks import GlueTask


@dataclass(frozen=True)
class Hyperparameters:
    """One point of the grid: batch size (sentences per update), learning rate, epochs."""

    batch_size: int
    lr: float
    epochs: int

    @property
    def label(self) -> str:
        """A directory name, e.g. ``bs32_lr5e-05_ep4``."""
        return f"bs{self.batch_size}_lr{self.lr:g}_ep{self.epochs}"


#: The paper's fine-tuning grid (§4).
GRID = {"batch_size": (16, 32, 64, 128), "lr": (1e-5, 2e-5, 3e-5, 5e-5), "epochs": (4, 6)}
#: Single-run defaults of the official fine-tuning scripts, per model size.
DEFAULTS: Dict[str, Hyperparameters] = {
    "small": Hyperparameters(batch_size=32, lr=5e-5, epochs=4),
    "base": Hyperparameters(batch_size=32, lr=3e-5, epochs=6),
}
#: fairseq architecture of each model size (the paper's BERT-small and BERT-base).
ARCHITECTURES = {"small": "roberta_small", "base": "roberta_base"}
WARMUP_UPDATES = 100
#: Options fixed by the recipe (HuggingFace Trainer defaults of the official code).
FIXED_OPTIONS = (
    "--optimizer", "adam", "--adam-betas", "(0.9,0.999)", "--adam-eps", "1e-08",
    "--weight-decay", "0.0", "--clip-norm", "1.0", "--lr-scheduler", "polynomial_decay",
    "--dropout", "0.1", "--attention-dropout", "0.1",
)
#: The criterion's report flag per selection metric (fairseq's sentence_prediction options).
REPORT_FLAGS = {"mcc": "--report-mcc", "f1": "--report-acc-and-f1",
                "pearson": "--report-pearson-and-spearman"}


def grid() -> List[Hyperparameters]:
    """The 32 points of :data:`GRID`."""
    return [Hyperparameters(b, lr, e) for b, lr, e in itertools.product(*GRID.values())]


def total_updates(train_rows: int, batch_size: int, epochs: int) -> int:
    """Updates of a run on one GPU: ``epochs × ⌈train_rows / batch_size⌉``."""
    return epochs * math.ceil(train_rows / batch_size)


def warmup_updates(total: int) -> int:
    """:data:`WARMUP_UPDATES`, at most the run's ``total`` updates."""
    return min(WARMUP_UPDATES, total)


def finetune_args(
    task: GlueTask,
    data_dir: Path,
    checkpoint: Path,
    *,
    arch: str,
    max_positions: int,
    train_rows: int,
    hyper: Hyperparameters,
    seed: int,
    save_dir: Path,
    user_dir: Path,
    extra: Sequence[str] = (),
    max_updates: Optional[int] = None,
) -> List[str]:
    """The ``fairseq-train`` arguments of one fine-tuning run.

    Args:
        task: the GLUE task; ``data_dir`` its prepared directory (``scripts/prepare_glue.py``).
        checkpoint: the pre-training checkpoint (``--restore-file``); must exist (fairseq
            starts from random weights otherwise; see :mod:`.pretrained`).
        arch, max_positions: the checkpoint's architecture and positions (inputs longer than
            ``max_positions`` tokens are truncated at the end).
        train_rows: training examples, for the length of the learning-rate schedule.
        hyper: batch size, learning rate, epochs.
        seed: fairseq's ``--seed``.
        save_dir: where the fine-tuned ``checkpoint_best.pt`` goes (no last/epoch ones).
        user_dir: the ``taco_fairseq`` package directory (``--user-dir``).
        extra: further fairseq options, appended last (e.g. ``--fp16``).
        max_updates: a cap on the run's updates (e.g. for SST-2 on a CPU); the learning-rate
            schedule then decays to 0 at the cap.
    """
    total = total_updates(train_rows, hyper.batch_size, hyper.epochs)
    if max_updates is not None:
        total = min(total, max_updates)
    args = [
        str(data_dir), "--user-dir", str(user_dir),
        "--task", "sentence_prediction", "--criterion", "sentence_prediction_summable",
        "--num-classes", str(task.num_classes), "--init-token", "0", "--separator-token", "2",
        "--arch", arch, "--max-positions", str(max_positions), "--shorten-method", "truncate",
        "--restore-file", str(checkpoint),
        "--reset-optimizer", "--reset-dataloader", "--reset-meters",
        # every worker reads the checkpoint itself: fairseq's broadcast of rank 0's copy
        # pickles omegaconf objects that torch's weights-only unpickler refuses
        "--load-checkpoint-on-all-dp-ranks",
        "--batch-size", str(hyper.batch_size), "--required-batch-size-multiple", "1",
        "--max-epoch", str(hyper.epochs), "--lr", f"{hyper.lr:g}",
        "--warmup-updates", str(warmup_updates(total)), "--total-num-update", str(total),
        *FIXED_OPTIONS,
        "--best-checkpoint-metric", task.selection_metric, "--maximize-best-checkpoint-metric",
        "--valid-subset", ",".join(e.split for e in task.eval_sets),
        "--no-epoch-checkpoints", "--no-last-checkpoints", "--find-unused-parameters",
        "--seed", str(seed), "--save-dir", str(save_dir), "--log-format", "json",
    ]
    if max_updates is not None:
        args += ["--max-update", str(total)]
    if task.regression:
        args.append("--regression-target")
    if task.selection_metric in REPORT_FLAGS:
        args.append(REPORT_FLAGS[task.selection_metric])
    return args + list(extra)
