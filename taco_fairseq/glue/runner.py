"""Fine-tune pre-training checkpoints on GLUE: checkpoints × tasks × seeds × grid points, one
``fairseq-train`` process per run (the YAML recipes, through :mod:`.recipes`), then the dev
predictions and metrics of the selected (best dev) checkpoint of each run.

Each run writes into ``out_dir/<checkpoint>/<task>/<bs..._lr..._ep...>/seed<S>/``::

    train.log                fairseq's log (json records)
    checkpoint_best.pt       the fine-tuned model selected on the dev set (unless deleted)
    predictions_<COLUMN>.tsv  index, prediction, gold label of every dev example
    metrics.json             settings, dev metrics (from the predictions, scikit-learn/scipy),
                             fairseq's validation record of the selected checkpoint, timing

``metrics.json`` is written last: a run that has it is finished and is skipped when the runner
starts again (with the same settings; other settings in the same directory are an error); a
run directory without it is cleared and the run starts over.
"""

import json
import logging
import math
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import torch
from tqdm import tqdm

from ..analysis.training_log import parse_json_log
from .metrics import score_predictions
from .predict import FinetunedModel, write_predictions
from .databin import read_prep_info
from .pretrained import CheckpointInfo, PretrainedCheckpoint, check_compatible, inspect_checkpoint
from .recipes import Hyperparameters, finetune_args, selection_metric
from .tasks import GlueTask, get_task

logger = logging.getLogger(__name__)

RESULT_FILE = "metrics.json"
TRAIN_LOG = "train.log"
BEST_CHECKPOINT = "checkpoint_best.pt"
USER_DIR = Path(__file__).resolve().parents[1]  # the taco_fairseq package, for --user-dir


@dataclass(frozen=True)
class FinetuneRun:
    """One fine-tuning: a pre-training checkpoint, a task, a grid point and a seed."""

    checkpoint: PretrainedCheckpoint
    task: GlueTask
    hyper: Hyperparameters
    seed: int

    @property
    def relative_dir(self) -> Path:
        """``<checkpoint>/<task>/<grid point>/seed<S>`` under the output directory."""
        return Path(self.checkpoint.name, self.task.name, self.hyper.label, f"seed{self.seed}")

    @property
    def label(self) -> str:
        """``<checkpoint> <task> <grid point> seed<S>``, for progress messages."""
        return " ".join(self.relative_dir.parts)


@dataclass
class RunnerOptions:
    """How runs are carried out.

    Attributes:
        data_dir: the prepared GLUE directory (``taco-prepare-glue --destdir``), with
            one sub-directory per task.
        out_dir: where run directories go.
        pretraining_data: the checkpoints' pre-training data-bin, for the dictionary check
            (default: the one recorded in each checkpoint).
        fairseq_args: extra ``fairseq-train`` options for every run (``--fp16``,
            ``--max-update N`` if no ``max_updates``, ``--cpu``, distributed options, ...);
            part of a run's settings.
        cpu: predict on the CPU even with a GPU.
        keep_checkpoints: keep each run's ``checkpoint_best.pt`` (needed for test-set
            predictions); else it is deleted once the dev predictions are written.
        max_updates: task name → a cap on the updates of its runs (the learning-rate
            schedule ends at the cap); part of a capped run's settings.
        recipe: the recipes' model size, ``small`` or ``base`` (:data:`.recipes.SIZES`): all
            hyper-parameters but the run's grid point.

    Raises:
        ValueError: ``fairseq_args`` that :func:`check_fairseq_args` refuses.
    """

    data_dir: Path
    out_dir: Path
    pretraining_data: Optional[Path] = None
    fairseq_args: Sequence[str] = field(default_factory=tuple)
    cpu: bool = False
    keep_checkpoints: bool = True
    max_updates: Dict[str, int] = field(default_factory=dict)
    recipe: str = "small"

    def __post_init__(self):
        check_fairseq_args(self.max_updates, self.fairseq_args)


#: fairseq options that caps per task set themselves (:func:`.recipes.finetune_args`).
CAPPED_OPTIONS = ("--max-update", "--total-num-update")
#: fairseq options that the runner sets for every run (:func:`.recipes.finetune_args`): given
#: again among the fairseq options, they would win (fairseq keeps the last value) while the
#: run's directory and ``metrics.json`` name the runner's values.
RUN_OPTIONS = ("--seed", "--lr", "--batch-size", "--max-sentences", "--update-freq",
               "--max-epoch", "--save-dir", "--restore-file", "--user-dir", "--arch", "-a",
               "--max-positions", "--best-checkpoint-metric", "--maximize-best-checkpoint-metric")


def option_names(args: Sequence[str]) -> List[str]:
    """The option names among command-line ``args``: ``--name`` of ``--name`` and
    ``--name=value``, ``-a`` of ``-a`` and ``-aVALUE`` (fairseq's only short option)."""
    return ["-a" if arg.startswith("-a") else arg.split("=")[0]
            for arg in args if arg.startswith("-")]


def check_fairseq_args(max_updates: Dict[str, int], fairseq_args: Sequence[str]) -> None:
    """Refuse among ``fairseq_args`` an option of :data:`RUN_OPTIONS` and, with caps per task,
    fairseq's ``--max-update`` (it would stop runs without shortening their learning-rate
    schedules) or ``--total-num-update`` (the schedule's length).

    Raises:
        ValueError: naming the first such option.
    """
    names = option_names(fairseq_args)
    overriding = [name for name in names if name in RUN_OPTIONS]
    if overriding:
        raise ValueError(
            f"{overriding[0]} among the fairseq options would override the value the runner "
            "sets for each run (fairseq keeps the last one) while the run's directory, "
            "metrics.json and the validation record it reports follow the runner's; set seeds, "
            "batch sizes, learning rates and epochs with the command's own options (the "
            "checkpoint metric is the recipe's)")
    given = [name for name in names if name in CAPPED_OPTIONS]
    if max_updates and given:
        raise ValueError(
            f"caps per task (TASK=N) and fairseq's {given[0]} among the fairseq options both "
            "cap the updates; keep the caps per task only (they stop the runs at the cap and "
            "end the learning-rate schedule there)")


def check_precision_args(fairseq_args: Sequence[str]) -> None:
    """Refuse ``--fp16`` among ``fairseq_args`` on a machine without a CUDA GPU, before any run
    directory is made (fairseq would stop each run with it:
    :func:`taco_fairseq.fairseq_patches.check_precision`).

    Raises:
        ValueError: naming ``--fp16`` and the GLUE commands' ``--cpu``.
    """
    if "--fp16" in option_names(fairseq_args) and not torch.cuda.is_available():
        raise ValueError("-- --fp16: this machine has no CUDA GPU, which --fp16 needs "
                         "(fairseq's FP16Optimizer); leave it out and give --cpu to fine-tune "
                         "and predict on the CPU, in float32")


def plan_runs(
    checkpoints: Sequence[PretrainedCheckpoint],
    tasks: Sequence[GlueTask],
    seeds: Sequence[int],
    points: Sequence[Hyperparameters],
) -> List[FinetuneRun]:
    """Every combination, checkpoint-major.

    Raises:
        ValueError: an empty list, a seed or grid point given twice, or two checkpoints with
            one name.
    """
    for what, values in (("checkpoints", checkpoints), ("tasks", tasks), ("seeds", seeds),
                         ("grid points", points)):
        if not values:
            raise ValueError(f"no {what} to fine-tune")
    names = [c.name for c in checkpoints]
    if len(set(names)) != len(names):
        raise ValueError(f"checkpoint names must differ (give NAME=PATH): {names}")
    check_given_once("seeds", seeds)
    check_given_once("grid points", [h.label for h in points])
    return [FinetuneRun(c, t, h, s) for c in checkpoints for t in tasks for h in points
            for s in seeds]


def check_given_once(what: str, values: Sequence) -> None:
    """Refuse a value given twice among ``values`` (seeds, objectives, ...; ``what`` names
    them in the message).

    Raises:
        ValueError: naming ``what`` and the repeated values.
    """
    repeated = sorted(str(value) for value, count in Counter(values).items() if count > 1)
    if repeated:
        raise ValueError(f"{what} given twice: {', '.join(repeated)} (each would be run and "
                         "counted twice; give each once)")


def run_all(runs: Sequence[FinetuneRun], options: RunnerOptions, jobs: int = 1) -> List[dict]:
    """Carry out ``runs`` (finished ones are skipped), ``jobs`` at a time, showing progress.

    Every checkpoint is checked against every task's data before the first run starts.

    Returns:
        The results of :func:`finetune`, in the order of ``runs``.

    Raises:
        FileNotFoundError: a checkpoint or a prepared task directory is missing.
        ValueError: a checkpoint does not match the data's dictionary, or a run directory
            holds a finished run with other settings or of the checkpoint at another number of
            updates.
        RuntimeError: ``fairseq-train`` failed (the message ends with its log).
    """
    infos = check_checkpoints(runs, options)
    with tqdm(total=len(runs), desc="GLUE fine-tuning", unit="run") as progress:
        def one(run: FinetuneRun) -> dict:
            result = finetune(run, infos[run.checkpoint.path], options)
            progress.write(f"{run.label}: " + ", ".join(
                f"{column} {metric} {value:.2f}"
                for column, values in result["dev"].items() for metric, value in values.items()
            ) + (" (finished before)" if result.get("skipped") else ""))
            progress.update()
            return result

        if jobs <= 1:
            return [one(run) for run in runs]
        with ThreadPoolExecutor(jobs) as pool:
            return list(pool.map(one, runs))


def check_checkpoints(runs: Sequence[FinetuneRun], options: RunnerOptions
                      ) -> Dict[Path, CheckpointInfo]:
    """Every checkpoint of ``runs`` inspected and checked against the data of each of its
    tasks (:func:`.pretrained.check_compatible`): ``{checkpoint path: its info}``.

    Raises:
        FileNotFoundError, ValueError: as :func:`run_all`, before any run starts.
    """
    infos: Dict[Path, CheckpointInfo] = {}
    for path, task in dict.fromkeys((run.checkpoint.path, run.task.name) for run in runs):
        if path not in infos:
            infos[path] = inspect_checkpoint(path)
        check_compatible(path, infos[path], _task_dir(options, get_task(task)),
                         options.pretraining_data)
    return infos


def finetune(run: FinetuneRun, info: CheckpointInfo, options: RunnerOptions) -> dict:
    """One run (see the module doc); returns its ``metrics.json`` contents, with ``"run_dir"``
    and, when it had finished before, ``"skipped": True``. Errors: as :func:`run_all`."""
    run_dir = Path(options.out_dir) / run.relative_dir
    task_dir = _task_dir(options, run.task)
    settings = run_settings(run, options)
    done = run_dir / RESULT_FILE
    if done.is_file():
        result = json.loads(done.read_text(encoding="utf-8"))
        if result["settings"] != settings:
            raise ValueError(f"{run_dir} holds a finished run with other settings "
                             f"({settings_changes(result['settings'], settings)}); use another "
                             "output directory or remove it")
        if result["pretraining_updates"] != info.num_updates:  # e.g. a checkpoint_last.pt
            raise ValueError(
                f"{run_dir} holds a finished run of {run.checkpoint.path} when it had "
                f"{result['pretraining_updates']} pre-training updates; it has "
                f"{info.num_updates} now. Use another output directory or remove it, or give "
                "the numbered checkpoint (checkpoint_<epoch>_<updates>.pt) it was"
            )
        return dict(result, run_dir=str(run_dir), skipped=True)
    if run_dir.exists():
        shutil.rmtree(run_dir)  # unfinished: start over
    run_dir.mkdir(parents=True)

    start = time.perf_counter()
    args = fairseq_train_args(run, info, options)
    log = run_dir / TRAIN_LOG
    with open(log, "w", encoding="utf-8") as f:
        returncode = subprocess.run(
            [sys.executable, "-m", "fairseq_cli.train", *args], stdout=f,
            stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONUNBUFFERED="1"),
        ).returncode
    if returncode:
        tail = "".join(log.read_text(encoding="utf-8", errors="replace").splitlines(True)[-30:])
        raise RuntimeError(f"fine-tuning {run.label} failed (exit code {returncode}); "
                           f"end of {log}:\n{tail}")
    selected = selected_validation(log, selection_metric(run.task, options.recipe))

    model = FinetunedModel(run_dir / BEST_CHECKPOINT, task_dir, cpu=options.cpu)
    dev, files = {}, {}
    for eval_set in run.task.eval_sets:
        predictions = model.predict(eval_set.split)
        files[eval_set.column] = f"predictions_{eval_set.column}.tsv"
        write_predictions(run_dir / files[eval_set.column], predictions)
        dev[eval_set.column] = score_predictions(run.task, predictions.predicted,
                                                 predictions.gold)
    del model
    if not options.keep_checkpoints:
        (run_dir / BEST_CHECKPOINT).unlink()
    result = {
        "settings": settings,
        "pretraining_updates": info.num_updates,
        "dev": dev,
        "fairseq_valid": selected,
        "predictions": files,
        "command": ["fairseq-train", *args],
        "seconds": round(time.perf_counter() - start, 1),
    }
    partial = done.with_suffix(".partial")
    partial.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    partial.replace(done)
    return dict(result, run_dir=str(run_dir))


#: Settings that :func:`run_settings` leaves out at these values.
UNRECORDED_SETTINGS = {"recipe": "small"}


def settings_changes(before: dict, now: dict) -> str:
    """``key: BEFORE then, NOW now; ...`` for every key whose value differs (sorted), a
    setting left out at its :data:`UNRECORDED_SETTINGS` value named with it."""
    before, now = ({**UNRECORDED_SETTINGS, **settings} for settings in (before, now))
    return "; ".join(f"{key}: {before.get(key)!r} then, {now.get(key)!r} now"
                     for key in sorted(before.keys() | now.keys())
                     if before.get(key) != now.get(key))


def run_settings(run: FinetuneRun, options: RunnerOptions) -> dict:
    """The settings of ``run`` that ``metrics.json`` records, as JSON values; a finished run is
    reused only with the same ones. The recipe is recorded when it is not ``small`` (runs made
    before it was recorded are ``small`` runs)."""
    settings = json.loads(json.dumps({
        "checkpoint": run.checkpoint.name,
        "checkpoint_path": str(run.checkpoint.path.resolve()),
        "task": run.task.name,
        "data": str(_task_dir(options, run.task).resolve()),
        "batch_size": run.hyper.batch_size,
        "lr": run.hyper.lr,
        "epochs": run.hyper.epochs,
        "seed": run.seed,
        "fairseq_args": list(options.fairseq_args),
    }))
    if run.task.name in options.max_updates:
        settings["max_updates"] = options.max_updates[run.task.name]
    if options.recipe != UNRECORDED_SETTINGS["recipe"]:
        settings["recipe"] = options.recipe
    return settings


def fairseq_train_args(run: FinetuneRun, info: CheckpointInfo, options: RunnerOptions) -> list:
    """The ``fairseq-train`` arguments of ``run`` (:func:`.recipes.finetune_args`), for the
    pre-training checkpoint described by ``info``."""
    task_dir = _task_dir(options, run.task)
    return finetune_args(
        run.task, task_dir, run.checkpoint.path, arch=info.arch,
        max_positions=info.max_positions,
        train_rows=read_prep_info(task_dir)["splits"]["train"]["rows"], hyper=run.hyper,
        seed=run.seed, save_dir=Path(options.out_dir) / run.relative_dir, user_dir=USER_DIR,
        extra=options.fairseq_args, max_updates=options.max_updates.get(run.task.name),
        size=options.recipe,
    )


def selected_validation(log: Path, metric: str) -> dict:
    """fairseq's validation record of the checkpoint it saved as ``checkpoint_best.pt``.

    fairseq replaces the best checkpoint whenever ``metric`` is at least as good as the best
    so far (``--maximize-best-checkpoint-metric``), so that is the *last* record with the
    highest value.

    Raises:
        RuntimeError: the log has no validation record with ``valid_<metric>``.
    """
    key = f"valid_{metric}"
    with open(log, encoding="utf-8") as f:
        records = [r for r in parse_json_log(f) if r["kind"] == "valid" and key in r]
    values = [r[key] for r in records if isinstance(r[key], float) and not math.isnan(r[key])]
    if not values:
        raise RuntimeError(f"{log} has no validation record with {key}")
    best = max(values)
    record = [r for r in records if r[key] == best][-1]
    # fairseq also logs its GLUE metrics' prediction meters, as empty lists
    return {k: v for k, v in record.items() if k != "kind" and not isinstance(v, list)}


def _task_dir(options: RunnerOptions, task: GlueTask) -> Path:
    task_dir = Path(options.data_dir) / task.name
    read_prep_info(task_dir)  # raises FileNotFoundError with the fix
    return task_dir
