"""sentence_prediction_summable: with GLUE metrics its logging outputs are gathered over
data-parallel workers instead of summed, and fairseq's metrics of the gathered outputs equal
scikit-learn/scipy on all predictions; a real 2-process (gloo) validation runs where
fairseq's own criterion fails."""

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

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
from fairseq.tasks import FairseqTask
from scipy.stats import pearsonr
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from conftest import USER_DIR, first_batch
from taco_fairseq.criterion import SummableSentencePredictionCriterion
from taco_fairseq.glue.predict import FinetunedModel
from taco_fairseq.glue.recipes import Hyperparameters, finetune_args
from taco_fairseq.glue.runner import selected_validation
from taco_fairseq.glue.tasks import get_task

#: fairseq logs the GLUE metrics rounded to 0.1 points.
ROUNDING = 0.05


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
    """Logging outputs of ``batches`` validation batches of two 'workers' (alternate batches),
    gathered as fairseq does for outputs that cannot be summed, and the metrics fairseq derives
    from them; and the model's predictions and targets of those batches."""
    itr = task.get_batch_iterator(task.dataset("valid"), max_sentences=16, seed=1)
    workers, pred, targ = [[], []], [], []
    with torch.no_grad():
        for i, sample in zip(range(batches), itr.next_epoch_itr(shuffle=False)):
            workers[i % 2].append(criterion(model, sample)[2])
            logits, _ = model(**sample["net_input"], features_only=True,
                              classification_head_name="sentence_classification_head")
            pred += (logits.view(-1) if criterion.regression_target
                     else logits.argmax(-1)).tolist()
            targ += sample["target"].view(-1).tolist()
    assert not FairseqTask.logging_outputs_can_be_summed(criterion)
    with metrics.aggregate(new_root=True) as agg:  # as fairseq-train's validation
        for step in zip(*workers):  # one step: the gathered outputs of both workers
            criterion.reduce_metrics(list(step))
        return agg.get_smoothed_values(), pred, targ


def label_values(task, classes):
    labels = task.label_dictionary
    return [int(labels[c + labels.nspecial]) for c in classes]


def test_classification_metrics_across_workers(glue_databin, trained_checkpoint):
    task, model, criterion = build(glue_databin, trained_checkpoint, "MRPC")
    balance_head(task, model)
    logged, pred, targ = two_workers(task, model, criterion)
    pred, targ = label_values(task, pred), label_values(task, targ)
    assert 0 < sum(pred) < len(pred), "the test needs both classes predicted"
    f1 = 100 * f1_score(targ, pred)
    assert logged["f1"] == pytest.approx(f1, abs=ROUNDING)
    assert logged["acc_and_f1"] == pytest.approx((f1 + 100 * accuracy_score(targ, pred)) / 2,
                                                 abs=ROUNDING)
    assert "mcc" not in logged  # only with --report-mcc, as fairseq's criterion

    task, model, criterion = build(glue_databin, trained_checkpoint, "CoLA")
    balance_head(task, model)
    logged, pred, targ = two_workers(task, model, criterion)
    pred, targ = label_values(task, pred), label_values(task, targ)
    assert len(set(pred)) == 2
    assert logged["mcc"] == pytest.approx(100 * matthews_corrcoef(targ, pred), abs=ROUNDING)
    assert logged["accuracy"] == pytest.approx(100 * accuracy_score(targ, pred), abs=ROUNDING)

    # fairseq's own criterion logs lists but declares them summable, which they are not
    stock = SentencePredictionCriterion(SentencePredictionConfig(report_mcc=True), task)
    with torch.no_grad():
        _, _, log = stock(model, first_batch(task, batch_size=8))
    assert isinstance(log["pred"], list) and FairseqTask.logging_outputs_can_be_summed(stock)
    with pytest.raises(TypeError):
        sum(worker["pred"] for worker in (log, log))


def test_pearson_across_workers(glue_databin, trained_checkpoint):
    task, model, criterion = build(glue_databin, trained_checkpoint, "STS-B")
    logged, pred, targ = two_workers(task, model, criterion)
    assert logged["pearson"] == pytest.approx(100 * pearsonr(pred, targ)[0], abs=ROUNDING)


def test_outputs_without_glue_metrics_are_summed(glue_databin, trained_checkpoint):
    _, _, criterion = build(glue_databin, trained_checkpoint, "RTE")
    assert not criterion.keep_pred_and_targ
    assert FairseqTask.logging_outputs_can_be_summed(criterion)


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


@pytest.mark.parametrize("flag", ["report_mcc", "report_acc_and_f1"])
def test_class_metrics_of_regression_scores_are_refused(flag):
    with pytest.raises(ValueError, match="are metrics of classes, not of --regression-target"):
        SummableSentencePredictionCriterion(
            SentencePredictionConfig(regression_target=True, **{flag: True}), label_task(["0"]))


@pytest.mark.parametrize("labels", [("0", "2"), ("0", "1", "2")])
def test_f1_refuses_labels_that_fairseqs_binary_f1_fails_on(labels):
    """fairseq's F1 is scikit-learn's binary F1 of label 1."""
    SummableSentencePredictionCriterion(SentencePredictionConfig(report_mcc=True),
                                        label_task(labels))  # MCC takes any integer labels
    with pytest.raises(ValueError, match="needs at most two labels, one of them 1"):
        SummableSentencePredictionCriterion(SentencePredictionConfig(report_acc_and_f1=True),
                                            label_task(labels))


@pytest.mark.parametrize("labels", [("0", "1"), ("1", "0"), ("-1", "1"), ("1", "+2"), ("0",)])
def test_f1_takes_labels_that_fairseqs_binary_f1_takes(labels):
    criterion = SummableSentencePredictionCriterion(
        SentencePredictionConfig(report_acc_and_f1=True), label_task(labels))
    assert criterion.keep_pred_and_targ and not criterion.logging_outputs_can_be_summed()
    # scikit-learn's binary F1 of label 1, as fairseq logs it, takes them too: perfect
    # predictions score 1, or 0 without a label 1
    values = [int(label) for label in labels]
    assert f1_score(values, values, zero_division=0) == (1.0 if 1 in values else 0.0)


def test_two_process_validation(glue_databin, trained_checkpoint, tmp_path):
    """2 workers (gloo on the CPU): validation with --report-acc-and-f1 completes, and the
    logged F1 equals scikit-learn on the predictions of the saved checkpoint. 408 dev examples
    in batches of 24 are 17 batches: one worker also validates fairseq's padding batch."""
    task = get_task("MRPC")
    args = finetune_args(
        task, glue_databin / "MRPC", trained_checkpoint / "checkpoint_last.pt",
        arch="roberta_tiny", max_positions=64, train_rows=3668,
        hyper=Hyperparameters(16, 1e-3, 1), seed=1, save_dir=tmp_path, user_dir=Path(USER_DIR),
        extra=["--cpu", "--max-update", "2", "--num-workers", "0", "--batch-size-valid", "24",
               "--distributed-backend",
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
    assert "valid_pred" not in record  # fairseq's empty meters of the predictions
    predictions = FinetunedModel(tmp_path / "checkpoint_best.pt", glue_databin / "MRPC", cpu=True)
    dev = predictions.predict("valid")
    assert len(dev.predicted) == 408
    f1 = 100 * f1_score(dev.gold, dev.predicted, pos_label="1")
    accuracy = 100 * accuracy_score(dev.gold, dev.predicted)
    assert record["valid_f1"] == pytest.approx(f1, abs=ROUNDING)
    assert record["valid_accuracy"] == pytest.approx(accuracy, abs=ROUNDING)


def _free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
