"""The eight GLUE tasks of the paper (WNLI excluded, §4 "Evaluation"): files, columns, labels
and metrics, as the original GLUE distribution (``download_glue_data.py``) lays them out.

Split names are fairseq's: ``train``, ``valid`` (the dev set), ``valid1`` (MNLI's mismatched
dev set), ``test`` and ``test1`` (MNLI's mismatched test set). Task names are spelled as GLUE
spells them (``CoLA``, ``SST-2``, ``MRPC``, ``STS-B``, ``QQP``, ``MNLI``, ``QNLI``, ``RTE``) and
are also the names of the task directories.

Metrics (all in points, 0-100):

* the paper reports F1 for MRPC and QQP, Spearman correlation for STS-B and accuracy for the
  rest, MNLI-m and MNLI-mm as two columns (:attr:`GlueTask.paper_metric`);
* the standard GLUE choice differs for CoLA only: Matthews correlation
  (:attr:`GlueTask.glue_metric`);
* checkpoints are selected during fine-tuning on the recipe's ``best_checkpoint_metric``
  (``examples/taco/config/finetuning``): the reported metric, except Pearson for STS-B.
"""

from dataclasses import dataclass
from typing import Dict, Optional, Sequence, Tuple


@dataclass(frozen=True)
class SplitLayout:
    """The layout of one TSV file of a task.

    Attributes:
        file: file name inside the task directory, e.g. ``dev_matched.tsv``.
        columns: the column names, in order. For a file with a header line they must equal
            that line (after a UTF-8 BOM); otherwise they name the columns by position.
        has_header: whether the first line is a header.
        inputs: the input columns (one for single-sentence tasks, two for pairs).
        label: the label column; None for test files.
        index: the column with the example index of GLUE's submission files (test files);
            None where the index is the 0-based row number.
    """

    file: str
    columns: Tuple[str, ...]
    has_header: bool
    inputs: Tuple[str, ...]
    label: Optional[str] = None
    index: Optional[str] = None


@dataclass(frozen=True)
class EvalSet:
    """A dev set reported as one column of the results table (MNLI has two)."""

    column: str  # e.g. "MNLI-m"
    split: str  # fairseq split, "valid" or "valid1"
    test_split: str  # the matching test split, "test" or "test1"
    submission_file: str  # GLUE submission file of that test split, e.g. "MNLI-m.tsv"


@dataclass(frozen=True)
class GlueTask:
    """One GLUE task.

    Attributes:
        name: GLUE's spelling, also the name of the task directory.
        splits: fairseq split name → layout of its TSV file.
        labels: class labels in class-index order (the label dictionary is written in this
            order); None for regression (STS-B, scores 0-5).
        eval_sets: the dev sets, each one column of the results table.
        paper_metric: the metric the paper reports.
        glue_metric: the standard GLUE metric (differs for CoLA: MCC).
        metrics: the metrics computed for every dev set.
    """

    name: str
    splits: Dict[str, SplitLayout]
    labels: Optional[Tuple[str, ...]]
    eval_sets: Tuple[EvalSet, ...]
    paper_metric: str
    glue_metric: str
    metrics: Tuple[str, ...]

    @property
    def regression(self) -> bool:
        """Whether the task is a regression (STS-B)."""
        return self.labels is None

    @property
    def num_classes(self) -> int:
        """fairseq's ``--num-classes``: number of labels, 1 for regression."""
        return 1 if self.labels is None else len(self.labels)

    @property
    def num_inputs(self) -> int:
        """1 for single-sentence tasks, 2 for sentence pairs."""
        return len(self.splits["train"].inputs)

    @property
    def primary_column(self) -> str:
        """The dev-set column grid points and best runs are chosen on (MNLI: MNLI-m)."""
        return self.eval_sets[0].column

    @property
    def positive_label(self) -> Optional[str]:
        """The positive class of F1 (``"1"``: paraphrase/duplicate), None without F1."""
        return "1" if "f1" in self.metrics else None


def _eval(column: str, split: str = "valid", test: str = "test") -> EvalSet:
    return EvalSet(column, split, test, f"{column}.tsv")


def _labeled(file, columns, inputs, label, has_header=True) -> SplitLayout:
    return SplitLayout(file, tuple(columns), has_header, tuple(inputs), label=label)


def _test(file, columns, inputs, index="index") -> SplitLayout:
    return SplitLayout(file, tuple(columns), True, tuple(inputs), index=index)


def _task(name, train, dev, test, labels, paper, metrics, glue=None,
          eval_sets=None, more_splits=None) -> GlueTask:
    splits = {"train": train, "valid": dev, "test": test, **(more_splits or {})}
    return GlueTask(
        name=name, splits=splits, labels=labels, eval_sets=eval_sets or (_eval(name),),
        paper_metric=paper, glue_metric=glue or paper, metrics=metrics,
    )


_RTE = ("index", "sentence1", "sentence2", "label")
_MRPC = ("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String")
_MRPC_TEST = ("index", "#1 ID", "#2 ID", "#1 String", "#2 String")
_COLA = ("source", "label", "original_label", "sentence")  # no header line
_STSB_TEST = ("index", "genre", "filename", "year", "old_index", "source1", "source2",
              "sentence1", "sentence2")
_STSB = _STSB_TEST + ("score",)
_QNLI = ("index", "question", "sentence", "label")
_QQP = ("id", "qid1", "qid2", "question1", "question2", "is_duplicate")
_MNLI_TEST = ("index", "promptID", "pairID", "genre", "sentence1_binary_parse",
              "sentence2_binary_parse", "sentence1_parse", "sentence2_parse", "sentence1",
              "sentence2")
_MNLI_TRAIN = _MNLI_TEST + ("label1", "gold_label")
_MNLI_DEV = _MNLI_TEST + ("label1", "label2", "label3", "label4", "label5", "gold_label")
_PAIR = ("sentence1", "sentence2")

#: All tasks by GLUE name, in the column order of the paper's tables.
TASKS: Dict[str, GlueTask] = {
    task.name: task
    for task in (
        _task(
            "MNLI",
            _labeled("train.tsv", _MNLI_TRAIN, _PAIR, "gold_label"),
            _labeled("dev_matched.tsv", _MNLI_DEV, _PAIR, "gold_label"),
            _test("test_matched.tsv", _MNLI_TEST, _PAIR),
            ("contradiction", "entailment", "neutral"), "accuracy", ("accuracy",),
            eval_sets=(_eval("MNLI-m"), _eval("MNLI-mm", "valid1", "test1")),
            more_splits={
                "valid1": _labeled("dev_mismatched.tsv", _MNLI_DEV, _PAIR, "gold_label"),
                "test1": _test("test_mismatched.tsv", _MNLI_TEST, _PAIR),
            },
        ),
        _task(
            "QNLI",
            _labeled("train.tsv", _QNLI, ("question", "sentence"), "label"),
            _labeled("dev.tsv", _QNLI, ("question", "sentence"), "label"),
            _test("test.tsv", _QNLI[:3], ("question", "sentence")),
            ("entailment", "not_entailment"), "accuracy", ("accuracy",),
        ),
        _task(
            "QQP",
            _labeled("train.tsv", _QQP, ("question1", "question2"), "is_duplicate"),
            _labeled("dev.tsv", _QQP, ("question1", "question2"), "is_duplicate"),
            _test("test.tsv", ("id", "question1", "question2"), ("question1", "question2"),
                  index="id"),
            ("0", "1"), "f1", ("f1", "accuracy"),
        ),
        _task(
            "RTE",
            _labeled("train.tsv", _RTE, _PAIR, "label"),
            _labeled("dev.tsv", _RTE, _PAIR, "label"),
            _test("test.tsv", _RTE[:3], _PAIR),
            ("entailment", "not_entailment"), "accuracy", ("accuracy",),
        ),
        _task(
            "SST-2",
            _labeled("train.tsv", ("sentence", "label"), ("sentence",), "label"),
            _labeled("dev.tsv", ("sentence", "label"), ("sentence",), "label"),
            _test("test.tsv", ("index", "sentence"), ("sentence",)),
            ("0", "1"), "accuracy", ("accuracy",),
        ),
        _task(
            "MRPC",
            _labeled("train.tsv", _MRPC, ("#1 String", "#2 String"), "Quality"),
            _labeled("dev.tsv", _MRPC, ("#1 String", "#2 String"), "Quality"),
            _test("test.tsv", _MRPC_TEST, ("#1 String", "#2 String")),
            ("0", "1"), "f1", ("f1", "accuracy"),
        ),
        _task(
            "CoLA",
            _labeled("train.tsv", _COLA, ("sentence",), "label", has_header=False),
            _labeled("dev.tsv", _COLA, ("sentence",), "label", has_header=False),
            _test("test.tsv", ("index", "sentence"), ("sentence",)),
            ("0", "1"), "accuracy", ("mcc", "accuracy"), glue="mcc",
        ),
        _task(
            "STS-B",
            _labeled("train.tsv", _STSB, _PAIR, "score"),
            _labeled("dev.tsv", _STSB, _PAIR, "score"),
            _test("test.tsv", _STSB_TEST, _PAIR),
            None, "spearman", ("pearson", "spearman"),
        ),
    )
}

#: The columns of the results table, in the paper's order (MNLI counts twice).
EVAL_COLUMNS: Tuple[str, ...] = tuple(e.column for t in TASKS.values() for e in t.eval_sets)


def get_task(name: str) -> GlueTask:
    """The task called ``name`` (GLUE spelling; case and ``-``/``_`` are ignored).

    Raises:
        ValueError: for an unknown name (WNLI included), listing the known ones.
    """
    key = _normalize(name)
    for task in TASKS.values():
        if _normalize(task.name) == key:
            return task
    raise ValueError(
        f"unknown GLUE task {name!r}; known: {', '.join(TASKS)} (WNLI is excluded, as in the "
        "paper)"
    )


def task_of_column(column: str) -> GlueTask:
    """The task of a results-table column (``MNLI-m``, ``MNLI-mm``: MNLI; else the task's name).

    Raises:
        ValueError: as :func:`get_task`.
    """
    for task in TASKS.values():
        if any(e.column == column for e in task.eval_sets):
            return task
    return get_task(column)


def get_tasks(names: Sequence[str]) -> Tuple[GlueTask, ...]:
    """:func:`get_task` for each name, duplicates removed, in the given order."""
    tasks = []
    for name in names:
        task = get_task(name)
        if task not in tasks:
            tasks.append(task)
    return tuple(tasks)


def _normalize(name: str) -> str:
    return name.lower().replace("-", "").replace("_", "")
