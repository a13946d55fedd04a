"""sentence_prediction_summable: its logging outputs are sums, and the GLUE metrics fairseq
derives from them, over batches and data-parallel workers, equal scikit-learn/scipy on the
predictions; a real 2-process (gloo) validation runs where fairseq's own criterion fails."""

import operator
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from fairseq import options, tasks
from fairseq.criterions.sentence_prediction import (
    SentencePredictionConfig,
    SentencePredictionCriterion,
)
from fairseq.data import Dictionary
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.logging import metrics
from scipy.stats import pearsonr
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from conftest import USER_DIR, first_batch
from taco_fairseq.criterion import SummableSentencePredictionCriterion
from taco_fairseq.glue.predict import FinetunedModel
from taco_fairseq.glue.recipes import Hyperparameters, finetune_args
from taco_fairseq.glue.runner import selected_validation
from taco_fairseq.glue.tasks import get_task


def build(glue_databin, trained_checkpoint, name, *extra):
    """The task, model and criterion of the GLUE recipe for ``name`` (random head)."""
    task = get_task(name)
    args = finetune_args(
        task, glue_databin / name, trained_checkpoint / "checkpoint_last.pt", arch="roberta_tiny",
        max_positions=64, train_rows=100, hyper=Hyperparameters(16, 1e-4, 1), seed=1,
        save_dir=Path("unused"), user_dir=Path(USER_DIR), extra=["--cpu", *extra],
    )
    cfg = convert_namespace_to_omegaconf(
        options.parse_args_and_arch(options.get_training_parser(), args))
    fairseq_task = tasks.setup_task(cfg.task)
    fairseq_task.load_dataset("valid")
    torch.manual_seed(1)
    model = fairseq_task.build_model(cfg.model).eval()
    return fairseq_task, model, fairseq_task.build_criterion(cfg.criterion)


def balance_head(task, model):
    """Shift the random head's class-1 bias to the median logit margin of the first batches,
    so that the classifier predicts both classes (MCC and F1 of a constant one are trivial)."""
    sample = first_batch(task, batch_size=64)
    with torch.no_grad():
        logits, _ = model(**sample["net_input"], features_only=True,
                          classification_head_name="sentence_classification_head")
        margin = (logits[:, 1] - logits[:, 0]).median()
        model.classification_heads["sentence_classification_head"].out_proj.bias[1] -= margin


def two_workers(task, model, criterion, batches=6):
    """Logging outputs of ``batches`` validation batches, summed key by key within and then
    across two 'workers' (alternate batches), as fairseq's fast stat sync does; and the
    model's predictions and targets of those batches."""
    itr = task.get_batch_iterator(task.dataset("valid"), max_sentences=16, seed=1)
    workers, pred, targ = [Counter(), Counter()], [], []
    with torch.no_grad():
        for i, sample in zip(range(batches), itr.next_epoch_itr(shuffle=False)):
            _, _, log = criterion(model, sample)
            assert all(isinstance(v, (int, float, bool, torch.Tensor)) for v in log.values())
            workers[i % 2].update(log)
            logits, _ = model(**sample["net_input"], features_only=True,
                              classification_head_name="sentence_classification_head")
            pred += (logits.view(-1) if criterion.regression_target
                     else logits.argmax(-1)).tolist()
            targ += sample["target"].view(-1).tolist()
    summed = {k: workers[0][k] + workers[1][k] for k in set(workers[0]) | set(workers[1])}
    with metrics.aggregate() as agg:
        criterion.reduce_metrics([summed])
        return agg.get_smoothed_values(), pred, targ


def label_values(task, classes):
    labels = task.label_dictionary
    return [int(labels[c + labels.nspecial]) for c in classes]


def test_classification_metrics_are_exact_across_workers(glue_databin, trained_checkpoint):
    task, model, criterion = build(glue_databin, trained_checkpoint, "MRPC")
    balance_head(task, model)
    logged, pred, targ = two_workers(task, model, criterion)
    pred, targ = label_values(task, pred), label_values(task, targ)
    assert 0 < sum(pred) < len(pred), "the test needs both classes predicted"
    f1 = 100 * f1_score(targ, pred)
    assert logged["f1"] == pytest.approx(f1, abs=1e-9)
    assert logged["acc_and_f1"] == pytest.approx((f1 + 100 * accuracy_score(targ, pred)) / 2)
    assert "mcc" not in logged  # only with --report-mcc, as fairseq's criterion

    task, model, criterion = build(glue_databin, trained_checkpoint, "CoLA")
    balance_head(task, model)
    logged, pred, targ = two_workers(task, model, criterion)
    pred, targ = label_values(task, pred), label_values(task, targ)
    assert len(set(pred)) == 2
    assert logged["mcc"] == pytest.approx(100 * matthews_corrcoef(targ, pred), abs=1e-9)
    assert logged["accuracy"] == pytest.approx(100 * accuracy_score(targ, pred), abs=0.05)

    # fairseq's own criterion logs lists, which fairseq's summing across workers cannot add
    stock = SentencePredictionCriterion(SentencePredictionConfig(report_mcc=True), task)
    with torch.no_grad():
        _, _, log = stock(model, first_batch(task, batch_size=8))
    assert isinstance(log["pred"], list)
    with pytest.raises(TypeError):
        sum(worker["pred"] for worker in (log, log))


def test_pearson_is_exact_across_workers(glue_databin, trained_checkpoint):
    task, model, criterion = build(glue_databin, trained_checkpoint, "STS-B")
    logged, pred, targ = two_workers(task, model, criterion)
    assert logged["pearson"] == pytest.approx(100 * pearsonr(pred, targ)[0], rel=1e-9)
    assert "spearman" not in logged


@pytest.mark.filterwarnings("ignore::UserWarning")  # sklearn: a label without examples
@pytest.mark.parametrize("labels", [("0", "1"), ("1", "0"), ("0", "2"), ("1", "2"),
                                    ("0", "1", "2"), ("-1", "1"), ("0",)])
def test_metrics_of_any_integer_labels_equal_sklearn(labels, monkeypatch):
    """mcc and accuracy over all labels, f1 of label 1 against the rest (0 if 1 is no label),
    from statistics summed over batches and two workers, whatever the dictionary order."""
    rng = np.random.default_rng(len(labels))
    values = [int(label) for label in labels]
    batches = [(rng.choice(values, 20).tolist(), rng.choice(values, 20).tolist())
               for _ in range(4)]
    monkeypatch.setattr(SentencePredictionCriterion, "forward", lambda self, model, batch, _: (
        0.0, 20, {"loss": 0.0, "ntokens": 20, "nsentences": 20, "sample_size": 20,
                  "ncorrect": sum(map(operator.eq, *batch)), "pred": batch[0],
                  "targ": batch[1], "report_mcc": True, "report_acc_and_f1": True}))
    criterion = SummableSentencePredictionCriterion(
        SentencePredictionConfig(report_mcc=True, report_acc_and_f1=True), label_task(labels))
    workers = [Counter(), Counter()]
    for i, batch in enumerate(batches):
        workers[i % 2].update(criterion(None, batch)[2])
    with metrics.aggregate(new_root=True) as agg:  # as fairseq-train's validation
        criterion.reduce_metrics([{k: workers[0][k] + workers[1][k] for k in workers[0]}])
        logged = agg.get_smoothed_values()
    pred, targ = (sum((batch[k] for batch in batches), []) for k in (0, 1))
    assert logged["mcc"] == pytest.approx(100 * matthews_corrcoef(targ, pred), abs=1e-9)
    f1 = 100 * f1_score(targ, pred, labels=[1], average="macro", zero_division=0)
    assert logged["f1"] == pytest.approx(f1, abs=1e-9)
    accuracy = 100 * accuracy_score(targ, pred)
    assert logged["acc_and_f1"] == pytest.approx((accuracy + f1) / 2, abs=1e-9)


def label_task(labels):
    """A stand-in task whose label dictionary holds ``labels`` in this order."""
    dictionary = Dictionary()
    for label in labels:
        dictionary.add_symbol(label)
    return SimpleNamespace(label_dictionary=dictionary,
                           cfg=SimpleNamespace(num_classes=len(labels)))


@pytest.mark.parametrize("labels", [("entailment", "not_entailment"), ("0", "1.5")])
def test_mcc_refuses_labels_that_are_not_integers(labels):
    with pytest.raises(ValueError, match="integer class labels"):
        SummableSentencePredictionCriterion(SentencePredictionConfig(report_mcc=True),
                                            label_task(labels))


def test_two_process_validation(glue_databin, trained_checkpoint, tmp_path):
    """2 workers (gloo on the CPU): validation with --report-acc-and-f1 completes, and the
    logged F1 equals scikit-learn on the predictions of the saved checkpoint."""
    task = get_task("MRPC")
    args = finetune_args(
        task, glue_databin / "MRPC", trained_checkpoint / "checkpoint_last.pt",
        arch="roberta_tiny", max_positions=64, train_rows=3668,
        hyper=Hyperparameters(16, 1e-3, 1), seed=1, save_dir=tmp_path, user_dir=Path(USER_DIR),
        extra=["--cpu", "--max-update", "2", "--num-workers", "0", "--distributed-backend",
               "gloo", "--ddp-backend", "legacy_ddp", "--distributed-no-spawn",
               "--distributed-world-size", "2", "--distributed-init-method",
               f"tcp://127.0.0.1:{_free_port()}"],
    )
    procs = [subprocess.Popen([sys.executable, "-m", "fairseq_cli.train", *args,
                               "--distributed-rank", str(rank)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for rank in range(2)]
    outputs = [p.communicate(timeout=900)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs[0][-3000:] + outputs[1][-3000:]
    log = tmp_path / "rank0.log"
    log.write_text(outputs[0])
    record = selected_validation(log, "f1")
    predictions = FinetunedModel(tmp_path / "checkpoint_best.pt", glue_databin / "MRPC", cpu=True)
    dev = predictions.predict("valid")
    assert len(dev.predicted) == 408
    f1 = 100 * f1_score(dev.gold, dev.predicted, pos_label="1")
    accuracy = 100 * accuracy_score(dev.gold, dev.predicted)
    assert record["valid_f1"] == pytest.approx(f1, rel=1e-5)  # json log: 6 digits
    assert record["valid_accuracy"] == pytest.approx(accuracy, abs=0.05)  # fairseq rounds to .1


def _free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
