"""Pre-training runs of a comparison: one ``fairseq-train`` per objective and seed, resumable.

Every objective of a comparison gets the same data-bin, seed, architecture, batches, masks,
learning-rate schedule and initialization: fairseq seeds the model's initialization with
``--seed``, every update with ``seed + update`` (dropout), and ``MaskTokensDataset`` each
sequence's mask with ``(seed, epoch, index)``, so only the options of the objective's recipe
(:mod:`.objectives`) differ between two runs of one seed.

A run lives in ``OUT/pretrain/<objective>-seed<S>/``::

    train.log                        fairseq's json log (appended to when the run resumes)
    checkpoints/checkpoint_<e>_<u>.pt  the checkpoints at --checkpoint-updates
    checkpoints/checkpoint_last.pt   what an interrupted run resumes from
    initialization.pt                the model before any update (:func:`save_initialization`)

Checkpoints are saved every ``gcd(checkpoint updates)`` updates (fairseq's
``--save-interval-updates``, with a validation each time); those that are not requested are
deleted when the run has finished. A run is continued, or reused when finished, only with the
options it was started with (:func:`check_same_options`).

A *branch* (``--branch-update B``) is a run that does not start from scratch: objective
``<O>-branch`` continues the baseline's run of its seed from the baseline's checkpoint at B
updates, with the baseline's optimizer state, learning-rate schedule and data position, on
objective O's recipe (fairseq's ``--continue-once`` with ``--tc-allow-changed-objective``):
TACO taking over from masked LM after the plateau (docs/results/promise-study/PLAN.md). It
keeps the checkpoints after B and has no initialization of its own.
"""

import fcntl
import math
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import reduce
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from ..analysis.checkpoints import interval_checkpoints
from ..analysis.training_log import parse_json_log
from ..glue.runner import option_names
from .objectives import RECIPES_DIR, objective_args, shared_args

USER_DIR = Path(__file__).resolve().parents[1]  # the taco_fairseq package, for --user-dir
TRAIN_LOG = "train.log"
LOCK_FILE = "pretrain.lock"
INITIALIZATION = "initialization.pt"
_COMMAND = "# fairseq-train "  # how train.log records each command that trained the run
#: ``<objective><BRANCH_SUFFIX>``: the branch of ``objective`` (module doc).
BRANCH_SUFFIX = "-branch"
#: fairseq options that :func:`fairseq_train_args` sets from the comparison's own options (the
#: taco-compare option to use instead): after ``--`` they would win (fairseq keeps the last
#: value) while the run's name, the options check and the report name the comparison's.
STUDY_OPTIONS = {
    "--seed": "--pretrain-seeds", "--save-dir": "--out", "--arch": "--arch", "-a": "--arch",
    "--max-update": "--max-update", "--total-num-update": "--max-update", "--lr": "--lr",
    "--batch-size": "--batch-size", "--max-sentences": "--batch-size",
    "--update-freq": "--update-freq", "--warmup-updates": "--warmup-updates",
    "--tokens-per-sample": "--tokens-per-sample", "--max-positions": "--tokens-per-sample",
    "--save-interval-updates": "--checkpoint-updates",
    "--keep-interval-updates": "--checkpoint-updates",
    "--continue-once": "--branch-update", "--restore-file": "--branch-update",
    "--tc-allow-changed-objective": "--branch-update",
}


def study_field(option: str, *, where: bool = False, **kwargs):
    """A field of a study's options (:class:`PretrainSettings`, :class:`.study.StudyOptions`)
    that ``OUT/study.json`` records (:mod:`.record`), set by taco-compare's ``option`` (``--``:
    the ``fairseq-train`` options after it), which names it to the user.

    Args:
        where: it says where the study's files lie or how its runs ran (a path, ``--cpu``), not
            what the study is: a ``--report-only`` call may give it otherwise than the record.
        kwargs: as :func:`dataclasses.field` (``default``).
    """
    return field(metadata={"option": option, "where": where}, **kwargs)


@dataclass(frozen=True)
class PretrainRun:
    """One pre-training run: an objective and a seed. The objective is a recipe name, or
    ``<recipe>-branch`` for a branch (module doc), the name its rows carry."""

    objective: str
    seed: int

    @property
    def name(self) -> str:
        """``<objective>-seed<S>``, the run's directory name."""
        return f"{self.objective}-seed{self.seed}"

    @property
    def is_branch(self) -> bool:
        """Whether the run continues the baseline's run (module doc) instead of starting anew."""
        return self.objective.endswith(BRANCH_SUFFIX)

    @property
    def recipe(self) -> str:
        """The recipe of the objective (:mod:`.objectives`): the objective without
        :data:`BRANCH_SUFFIX`."""
        return self.objective[: -len(BRANCH_SUFFIX)] if self.is_branch else self.objective


@dataclass(frozen=True)
class PretrainSettings:
    """What every run of a comparison shares.

    Attributes:
        data: the pre-training data-bin.
        arch: fairseq architecture (``roberta_tiny``, ``roberta_small``, ...).
        max_update: updates of every run; the learning rate decays linearly to 0 at it.
        checkpoint_updates: the update counts whose checkpoints are kept and fine-tuned.
        objective_max_update: (objective, N) pairs: those objectives' runs stop at N updates
            on the same schedule (fairseq's ``--max-update N --total-num-update
            max_update``: the learning rate at each update is the other objectives'), the
            paper's comparison of one objective's earlier checkpoints with the other's later
            ones (§4.2); N must be among ``checkpoint_updates``.
        tokens_per_sample, batch_size, update_freq: sequence length (tokens) and sequences
            per update (``batch_size × update_freq`` per worker).
        lr: peak learning rate; ``warmup_updates`` its linear warm-up.
        cpu: train on the CPU (``--cpu``).
        extra: further ``fairseq-train`` options, appended last, none of
            :data:`STUDY_OPTIONS`.
        branch: (baseline objective, B): each other objective also continues the baseline's
            run of every seed from its checkpoint at B updates, as ``<objective>-branch``
            (module doc); B must be among ``checkpoint_updates``, below every objective's
            stop. None: no branch.
        recipes_dir: where the objectives' recipes lie (:mod:`.objectives`; not recorded).

    Raises:
        ValueError: bad checkpoint updates or warm-up, or an option of :data:`STUDY_OPTIONS`
            in ``extra``.
    """

    data: Path = study_field("--data", where=True)
    arch: str = study_field("--arch")
    max_update: int = study_field("--max-update")
    checkpoint_updates: Tuple[int, ...] = study_field("--checkpoint-updates")
    objective_max_update: Tuple[Tuple[str, int], ...] = study_field("--objective-max-update",
                                                                    default=())
    tokens_per_sample: int = study_field("--tokens-per-sample", default=128)
    batch_size: int = study_field("--batch-size", default=32)
    update_freq: int = study_field("--update-freq", default=1)
    lr: float = study_field("--lr", default=5e-4)
    warmup_updates: int = study_field("--warmup-updates", default=1000)
    cpu: bool = study_field("--cpu", where=True, default=False)
    extra: Sequence[str] = study_field("--", default=())
    branch: Optional[Tuple[str, int]] = study_field("--branch-update", default=None)
    recipes_dir: Path = field(default=RECIPES_DIR, metadata={"recorded": False})

    def __post_init__(self):
        updates = self.checkpoint_updates
        if not updates or min(updates) < 1:
            raise ValueError(f"--checkpoint-updates must be positive update counts, got "
                             f"{list(updates)}")
        if max(updates) > self.max_update:
            raise ValueError(f"--checkpoint-updates {max(updates)} is beyond --max-update "
                             f"{self.max_update}")
        if self.warmup_updates >= self.max_update:
            raise ValueError(f"--warmup-updates {self.warmup_updates} must be below "
                             f"--max-update {self.max_update}")
        for objective, stop in self.objective_max_update:
            if stop not in updates:
                raise ValueError(f"--objective-max-update {objective}={stop}: {stop} is not "
                                 f"among --checkpoint-updates {' '.join(map(str, updates))}; "
                                 "add it (its last checkpoint)")
            if stop >= self.max_update:
                raise ValueError(f"--objective-max-update {objective}={stop}: not below "
                                 f"--max-update {self.max_update} (without it the run stops "
                                 "there)")
        if self.branch is not None:
            baseline, start = self.branch
            if start not in updates:
                raise ValueError(f"--branch-update {start} is not among --checkpoint-updates "
                                 f"{' '.join(map(str, updates))}; add it (the baseline's "
                                 "checkpoint the branches start from)")
            if start >= self.max_update_of(baseline):
                raise ValueError(f"--branch-update {start}: the baseline {baseline} stops at "
                                 f"{self.max_update_of(baseline)}; give an update before it")
            for objective, stop in self.objective_max_update:
                if objective.endswith(BRANCH_SUFFIX) and stop <= start:
                    raise ValueError(f"--objective-max-update {objective}={stop}: not after "
                                     f"--branch-update {start}, where the branch starts")
        given = [name for name in option_names(self.extra) if name in STUDY_OPTIONS]
        if given:
            raise ValueError(f"{given[0]} after -- would override what taco-compare sets for "
                             "every pre-training (fairseq keeps the last value); use "
                             f"taco-compare's {STUDY_OPTIONS[given[0]]}")

    @property
    def save_interval(self) -> int:
        """``--save-interval-updates``: the greatest common divisor of the checkpoint updates."""
        return reduce(math.gcd, self.checkpoint_updates)

    def max_update_of(self, objective: str) -> int:
        """Where ``objective``'s runs stop: its ``objective_max_update``, else ``max_update``."""
        return dict(self.objective_max_update).get(objective, self.max_update)

    def checkpoint_updates_of(self, objective: str) -> Tuple[int, ...]:
        """The ``checkpoint_updates`` that ``objective``'s runs reach (ascending): a branch's
        after its start (module doc)."""
        stop = self.max_update_of(objective)
        start = self.branch[1] if objective.endswith(BRANCH_SUFFIX) and self.branch else 0
        return tuple(u for u in self.checkpoint_updates if start < u <= stop)

    def branch_source(self, run: PretrainRun) -> Tuple[PretrainRun, int]:
        """The baseline's run and update count a branch ``run`` continues.

        Raises:
            ValueError: ``run`` is no branch, or the settings have no ``branch``.
        """
        if not run.is_branch or self.branch is None:
            raise ValueError(f"{run.name} is not a branch of this comparison (--branch-update)")
        baseline, start = self.branch
        return PretrainRun(baseline, run.seed), start


def arms(objectives: Sequence[str], branched: bool) -> List[str]:
    """The objectives of a comparison's rows: ``objectives`` (the first is the baseline),
    then, when ``branched`` (``--branch-update``), the branch of each other one
    (``<objective>-branch``, module doc)."""
    return [*objectives, *([o + BRANCH_SUFFIX for o in objectives[1:]] if branched else [])]


def pretrain_args(run: PretrainRun, settings: PretrainSettings, run_dir: Path) -> List[str]:
    """The ``fairseq-train`` arguments of ``run``: the shared recipe's optimizer and schedule,
    the objective's recipe, the comparison's scale, then ``settings.extra``.

    A branch (module doc) gets ``--continue-once`` the baseline's checkpoint at its start
    (``checkpoint_<e>_<B>.pt``, epoch ``*`` while it does not exist yet) and
    ``--tc-allow-changed-objective``.

    Raises:
        ValueError: the objective has no recipe.
    """
    s = settings
    branch = []
    if run.is_branch:
        branch = ["--continue-once", str(branch_checkpoint(run, s, Path(run_dir).parent)),
                  "--tc-allow-changed-objective"]
    return [
        str(s.data), "--user-dir", str(USER_DIR), "--arch", s.arch,
        *shared_args("bert_small", s.recipes_dir),
        *objective_args(run.recipe, s.recipes_dir),
        "--tokens-per-sample", str(s.tokens_per_sample), "--max-positions",
        str(s.tokens_per_sample), "--batch-size", str(s.batch_size),
        "--update-freq", str(s.update_freq), "--lr", f"{s.lr:g}",
        "--warmup-updates", str(s.warmup_updates), "--total-num-update", str(s.max_update),
        "--max-update", str(s.max_update_of(run.objective)), "--seed", str(run.seed),
        "--save-dir", str(run_dir / "checkpoints"), "--no-epoch-checkpoints",
        "--save-interval-updates", str(s.save_interval), "--keep-interval-updates", "-1",
        "--validate-interval-updates", str(s.save_interval),
        "--log-format", "json", "--log-interval", "100",
        *branch, *(["--cpu"] if s.cpu else []), *s.extra,
    ]


def branch_checkpoint(run: PretrainRun, settings: PretrainSettings, pretrain_dir: Path) -> Path:
    """The baseline's checkpoint that the branch ``run`` starts from, under ``pretrain_dir``
    (``OUT/pretrain``): ``checkpoint_<e>_<B>.pt``, with ``*`` for the epoch while it has not
    been saved.

    Raises:
        ValueError: as :meth:`PretrainSettings.branch_source`.
    """
    source, start = settings.branch_source(run)
    run_dir = Path(pretrain_dir) / source.name
    return checkpoints(run_dir).get(start, run_dir / "checkpoints" / f"checkpoint_*_{start}.pt")


def checkpoints(run_dir: Path) -> Dict[int, Path]:
    """updates → ``checkpoint_<epoch>_<updates>.pt`` of a run (empty when there is none)."""
    return dict(interval_checkpoints(Path(run_dir) / "checkpoints"))


def is_finished(run: PretrainRun, settings: PretrainSettings, run_dir: Path) -> bool:
    """Whether the run reached its last update and has every checkpoint it is to keep."""
    log = Path(run_dir) / TRAIN_LOG
    have = checkpoints(run_dir)
    return (log.is_file() and "done training" in log.read_text(encoding="utf-8", errors="replace")
            and all(u in have for u in settings.checkpoint_updates_of(run.objective)))


def pretrain(run: PretrainRun, settings: PretrainSettings, out_dir: Path,
             env: Optional[dict] = None, source_running=None) -> Path:
    """Carry out ``run`` under ``out_dir/pretrain`` (module doc), continuing from its
    ``checkpoint_last.pt`` when it was interrupted; a finished run is left alone. A branch
    first waits for the baseline's checkpoint it starts from while ``source_running()`` says
    that the baseline's run goes on (looked at every :data:`BRANCH_POLL_SECONDS`).

    Returns:
        The run's directory.

    Raises:
        RuntimeError: ``fairseq-train`` failed (the message ends with its log), it ended
            without a requested checkpoint, another process is training the run, or a
            branch's baseline checkpoint does not exist (and its run has stopped).
        ValueError: the run was started with other options (:func:`check_same_options`).
    """
    run_dir = Path(out_dir) / "pretrain" / run.name
    if run.is_branch and not is_finished(run, settings, run_dir):
        _wait_for_branch_start(run, settings, run_dir.parent, source_running)
    check_same_options(run_dir, pretrain_args(run, settings, run_dir))
    if is_finished(run, settings, run_dir):
        return run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    with _exclusive(run_dir / LOCK_FILE):
        _train(run, settings, run_dir, env)
    return run_dir


#: Seconds between two looks for a branch's starting checkpoint (:func:`pretrain`).
BRANCH_POLL_SECONDS = 30.0


def _wait_for_branch_start(run: PretrainRun, settings: PretrainSettings, pretrain_dir: Path,
                           source_running=None) -> None:
    """Return once the baseline checkpoint that the branch ``run`` starts from exists; wait
    while ``source_running()`` is true.

    Raises:
        RuntimeError: it does not exist and the baseline's run does not go on.
    """
    while True:
        # asked before the file is looked for: a checkpoint saved as the baseline ends is seen
        running = source_running is not None and source_running()
        path = branch_checkpoint(run, settings, pretrain_dir)
        if path.is_file():
            return
        if not running:
            source, start = settings.branch_source(run)
            raise RuntimeError(f"{run.name} starts from {source.name}'s checkpoint at {start} "
                               f"updates, which does not exist ({path}); pre-train "
                               f"{source.name} first (taco-compare does, with its objectives)")
        time.sleep(BRANCH_POLL_SECONDS)


def check_same_options(run_dir: Path, args: Sequence[str]) -> None:
    """Check that a run that exists is continued (or reused) with the ``fairseq-train``
    arguments it was started with (the last command its log records); ``--user-dir`` may
    differ (another checkout of the plugin).

    Raises:
        ValueError: naming the run and each option whose value differs.
    """
    log = Path(run_dir) / TRAIN_LOG
    if not log.is_file():
        return
    started = [line[len(_COMMAND):] for line in log.read_text(
        encoding="utf-8", errors="replace").splitlines() if line.startswith(_COMMAND)]
    if not started:
        return
    # split as the log line was written (" ".join), so that both sides tokenize alike
    changed = [_named_in_study(c) for c in changed_options(
        option_values(started[-1].split(" ")), option_values(" ".join(args).split(" ")),
        ("--user-dir",))]
    if changed:
        raise ValueError(
            f"{run_dir} was pre-trained with other options ({'; '.join(changed)}): give the "
            "options it was started with, or another --out for the new ones")


def _named_in_study(change: str) -> str:
    """A change of :func:`changed_options` with, where taco-compare sets that fairseq-train
    option from one of its own (:data:`STUDY_OPTIONS`), the option the user gave."""
    option = change.split(" ", 1)[0]
    study_option = STUDY_OPTIONS.get(option, option)
    return change if study_option == option else f"{change}, from taco-compare's {study_option}"


def changed_options(before: Dict[str, List[str]], now: Dict[str, List[str]],
                    may_differ: Sequence[str] = ()) -> List[str]:
    """Each option whose values differ between ``before`` and ``now`` (option → its values,
    as :func:`option_values` gives them), but those of ``may_differ``, as ``"NAME BEFORE →
    NOW"`` in the order of the names (``(unset)``: not given; ``(set)``: a flag given); the
    one comparison of a run's options with the options it was started with, here for
    ``fairseq-train`` and in ``taco-compare --report-only`` for the recorded command."""
    def shown(values: Optional[List[str]]) -> str:
        return "(unset)" if values is None else " ".join(values) or "(set)"

    return [f"{name} {shown(before.get(name))} → {shown(now.get(name))}"
            for name in sorted(before.keys() | now.keys())
            if name not in may_differ and before.get(name) != now.get(name)]


def option_values(tokens: Sequence[str]) -> Dict[str, List[str]]:
    """``fairseq-train`` arguments → option → its values (the data-bin under ``""``)."""
    options, name = {}, ""
    for token in tokens:
        if token.startswith("--"):
            name = token
            options[name] = []
        else:
            options.setdefault(name, []).append(token)
    return options


@contextmanager
def _exclusive(path: Path):
    """Hold an exclusive lock on ``path`` (two processes must never train one run).

    Raises:
        RuntimeError: another process holds it.
    """
    with open(path, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RuntimeError(f"{path.parent} is being pre-trained by another process (it "
                               f"holds {path}); wait for it or stop it") from None
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _train(run: PretrainRun, settings: PretrainSettings, run_dir: Path,
           env: Optional[dict]) -> None:
    log = run_dir / TRAIN_LOG
    args = pretrain_args(run, settings, run_dir)
    with open(log, "a", encoding="utf-8") as f:
        f.write(_COMMAND + " ".join(args) + "\n")
        f.flush()
        returncode = subprocess.run(
            [sys.executable, "-m", "fairseq_cli.train", *args], stdout=f,
            stderr=subprocess.STDOUT, env=dict(env or os.environ, PYTHONUNBUFFERED="1"),
        ).returncode
    if returncode:
        tail = "".join(log.read_text(encoding="utf-8", errors="replace").splitlines(True)[-30:])
        raise RuntimeError(f"pre-training {run.name} failed (exit code {returncode}); end of "
                           f"{log}:\n{tail}")
    have = checkpoints(run_dir)
    kept = settings.checkpoint_updates_of(run.objective)
    missing = [u for u in kept if u not in have]
    if missing:
        raise RuntimeError(f"pre-training {run.name} ended without the checkpoints of updates "
                           f"{missing} (see {log}); were --max-update or the checkpoint "
                           "updates changed after it started?")
    for updates, path in have.items():
        if updates not in kept:
            path.unlink()


#: What :func:`validation_metrics` reads of fairseq's validation records: the row's name →
#: the log's names, the first one present counting (``valid_loss``: fairseq's ``masked_lm``).
VALIDATION_METRICS = {
    "valid_mlm_loss": ("valid_mlm_loss", "valid_loss"),
    "neighbour_share": ("valid_neighbour_share",),
    "neighbour_share_uniform": ("valid_neighbour_share_uniform",),
}


def validation_metrics(run_dir: Path) -> Dict[int, Dict[str, float]]:
    """updates → the run's validation at that update count, as :data:`VALIDATION_METRICS`
    names them (the last record of each update count; a metric the log lacks is left out):
    ``valid_mlm_loss`` (bits per masked token) and the first layer's ``neighbour_share`` with
    its ``neighbour_share_uniform`` (:mod:`taco_fairseq.neighbour_attention`)."""
    log = Path(run_dir) / TRAIN_LOG
    if not log.is_file():
        return {}
    with open(log, encoding="utf-8") as f:
        records = [r for r in parse_json_log(f) if r["kind"] == "valid"]
    metrics: Dict[int, Dict[str, float]] = {}
    for r in records:
        if "valid_num_updates" not in r:
            continue
        found = {}
        for name, logged in VALIDATION_METRICS.items():
            value = next((r[key] for key in logged if key in r), None)
            if isinstance(value, float):
                found[name] = value
        metrics[int(r["valid_num_updates"])] = found
    return metrics


def validation_losses(run_dir: Path) -> Dict[int, float]:
    """updates → validation masked-LM loss (bits per masked token) of the run's log: fairseq's
    ``valid_mlm_loss`` (plugin criteria) or ``valid_loss`` (``masked_lm``), the last record of
    each update count (:func:`validation_metrics`)."""
    return {updates: found["valid_mlm_loss"] for updates, found in
            validation_metrics(run_dir).items() if "valid_mlm_loss" in found}


def initialization_path(run_dir: Path) -> Path:
    """Where :func:`save_initialization` puts a run's initialization: ``RUN/initialization.pt``
    (beside, not in, fairseq's save directory: no tool takes it for a training checkpoint)."""
    return Path(run_dir) / INITIALIZATION


def save_initialization(run: PretrainRun, settings: PretrainSettings, run_dir: Path) -> Path:
    """Save the model exactly as ``fairseq-train`` initializes it for ``run`` (checkpoint 0):
    the run's arguments (:func:`pretrain_args`) parsed by fairseq, numpy and torch seeded with
    ``--seed`` as ``fairseq_cli.train.main`` does, then fairseq's ``setup_task``,
    ``build_model`` and ``build_criterion`` in its order, saved by fairseq's ``Trainer`` as a
    normal checkpoint of 0 updates (with the run's config, so that
    :func:`taco_fairseq.hub.from_pretrained` loads it). Objectives whose recipes build the same
    model (mlm and taco) get the same initialization for a seed, as their runs start from it.
    An existing file is left alone.

    Returns:
        :func:`initialization_path` of ``run_dir``.

    Raises:
        ValueError: the objective has no recipe.
    """
    path = initialization_path(run_dir)
    if path.is_file():
        return path
    import numpy as np
    import torch
    from fairseq import options, tasks, utils
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.trainer import Trainer
    from fairseq_cli.train import add_defaults

    args = options.parse_args_and_arch(options.get_training_parser(),
                                       pretrain_args(run, settings, Path(run_dir)))
    cfg = convert_namespace_to_omegaconf(args)
    utils.import_user_module(cfg.common)
    add_defaults(cfg)
    rng = torch.random.get_rng_state(), np.random.get_state()
    try:
        np.random.seed(cfg.common.seed)
        utils.set_torch_seed(cfg.common.seed)
        task = tasks.setup_task(cfg.task)
        model = task.build_model(cfg.model)
        criterion = task.build_criterion(cfg.criterion)
    finally:
        torch.random.set_rng_state(rng[0])
        np.random.set_state(rng[1])
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    trainer = Trainer(cfg, task, model, criterion)
    trainer.consolidate_optimizer()  # as fairseq's checkpoint_utils.save_checkpoint does
    trainer.save_checkpoint(str(partial), {})
    os.replace(partial, path)
    return path
