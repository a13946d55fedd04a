"""The phases of a comparison (``taco-compare``), each resumable:

1. pre-training of every objective × pre-training seed (:mod:`.pretraining`);
2. per checkpoint, the initialization (update 0) included: the validation masked-LM loss
   and the first layer's neighbour share (from the run's log), the contextual score and
   neighbour attention on held-out text
   (:mod:`taco_fairseq.analysis.contextual_score`, :mod:`taco_fairseq.glue.probes`) and
   the frozen-encoder GLUE probes (:mod:`taco_fairseq.glue.probes`);
3. with several fine-tuning grid points, a search at the last checkpoint of the first
   pre-training seed: every objective, task, seed and point; each task gets the point with
   the best mean dev score over all objectives and fine-tuning seeds (the same point for every
   objective, never tuned for one; further pre-training seeds are fine-tuned with it);
4. GLUE fine-tuning of every checkpoint on ``tasks`` (and of the last one on
   ``final_tasks`` too; with ``final_tasks`` only, of the last checkpoints only), each seed,
   with the chosen point (:mod:`taco_fairseq.glue.runner`);
5. the report (:mod:`.report`).

Output layout: ``OUT/pretrain/<objective>-seed<S>/`` (with ``initialization.pt``),
``OUT/measures/<checkpoint>.json``,
``OUT/finetune/<checkpoint>/<task>/<point>/seed<S>/`` with checkpoint names
``<objective>-seed<S>@<updates>``, ``OUT/search.json``, ``OUT/timings.json`` (wall seconds of
each phase, summed over invocations), then the report's files.
"""

import json
import logging
import os
import re
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from ..glue.pretrained import PretrainedCheckpoint
from ..glue.recipes import Hyperparameters
from ..glue.runner import FinetuneRun, RunnerOptions, run_all
from ..glue.tasks import get_task
from ..logs import configure_logging
from .pretraining import (
    PretrainRun,
    PretrainSettings,
    arms,
    checkpoints,
    pretrain,
    save_initialization,
    study_field,
    validation_metrics,
)
from .statistics import Score

logger = logging.getLogger(__name__)

_CHECKPOINT_NAME = re.compile(r"^(.+)-seed(\d+)@(\d+)$")


@dataclass(frozen=True)
class StudyOptions:
    """A whole comparison: the options of a ``taco-compare`` call. ``OUT/study.json`` records
    all but ``out``, ``jobs`` and ``reference``, which are the call's (:mod:`.record`; each
    field's metadata names the option that sets it, :func:`.pretraining.study_field`).

    Attributes:
        out: the output directory.
        objectives: recipe names (:mod:`.objectives`); the first is the baseline.
        pretrain_seeds: one pre-training run per objective and seed.
        settings: what the pre-training runs share.
        glue_data: the prepared GLUE directory (``taco-prepare-glue``).
        tasks: GLUE tasks fine-tuned at every checkpoint (may be empty when ``final_tasks``
            is not).
        final_tasks: more tasks fine-tuned at the last checkpoint only.
        primary_endpoint: the report's primary endpoint, one of
            :data:`.statistics.PRIMARY_ENDPOINTS`, declared before the runs.
        seeds: fine-tuning seeds.
        points: fine-tuning grid points (batch size, learning rate, epochs); several: phase 3.
        max_updates: task → cap on its fine-tuning updates.
        finetune_args: further ``fairseq-train`` options of every fine-tuning.
        heldout_text: raw text for the contextual score (none: not measured).
        heldout_sentences, heldout_max_lines: its sample size, lines read per file.
        probe_tasks: GLUE tasks of the frozen-encoder probes of phase 2 (none: no probes).
        probe_max_train: at most this many training examples per probed task
            (:class:`taco_fairseq.glue.probes.ProbeOptions`).
        conllu_train, conllu_test: CoNLL-U treebanks of the part-of-speech probe of phase 2
            (:mod:`taco_fairseq.analysis.pos_probe`; None: not measured).
        pos_window: positions per sequence the part-of-speech probe encodes (its
            ``window``; None: the model's positions).
        mlm_texts: (name, file) of held-out raw texts whose masked-LM loss phase 2 measures
            (:mod:`taco_fairseq.analysis.masked_lm_loss`: ``mlm_loss_<name>``).
        jobs: pre-trainings, checkpoint measures (phase 2) and fine-tunings carried out
            side by side.
        cpu: train and evaluate on the CPU.
        reference: another comparison's ``--out`` that the report describes this one's runs
            against (``--reference``: :func:`.tables.read_reference`); None: none.
    """

    out: Path = field(metadata={"recorded": False})
    objectives: Sequence[str] = study_field("--objectives")
    pretrain_seeds: Sequence[int] = study_field("--pretrain-seeds")
    settings: PretrainSettings
    glue_data: Path = study_field("--glue-data", where=True)
    tasks: Sequence[str] = study_field("--tasks")
    seeds: Sequence[int] = study_field("--seeds")
    points: Sequence[Hyperparameters] = study_field(
        "--finetune-batch-size/--finetune-lr/--finetune-epochs")
    final_tasks: Sequence[str] = study_field("--final-tasks", default=())
    primary_endpoint: str = study_field("--primary-endpoint", default="glue-average")
    max_updates: Dict[str, int] = study_field("--finetune-max-updates", default_factory=dict)
    finetune_args: Sequence[str] = study_field("--finetune-options", default=())
    heldout_text: Sequence[Path] = study_field("--heldout-text", where=True, default=())
    heldout_sentences: int = study_field("--heldout-sentences", default=2000)
    heldout_max_lines: Optional[int] = study_field("--heldout-max-lines", default=None)
    probe_tasks: Sequence[str] = study_field("--probe-tasks", default=())
    probe_max_train: Optional[int] = study_field("--probe-max-train", default=None)
    conllu_train: Optional[Path] = study_field("--conllu-train", default=None)
    conllu_test: Optional[Path] = study_field("--conllu-test", default=None)
    pos_window: Optional[int] = study_field("--pos-window", default=None)
    mlm_texts: Sequence[Tuple[str, Path]] = study_field("--heldout-mlm-text", default=())
    jobs: int = field(default=1, metadata={"recorded": False})
    cpu: bool = study_field("--cpu", where=True, default=False)
    reference: Optional[Path] = field(default=None, metadata={"recorded": False})

    @property
    def arms(self) -> List[str]:
        """The objectives of the rows: ``objectives``, then with ``--branch-update`` the
        branch of each but the baseline (``<objective>-branch``, :mod:`.pretraining`)."""
        return arms(self.objectives, self.settings.branch is not None)

    @property
    def runs(self) -> List[PretrainRun]:
        """Every pre-training run, arm-major (:attr:`arms`)."""
        return [PretrainRun(o, s) for o in self.arms for s in self.pretrain_seeds]

    @property
    def average_tasks(self) -> List[str]:
        """The tasks of the fine-tuned GLUE average (``glue-average``): ``tasks``, or
        ``final_tasks`` (at the last checkpoint) when there are none."""
        return list(self.tasks or self.final_tasks)

    @property
    def last_updates(self) -> int:
        """The last checkpoint's update count (of the objectives that train longest)."""
        return max(self.settings.checkpoint_updates)

    def last_updates_of(self, objective: str) -> int:
        """The update count of ``objective``'s last checkpoint (earlier than
        :attr:`last_updates` with ``--objective-max-update``)."""
        return max(self.settings.checkpoint_updates_of(objective))


@dataclass(frozen=True)
class StudyCheckpoint:
    """One pre-training checkpoint of the comparison."""

    run: PretrainRun
    updates: int
    path: Path

    @property
    def name(self) -> str:
        """``<objective>-seed<S>@<updates>``: its name in the fine-tuning directories."""
        return f"{self.run.name}@{self.updates}"


class PhaseTimer:
    """Wall seconds of each phase, added to ``OUT/timings.json`` as each phase ends."""

    def __init__(self, out: Path):
        self.path = Path(out) / "timings.json"
        self.seconds = json.loads(self.path.read_text()) if self.path.is_file() else {}

    @contextmanager
    def phase(self, name: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = round(self.seconds.get(name, 0.0)
                                       + time.perf_counter() - start, 1)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(json.dumps(self.seconds, indent=2) + "\n")


def set_threads(options: StudyOptions) -> None:
    """On the CPU, give each of ``jobs`` side-by-side runs its share of the cores (the
    subprocesses inherit ``OMP_NUM_THREADS``), unless the user set ``OMP_NUM_THREADS``: then
    each run gets that many threads, as the line printed says."""
    if not options.cpu:
        return
    given = os.environ.get("OMP_NUM_THREADS", "").strip()
    if given:
        print(f"   {given} threads per run, as OMP_NUM_THREADS sets ({options.jobs} side by "
              "side; unset it for cores/--jobs)", flush=True)
        return
    threads = max(1, (os.cpu_count() or 1) // options.jobs)
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(threads)
    torch.set_num_threads(threads)
    print(f"   {threads} threads per run ({options.jobs} side by side: cores/--jobs; set "
          "OMP_NUM_THREADS to choose)", flush=True)


#: Seconds between two looks for new checkpoints while the pre-trainings run
#: (:func:`pretrain_all` with ``measure``).
POLL_SECONDS = 30.0


def pretrain_all(options: StudyOptions, measure=None) -> None:
    """Phase 1: every run, ``jobs`` at a time (finished ones are left alone, interrupted ones
    continue), seed-major (every objective of seed 1, then of seed 2, ...) so that an
    interrupted phase leaves complete pairs.

    Args:
        measure: called with the checkpoints (:class:`StudyCheckpoint`) that exist so far,
            each run's initialization first, whenever one more has been saved (looked for
            every :data:`POLL_SECONDS` while the runs go on) and once at the end: phase 2
            beside phase 1, so that each checkpoint is measured as soon as it exists and an
            interrupted study keeps what it measured. None: not called.

    Errors: as :func:`.pretraining.pretrain` and ``measure``, raised once every run has
    stopped (a failed measure is logged at once and not called again: the pre-trainings go
    on, and a rerun measures what is missing).
    """
    futures: Dict[PretrainRun, Future] = {}

    def one(run: PretrainRun) -> None:
        source = options.settings.branch_source(run)[0] if run.is_branch else None
        run_dir = pretrain(run, options.settings, options.out, source_running=(
            None if source is None else lambda: not futures[source].done()))
        print(f"   {run.name}: done ({run_dir})", flush=True)

    # the baselines of the branches come first (options.runs is arm-major): a branch waits
    # for its baseline's checkpoint, which a run started earlier saves
    runs = sorted(options.runs, key=lambda run: run.seed)
    with ThreadPoolExecutor(options.jobs) as pool:
        for run in runs:
            futures[run] = pool.submit(one, run)
        if measure is None:
            for future in futures.values():
                future.result()
            return
        pending = list(futures.values())
        seen: set = set()
        failed: Optional[BaseException] = None
        while True:
            finished = all(f.done() for f in pending)
            found = [*initial_checkpoints(options), *saved_checkpoints(options)]
            if failed is None and {c.name for c in found} - seen:
                try:
                    measure(found)
                except Exception as e:  # the pre-trainings go on; raised when they end
                    logger.error("measuring the checkpoints failed (%s: %s); the "
                                 "pre-trainings go on, rerun to measure them", type(e).__name__, e)
                    failed = e
                seen |= {c.name for c in found}
            if finished:
                break
            wait(pending, timeout=POLL_SECONDS, return_when=FIRST_COMPLETED)
        for future in pending:
            future.result()
        if failed is not None:
            raise failed


def saved_checkpoints(options: StudyOptions) -> List[StudyCheckpoint]:
    """The checkpoints at ``--checkpoint-updates`` that the runs have saved so far (a run
    under way included), run by run in update order."""
    found = []
    for run in options.runs:
        have = checkpoints(options.out / "pretrain" / run.name)
        found += [StudyCheckpoint(run, u, have[u])
                  for u in options.settings.checkpoint_updates_of(run.objective) if u in have]
    return found


def study_checkpoints(options: StudyOptions) -> List[StudyCheckpoint]:
    """The checkpoints at ``--checkpoint-updates`` of every run.

    Raises:
        FileNotFoundError: one is missing (pre-training has not reached it).
    """
    found = []
    for run in options.runs:
        have = checkpoints(options.out / "pretrain" / run.name)
        for updates in options.settings.checkpoint_updates_of(run.objective):
            if updates not in have:
                raise FileNotFoundError(f"{run.name} has no checkpoint of {updates} updates "
                                        "yet: pre-training is not finished")
            found.append(StudyCheckpoint(run, updates, have[updates]))
    return found


def initial_checkpoints(options: StudyOptions) -> List[StudyCheckpoint]:
    """Checkpoint 0 of every run but the branches: the model as ``fairseq-train`` initializes it
    (:func:`.pretraining.save_initialization`, saved on first use), measured in phase 2 but not
    fine-tuned.

    Raises:
        ValueError: an objective has no recipe.
    """
    found = []
    for run in options.runs:
        if run.is_branch:  # it starts from the baseline's checkpoint, not from update 0
            continue
        run_dir = options.out / "pretrain" / run.name
        found.append(StudyCheckpoint(run, 0, save_initialization(run, options.settings,
                                                                 run_dir)))
    return found


def measure_checkpoints(options: StudyOptions, found: Sequence[StudyCheckpoint],
                        inputs: Optional["MeasureInputs"] = None,
                        measured_one=None) -> List[dict]:
    """Phase 2: per checkpoint, ``valid_mlm_loss`` (bits per masked token, fairseq's
    validation at that update; None at update 0, where fairseq validates nothing) and the
    first layer's ``neighbour_share`` and ``neighbour_share_uniform`` at that validation
    (where the criterion logs them; :func:`.pretraining.validation_metrics`); with
    held-out text (sampled and encoded once per process), the contextual score
    and its intra- and inter-context similarities and the neighbour attention
    (:func:`taco_fairseq.glue.probes.neighbour_attention`: ``neighbour_attention``,
    ``attention_entropy``, their uniform references and per-layer values); with
    ``probe_tasks``, the linear probes and the unsupervised STS-B
    (:func:`taco_fairseq.glue.probes.probe_tasks`: ``probe_<TASK>``, ``probe_average``,
    ``sts_unsupervised``); with CoNLL-U treebanks, the part-of-speech probe
    (:func:`taco_fairseq.analysis.pos_probe.pos_probe`: ``pos_accuracy…``); with held-out
    texts, their masked-LM loss (``mlm_loss_<NAME>``, bits per masked token,
    :mod:`taco_fairseq.analysis.masked_lm_loss`). Cached in ``OUT/measures/<checkpoint>.json``;
    a cached row that lacks a measure asked for now gets it added. Initializations (update 0)
    of one seed that hold the same parameters (mlm and taco) are measured once
    (:class:`_Initializations`: hashed only when one lacks a measure).

    On the CPU with ``jobs`` > 1 the checkpoints are measured ``jobs`` at a time in worker
    processes (each with the threads of :func:`set_threads`; one seed's
    initializations go to one worker): the measures are computed in-process with torch and
    scikit-learn, so threads would share one interpreter. The rows are the same either way.
    Given ``inputs`` (:class:`MeasureInputs` of ``options``, kept by the caller across
    calls), they are measured in this process, one at a time (beside the pre-trainings of
    phase 1), and ``measured_one`` (if given) is called with no argument after each, once its
    row is in ``OUT/measures`` (e.g. to rewrite ``checkpoints.csv`` from :func:`read_measures`).

    Returns:
        one row per checkpoint of ``found``, in its order.

    Raises:
        FileNotFoundError, ValueError: as :func:`taco_fairseq.glue.probes.probe_tasks`.
    """
    (options.out / "measures").mkdir(parents=True, exist_ok=True)
    units = _measure_units(found)
    if inputs is None and options.cpu and options.jobs > 1 and len(units) > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        # the largest units first, so that no worker is left with a long tail
        units.sort(key=len, reverse=True)
        with ProcessPoolExecutor(options.jobs, multiprocessing.get_context("spawn"),
                                 initializer=_start_worker, initargs=(options,)) as pool:
            measured = list(pool.map(_measure_in_worker, units))
    else:
        inputs = inputs or MeasureInputs(options)
        measured = []
        for unit in units:
            measured.append(_measure_unit(options, unit, inputs))
            if measured_one is not None:
                measured_one()
    rows = {c.name: row for unit, unit_rows in zip(units, measured)
            for c, row in zip(unit, unit_rows)}
    return [rows[c.name] for c in found]


def _measure_units(found: Sequence[StudyCheckpoint]) -> List[List[StudyCheckpoint]]:
    """``found`` cut into the units one process measures: each seed's initializations
    (update 0) together, so that identical ones are measured once, every other checkpoint
    alone; in the order of ``found``."""
    units: List[List[StudyCheckpoint]] = []
    initial: Dict[int, List[StudyCheckpoint]] = {}
    for checkpoint in found:
        if checkpoint.updates != 0:
            units.append([checkpoint])
        elif checkpoint.run.seed in initial:
            initial[checkpoint.run.seed].append(checkpoint)
        else:
            initial[checkpoint.run.seed] = [checkpoint]
            units.append(initial[checkpoint.run.seed])
    return units


#: The held-out inputs of this phase-2 worker process (:func:`_start_worker`), kept for every
#: unit it measures; None outside a worker.
_worker_inputs: Optional["MeasureInputs"] = None


def _start_worker(options: StudyOptions) -> None:
    """A phase-2 worker process's start: it logs as the command does (its stderr is the
    command's) and keeps the held-out inputs of ``options`` for its units."""
    global _worker_inputs
    configure_logging()
    _worker_inputs = MeasureInputs(options)


def _measure_in_worker(unit: Sequence[StudyCheckpoint]) -> List[dict]:
    """:func:`_measure_unit` in a worker process, with its options and held-out inputs."""
    return _measure_unit(_worker_inputs.options, unit, _worker_inputs)


def _measure_unit(options: StudyOptions, unit: Sequence[StudyCheckpoint],
                  inputs: "MeasureInputs") -> List[dict]:
    """The rows of :func:`measure_checkpoints` for one unit of :func:`_measure_units`, with the
    held-out ``inputs`` of ``options`` (sampled and encoded once for every unit of a process).
    """
    directory = options.out / "measures"
    initializations = _Initializations()
    rows = []
    for checkpoint in unit:
        path = directory / f"{checkpoint.name}.json"
        logged = validation_metrics(options.out / "pretrain" / checkpoint.run.name
                                    ).get(checkpoint.updates, {})
        row = json.loads(path.read_text()) if path.is_file() else {
            "objective": checkpoint.run.objective, "pretrain_seed": checkpoint.run.seed,
            "updates": checkpoint.updates, "valid_mlm_loss": logged.get("valid_mlm_loss")}
        from_log = {name: value for name, value in logged.items() if name not in row}
        row.update(from_log)  # also into a row cached before the log had them
        missing = _missing_measures(options, row)
        same = initializations.measured(checkpoint) if missing and checkpoint.updates == 0 \
            else None
        if same is not None:
            row.update(same)
        elif missing:
            row.update(_measure(options, checkpoint, missing, inputs))
        if checkpoint.updates == 0:
            initializations.add(checkpoint, row)
        if missing or from_log or not path.is_file():
            path.write_text(json.dumps(row, indent=2) + "\n")
        rows.append(row)
    return rows


class _Initializations:
    """The measured initializations (update 0) of phase 2, so that one seed's identical ones
    (mlm and taco start from the same parameters) are measured once; a checkpoint is hashed
    (:func:`_parameters_sha256`) only when one lacks a measure, and each at most once."""

    def __init__(self):
        self.rows: List[Tuple[StudyCheckpoint, dict]] = []
        self.hashes: Dict[Path, str] = {}

    def _hash(self, checkpoint: StudyCheckpoint) -> str:
        if checkpoint.path not in self.hashes:
            self.hashes[checkpoint.path] = _parameters_sha256(checkpoint.path)
        return self.hashes[checkpoint.path]

    def measured(self, checkpoint: StudyCheckpoint) -> Optional[dict]:
        """The measures of the first initialization added of the same seed with the same
        parameters as ``checkpoint`` (None: none)."""
        for other, row in self.rows:
            if other.run.seed == checkpoint.run.seed and self._hash(other) == self._hash(
                    checkpoint):
                return {k: v for k, v in row.items()
                        if k not in ("objective", "pretrain_seed", "updates")}
        return None

    def add(self, checkpoint: StudyCheckpoint, row: dict) -> None:
        """``row``: the measures of the initialization ``checkpoint``."""
        self.rows.append((checkpoint, row))


#: The measures of phase 2 beyond the validation loss, and a key each writes.
_MEASURE_KEYS = {"contextual": "contextual_score", "attention": "neighbour_attention",
                 "unsupervised": "sts_unsupervised", "pos": "pos_accuracy"}


def pos_window(options: StudyOptions) -> int:
    """The positions per sequence with which the part-of-speech probe encodes the sentences:
    ``--pos-window``, else the runs' ``--tokens-per-sample`` (the model's positions)."""
    return options.pos_window or options.settings.tokens_per_sample


def _missing_measures(options: StudyOptions, row: dict) -> List[str]:
    """The measures asked for by ``options`` that ``row`` lacks: ``contextual``,
    ``attention``, ``unsupervised``, ``probe_<TASK>``, ``pos`` and ``mlm_loss_<NAME>``. The
    part-of-speech probe is also missing when the row records another window
    (``pos_window``, :func:`pos_window`) than ``options``'; a row measured before the window
    was recorded is kept as it is."""
    wanted = []
    if options.heldout_text:
        wanted += ["contextual", "attention"]
    if options.conllu_train is not None:
        wanted.append("pos")
    wanted += [f"mlm_loss_{name}" for name, _ in options.mlm_texts]
    if options.probe_tasks:
        wanted += [f"probe_{t}" for t in options.probe_tasks]
        if "STS-B" in options.probe_tasks:
            wanted.append("unsupervised")
    other_window = row.get("pos_window", pos_window(options)) != pos_window(options)
    return [m for m in wanted
            if _MEASURE_KEYS.get(m, m) not in row or m == "pos" and other_window]


class MeasureInputs:
    """The held-out sentences of phase 2, sampled once and encoded once per data-bin and
    maximum length (:func:`taco_fairseq.analysis.contextual_score.encode_sentences`, as
    ``score_checkpoints`` keys them)."""

    def __init__(self, options: StudyOptions):
        self.options = options
        self.sentences = None
        self.encoded = {}
        self.treebank = None
        self.masked = {}

    def heldout(self) -> List[str]:
        from ..analysis.sentences import sample_sentences

        if self.sentences is None:
            o = self.options
            self.sentences = sample_sentences(o.heldout_text, o.heldout_sentences, seed=1,
                                              max_lines=o.heldout_max_lines)
        return self.sentences

    def tokens(self, hub) -> List[torch.Tensor]:
        """The held-out sentences as ``hub`` encodes them (``[length]`` ids, ``<s>`` …
        ``</s>``; too long and too short ones left out)."""
        from ..analysis.contextual_score import encode_sentences

        key = (hub.cfg.task.data, hub.model.max_positions())
        if key not in self.encoded:
            self.encoded[key] = encode_sentences(hub, self.heldout()).tokens
        return self.encoded[key]

    def pos_data(self):
        """The part-of-speech probe's treebanks (:class:`.pos_probe.PosProbeData`), read once."""
        from ..analysis.pos_probe import PosProbeData

        if self.treebank is None:
            self.treebank = PosProbeData.read(self.options.conllu_train, self.options.conllu_test)
        return self.treebank

    def masked_text(self, hub, name: str, path: Path):
        """The held-out text ``name`` masked for ``hub`` (:func:`.masked_lm_loss.mask_text`),
        once per data-bin, block length and masking options (the checkpoints of one
        objective share them)."""
        from ..analysis.masked_lm_loss import mask_text

        task = hub.cfg.task
        key = (name, task.data, task.tokens_per_sample, task.mask_prob,
               task.leave_unmasked_prob, task.random_token_prob)
        if key not in self.masked:
            self.masked[key] = mask_text(hub, path)
        return self.masked[key]


def _measure(options: StudyOptions, checkpoint: StudyCheckpoint, missing: Sequence[str],
             inputs: MeasureInputs) -> dict:
    """The ``missing`` measures of one checkpoint (:func:`_missing_measures`)."""
    from ..analysis.checkpoints import load_checkpoint
    from ..analysis.contextual_score import contextual_score
    from ..glue.probes import ProbeOptions, neighbour_attention, probe_tasks

    if not missing:
        return {}
    loaded = load_checkpoint(checkpoint.path, options.settings.data,
                             "cpu" if options.cpu or not torch.cuda.is_available() else "cuda")
    model, dictionary = loaded.hub.model, loaded.hub.task.source_dictionary
    row = {}
    if "contextual" in missing:  # as score_checkpoints measures it (batches of 64, seed 1)
        stats = contextual_score(model, inputs.tokens(loaded.hub), dictionary)
        row.update(contextual_score=stats["cosine_gap"], intra_context_cos=stats["cosine_intra"],
                   inter_context_cos=stats["cosine_inter"])
    if "attention" in missing:
        row.update(neighbour_attention(model, inputs.tokens(loaded.hub), dictionary))
    if "pos" in missing:
        from ..analysis.pos_probe import pos_probe

        row.update(pos_probe(loaded.hub, inputs.pos_data(), window=options.pos_window),
                   pos_window=pos_window(options))
    for name, path in options.mlm_texts:
        if f"mlm_loss_{name}" in missing:
            from ..analysis.masked_lm_loss import masked_lm_loss

            row[f"mlm_loss_{name}"] = masked_lm_loss(model, inputs.masked_text(
                loaded.hub, name, path), dictionary.pad())
    if any(m.startswith("probe_") or m == "unsupervised" for m in missing):
        started = time.perf_counter()
        row.update(probe_tasks(loaded, options.glue_data,
                               ProbeOptions(tasks=tuple(options.probe_tasks),
                                            max_train=options.probe_max_train)))
        logger.info("probes of %s: %.0f s", checkpoint.name, time.perf_counter() - started)
    return row


def _parameters_sha256(path: Path) -> str:
    """SHA-256 of a checkpoint's model parameters (names, shapes, dtypes and values)."""
    import hashlib

    from ..metadata import load_lazily

    digest = hashlib.sha256()
    for name, tensor in sorted(load_lazily(path)["model"].items()):
        digest.update(f"{name}{tuple(tensor.shape)}{tensor.dtype}".encode())
        digest.update(tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy()
                      .tobytes())
    return digest.hexdigest()


def read_measures(options: StudyOptions) -> List[dict]:
    """The checkpoint measures phase 2 has written so far (``OUT/measures``)."""
    return [json.loads(path.read_text())
            for path in sorted((options.out / "measures").glob("*.json"))]


def search_points(options: StudyOptions,
                  found: Sequence[StudyCheckpoint]) -> Dict[str, Hyperparameters]:
    """Phase 3: task → the fine-tuning point of the comparison (module doc: the last
    checkpoints of the first pre-training seed decide); with one point, that point for every
    task. Writes ``OUT/search.json``; a search already there (this study's, or one copied
    from an earlier study with ``--finetune-search-from``) that covers every task is not run
    again."""
    tasks = list(dict.fromkeys([*options.tasks, *options.final_tasks]))
    chosen = chosen_points(options)
    if set(tasks) <= set(chosen):
        return chosen
    last = [c for c in found if c.updates == options.last_updates_of(c.run.objective)
            and c.run.seed == options.pretrain_seeds[0]]
    runs = [FinetuneRun(_named(c), get_task(t), point, seed)
            for t in tasks for seed in options.seeds for point in options.points for c in last]
    results = run_all(runs, _runner_options(options), options.jobs)
    means: Dict[Tuple[str, Hyperparameters], List[float]] = {}
    for run, result in zip(runs, results):
        task = run.task
        value = result["dev"][task.primary_column][task.glue_metric]
        means.setdefault((task.name, run.hyper), []).append(0.0 if value != value else value)
    chosen, table = {}, {}
    for task in tasks:
        scores = {p: sum(means[(task, p)]) / len(means[(task, p)]) for p in options.points}
        chosen[task] = max(options.points, key=lambda p: scores[p])
        table[task] = {"chosen": chosen[task].label,
                       "mean_dev_score": {p.label: round(v, 3) for p, v in scores.items()}}
    (options.out / "search.json").write_text(json.dumps(table, indent=2) + "\n")
    return chosen


def finetune_all(options: StudyOptions, found: Sequence[StudyCheckpoint],
                 points: Dict[str, Hyperparameters]) -> List[Score]:
    """Phase 4: every checkpoint on ``tasks`` and the last one of each run on ``final_tasks``
    too (no ``tasks``: the last checkpoints only), every seed, with the task's point; returns
    the dev scores.

    Runs go in the order that makes an interrupted phase most useful: the last checkpoint
    first, then the first, then the others from the latest down; within a checkpoint the
    objectives alternate, so finished runs come in comparable pairs."""
    updates = sorted(options.settings.checkpoint_updates)
    order = {u: i for i, u in enumerate([updates[-1], *updates[:-1][:1],
                                         *reversed(updates[1:-1])])}
    runs = []
    last = {o: options.last_updates_of(o) for o in options.arms}
    order.update({u: -1 for u in last.values() if u != options.last_updates})
    for u in sorted(order, key=order.get):
        at = [c for c in found if c.updates == u]
        for task in dict.fromkeys([*options.tasks, *options.final_tasks]):
            for seed in options.seeds:
                runs += [FinetuneRun(_named(c), get_task(task), points[task], seed) for c in at
                         if task in options.tasks or u == last[c.run.objective]]
    return scores_of(run_all(runs, _runner_options(options), options.jobs), points)


def scores_of(results: Sequence[dict], points: Dict[str, Hyperparameters]) -> List[Score]:
    """The dev scores of finished fine-tunings (``metrics.json`` contents) of comparison
    checkpoints (named ``<objective>-seed<S>@<updates>``) at each task's ``points``; other
    results are left out."""
    scores = []
    for result in results:
        settings = result["settings"]
        match = _CHECKPOINT_NAME.match(settings["checkpoint"])
        task = get_task(settings["task"])
        point = points.get(task.name)
        if not match or point is None or (settings["batch_size"], settings["lr"],
                                          settings["epochs"]) != (point.batch_size, point.lr,
                                                                   point.epochs):
            continue
        objective, pretrain_seed, updates = match.group(1), int(match.group(2)), int(match.group(3))
        for eval_set in task.eval_sets:
            dev = result["dev"][eval_set.column]
            scores.append(Score(objective, pretrain_seed, updates, eval_set.column,
                                settings["seed"], task.glue_metric, dev[task.glue_metric],
                                task.paper_metric, dev[task.paper_metric]))
    return scores


def chosen_points(options: StudyOptions) -> Dict[str, Hyperparameters]:
    """Task → its point: the only one, or the one ``OUT/search.json`` chose (empty before
    the search ran)."""
    tasks = list(dict.fromkeys([*options.tasks, *options.final_tasks]))
    if len(options.points) == 1:
        return {task: options.points[0] for task in tasks}
    labels = {p.label: p for p in options.points}
    return {task: labels[entry["chosen"]] for task, entry in read_search(options.out).items()
            if entry["chosen"] in labels}


def read_search(out: Path) -> dict:
    """``OUT/search.json``: task → ``{"chosen": label, "mean_dev_score": {label: points}}``
    (and ``"searched_in"`` when taken from an earlier study); ``{}`` before a search ran."""
    path = Path(out) / "search.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def _named(checkpoint: StudyCheckpoint) -> PretrainedCheckpoint:
    return PretrainedCheckpoint(checkpoint.name, checkpoint.path)


def _runner_options(options: StudyOptions) -> RunnerOptions:
    return RunnerOptions(
        data_dir=options.glue_data, out_dir=options.out / "finetune",
        pretraining_data=options.settings.data,
        fairseq_args=(["--cpu"] if options.cpu else []) + list(options.finetune_args),
        cpu=options.cpu, keep_checkpoints=False, max_updates=dict(options.max_updates),
    )


def _parallel(function, items, jobs: int) -> list:
    if jobs <= 1:
        return [function(item) for item in items]
    with ThreadPoolExecutor(jobs) as pool:
        return list(pool.map(function, items))
