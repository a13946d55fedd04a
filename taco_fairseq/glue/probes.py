"""Frozen-encoder probes of a pre-training checkpoint: what its representations hold without
fine-tuning, cheap enough to run at every checkpoint and seed of a comparison.

Three measures, each deterministic given the checkpoint (eval mode, no dropout, no sampling but
a seeded subsample of the training examples when asked):

* **Linear probes** on the GLUE tasks (:data:`PROBE_TASKS`): a sentence's *features* are the
  mean of the encoder's last-layer states over its pieces (``<s>``, ``</s>`` and padding left
  out), the sentence encoded as in pre-training (``<s>`` pieces ``</s>``, cut to the model's
  positions). Mean pooling, not the ``<s>`` state: no pre-training loss of this plugin reads the
  ``<s>`` state, so before fine-tuning it is an arbitrary mixture, while the mean is the usual
  frozen-feature choice (SentEval, Conneau & Kiela 2018; Sentence-BERT, Reimers & Gurevych
  2019). Pair tasks (RTE, MRPC, STS-B) encode each sentence alone and take SentEval's
  ``[u, v, |u − v|, u ⊙ v]``: the encoders never saw two sentences joined by separators in
  pre-training (that format is learnt in fine-tuning), and the separate encodings are the ones
  the unsupervised STS-B below uses. Features are standardized (scikit-learn's
  ``StandardScaler``, fitted on the train split); classification tasks get scikit-learn's
  ``LogisticRegressionCV`` (L2, lbfgs), regression (STS-B) ``RidgeCV``, their regularization
  chosen by stratified (classification) or plain k-fold cross-validation on the train split
  with fixed folds (``seed``), scored by the task's official metric
  (:func:`taco_fairseq.glue.metrics.metric_functions`); the score is that metric on the dev
  split, in points (:func:`taco_fairseq.glue.metrics.score_predictions`: MCC for CoLA, F1 for
  MRPC, Spearman for STS-B, accuracy for SST-2 and RTE).
* **Unsupervised STS-B**: Spearman correlation (points) between the gold scores of STS-B's dev
  pairs and the cosine of the two sentences' mean-pooled last-layer states (as Reimers &
  Gurevych 2019, Table 1, evaluate frozen BERT).
* **Neighbour attention** on held-out text: per layer, head and piece ``i`` of a sentence, the
  attention weight it puts on positions ``i − 1`` and ``i + 1`` (summed), and the entropy in
  bits of its attention row; averaged over heads and pieces, per layer and over the layers.
  Uniform attention over the ``n`` positions of a sentence (``<s>`` and ``</s>`` included) puts
  ``2/n`` on the neighbours, with entropy ``log2 n``: both reported, averaged over the same
  pieces, as the reference. Weights are recomputed from each layer's input with fairseq's
  ``MultiheadAttention`` projections (``softmax(q·k/√d)``; fairseq returns them only averaged
  over heads), checked against fairseq's own in the tests.

A score that is undefined (the Spearman or Pearson correlation of constant predictions, e.g. a
probe that predicts one value for every STS-B pair) counts as 0 points, as GLUE's scorer and
the comparison's fine-tuning scores count it, with a warning naming the checkpoint and task: a
NaN would leave the pre-training seed out of the comparison's paired tests.

Measured cost per checkpoint and the settings of the comparison: docs/analysis.md.
"""

import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor

from ..analysis.batching import length_batches, pad
from ..neighbour_attention import head_weights, neighbour_sums
from ..prep.pretraining import INFO_FILE
from .databin import LABEL_DIR
from .metrics import metric_functions, score_predictions
from .pretrained import check_glue_data_fits
from .tasks import GlueTask, get_task

logger = logging.getLogger(__name__)

#: The GLUE tasks probed by default (the five of ``../shared/data/glue``).
PROBE_TASKS = ("RTE", "MRPC", "CoLA", "STS-B", "SST-2")
#: Logistic regression's inverse regularization strengths tried by cross-validation.
LOGISTIC_CS = tuple(10.0 ** k for k in range(-4, 3))
#: Ridge's regularization strengths tried by cross-validation.
RIDGE_ALPHAS = tuple(10.0 ** k for k in range(-2, 7))


@dataclass(frozen=True)
class ProbeOptions:
    """How the probes are run.

    Attributes:
        tasks: GLUE task names probed (each must be prepared in the GLUE directory).
        max_train: at most this many training examples per task, a uniform subsample without
            replacement drawn with ``seed`` (None: all; SST-2 has 67,349).
        folds: cross-validation folds for the regularization.
        seed: seeds the folds and the subsample.
        batch_tokens: padded tokens per forward pass (sentences are batched by length).
        max_iter: lbfgs iterations of the logistic regression.
    """

    tasks: Sequence[str] = PROBE_TASKS
    max_train: Optional[int] = None
    folds: int = 5
    seed: int = 1
    batch_tokens: int = 8192
    max_iter: int = 1000


@dataclass
class TaskSplit:
    """One split of a prepared GLUE task.

    Attributes:
        inputs: per input column (one or two), the sentences as ``[length]`` int64 piece ids
            ending with ``</s>`` (without ``<s>``), as the prepared data-bin holds them.
        targets: ``[examples]`` class indices (int64) or, for STS-B, gold scores (float64).
    """

    inputs: List[List[Tensor]]
    targets: np.ndarray


def read_split(task: GlueTask, task_dir: Path, split: str, dictionary) -> TaskSplit:
    """Read ``split`` of a task prepared by ``taco-prepare-glue`` (``input0``, ``input1``,
    ``label``; :mod:`taco_fairseq.prep.glue_data`) with fairseq's indexed datasets.

    Raises:
        FileNotFoundError: a file of the split is missing.
        ValueError: the inputs and labels differ in length.
    """
    from fairseq.data import Dictionary, data_utils

    task_dir = Path(task_dir)
    inputs = []
    for k in range(task.num_inputs):
        prefix = task_dir / f"input{k}" / split
        dataset = data_utils.load_indexed_dataset(str(prefix), dictionary)
        if dataset is None:
            raise FileNotFoundError(f"{prefix}.bin/.idx not found: prepare {task.name} with "
                                    "taco-prepare-glue")
        inputs.append([dataset[i].long() for i in range(len(dataset))])
    if task.regression:
        path = task_dir / LABEL_DIR / f"{split}.label"
        if not path.is_file():
            raise FileNotFoundError(f"{path} not found: prepare {task.name} with "
                                    "taco-prepare-glue")
        targets = np.array([float(v) for v in path.read_text(encoding="utf-8").split()])
    else:
        labels = Dictionary.load(str(task_dir / LABEL_DIR / "dict.txt"))
        prefix = task_dir / LABEL_DIR / split
        dataset = data_utils.load_indexed_dataset(str(prefix), labels)
        if dataset is None:
            raise FileNotFoundError(f"{prefix}.bin/.idx not found: prepare {task.name} with "
                                    "taco-prepare-glue")
        targets = np.array([int(dataset[i][0]) - labels.nspecial for i in range(len(dataset))])
    if any(len(column) != len(targets) for column in inputs):
        raise ValueError(f"{task_dir}: {split} has {[len(c) for c in inputs]} inputs but "
                         f"{len(targets)} labels; prepare it again")
    return TaskSplit(inputs, targets)


def with_bos(pieces: Sequence[Tensor], dictionary, max_positions: int) -> List[Tensor]:
    """``<s>`` + pieces + ``</s>`` of each ``[length]`` sentence ending with ``</s>``, cut to
    ``max_positions`` (the first ``max_positions − 2`` pieces kept)."""
    bos, eos = torch.tensor([dictionary.bos()]), torch.tensor([dictionary.eos()])
    return [torch.cat([bos, p[:-1][: max_positions - 2], eos]) for p in pieces]


def _piece_mask(tokens: Tensor, dictionary) -> Tensor:
    """``[batch, length]`` True at the pieces (not ``<s>``, ``</s>``, padding)."""
    special = torch.tensor([dictionary.bos(), dictionary.eos(), dictionary.pad()])
    return ~torch.isin(tokens, special.to(tokens.device))


def mean_states(model, sentences: Sequence[Tensor], dictionary,
                batch_tokens: int = 8192) -> np.ndarray:
    """The mean of the last-layer states over each sentence's pieces.

    Args:
        model: a fairseq RoBERTa model (``model(tokens, features_only=True)[0]`` is
            ``[batch, length, hidden]``); put in eval mode here.
        sentences: ``[length]`` int64 ids, ``<s>`` … ``</s>`` (:func:`with_bos`).
        dictionary: the model's dictionary.
        batch_tokens: padded tokens per forward pass (:func:`length_batches`).

    Returns:
        ``[sentences, hidden]`` float64; a sentence without pieces gets zeros.
    """
    model.eval()
    device = next(model.parameters()).device
    features = None
    with torch.no_grad():
        for batch in length_batches([len(s) for s in sentences], batch_tokens):
            tokens = pad([sentences[i] for i in batch], dictionary.pad()).to(device)
            states = model(tokens, features_only=True)[0].double()
            mask = _piece_mask(tokens, dictionary).unsqueeze(-1).double()
            means = (states * mask).sum(1) / mask.sum(1).clamp(min=1)
            if features is None:
                features = np.zeros((len(sentences), states.size(-1)))
            features[batch] = means.cpu().numpy()
    return features


def pair_features(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """SentEval's pair features ``[u, v, |u − v|, u ⊙ v]`` (Conneau et al. 2017, §3.3):
    ``[n, hidden]`` twice → ``[n, 4 hidden]``."""
    return np.concatenate([u, v, np.abs(u - v), u * v], axis=1)


def subsample(n: int, max_train: Optional[int], seed: int) -> np.ndarray:
    """Sorted indices of a uniform subsample of ``max_train`` of ``n`` examples without
    replacement (numpy's ``default_rng(seed)``); all of them when ``max_train`` is None or
    not below ``n``."""
    if max_train is None or max_train >= n:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, max_train, replace=False))


def fit_probe(task: GlueTask, train_x: np.ndarray, train_y: np.ndarray, dev_x: np.ndarray,
              dev_y: np.ndarray, options: ProbeOptions = ProbeOptions()) -> Dict[str, float]:
    """Fit the task's probe on the train features and score it on dev (module doc).

    Args:
        task: the GLUE task (its labels, regression or not, official metric).
        train_x, dev_x: ``[examples, features]``.
        train_y, dev_y: class indices, or scores for STS-B.

    Returns:
        ``score`` (the official dev metric, points) and ``regularization`` (the chosen C of
        the logistic regression, or alpha of the ridge).

    Raises:
        ValueError: fewer training examples of a class than ``options.folds``.
    """
    from sklearn.linear_model import LogisticRegressionCV, RidgeCV
    from sklearn.metrics import make_scorer
    from sklearn.model_selection import KFold, StratifiedKFold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    # the official metric on class indices (F1's positive class: its index) or scores
    positive = None if task.positive_label is None else task.labels.index(task.positive_label)
    scoring = make_scorer(metric_functions(task, positive)[task.glue_metric])
    if task.regression:
        model = RidgeCV(alphas=RIDGE_ALPHAS, scoring=scoring,
                        cv=KFold(options.folds, shuffle=True, random_state=options.seed))
        pipeline = make_pipeline(StandardScaler(), model).fit(train_x, train_y)
        predicted = pipeline.predict(dev_x).tolist()
        gold = dev_y.tolist()
        chosen = float(model.alpha_)
    else:
        counts = np.bincount(train_y, minlength=task.num_classes)
        if counts.min() < options.folds:
            raise ValueError(f"{task.name}: {counts.min()} training examples of a class, fewer "
                             f"than the {options.folds} cross-validation folds")
        model = LogisticRegressionCV(
            Cs=list(LOGISTIC_CS), l1_ratios=(0.0,), max_iter=options.max_iter,
            cv=StratifiedKFold(options.folds, shuffle=True, random_state=options.seed),
            scoring=scoring, use_legacy_attributes=False)
        pipeline = make_pipeline(StandardScaler(), model).fit(train_x, train_y)
        predicted = [task.labels[c] for c in pipeline.predict(dev_x)]
        gold = [task.labels[c] for c in dev_y]
        chosen = float(model.C_)
    return {"score": score_predictions(task, predicted, gold)[task.glue_metric],
            "regularization": chosen}


def cosine_spearman(u: np.ndarray, v: np.ndarray, gold: np.ndarray) -> float:
    """Spearman correlation (points, STS-B's metric:
    :func:`taco_fairseq.glue.metrics.score_predictions`) of the gold scores with the cosines of
    the rows of ``u`` and ``v`` (``[n, hidden]`` each); a zero row's cosine is 0. NaN when the
    cosines are constant."""
    norms = np.linalg.norm(u, axis=1) * np.linalg.norm(v, axis=1)
    cosines = (u * v).sum(1) / np.where(norms > 0, norms, 1.0)
    return score_predictions(get_task("STS-B"), cosines.tolist(), list(gold))["spearman"]


def defined_score(value: float, checkpoint, what: str) -> float:
    """``value`` (points), or 0 with a warning naming ``checkpoint`` and ``what`` when it is
    NaN (module doc: GLUE's convention for an undefined correlation)."""
    if math.isfinite(value):
        return value
    logger.warning("%s: %s is undefined (%s: e.g. a correlation of constant predictions); "
                   "counted as 0 points, as GLUE's scorer does", checkpoint, what, value)
    return 0.0


def probe_tasks(checkpoint, glue_data: Path, options: ProbeOptions = ProbeOptions(),
                unsupervised: bool = True) -> Dict[str, float]:
    """The linear probes of :attr:`ProbeOptions.tasks` and the unsupervised STS-B of one model.

    Args:
        checkpoint: the loaded checkpoint (:class:`taco_fairseq.analysis.checkpoints.Checkpoint`
            : ``path``, for messages, and ``hub``, the model on any device with the data-bin it
            was loaded with, whose dictionary and SentencePiece model were checked against the
            checkpoint on loading); the GLUE data is checked against that data-bin
            (:func:`taco_fairseq.glue.pretrained.check_glue_data_fits`), the file is not read
            again.
        glue_data: the prepared GLUE directory (``<TASK>/input0``, ``input1``, ``label``).
        unsupervised: also ``sts_unsupervised`` (when STS-B is prepared).

    Returns:
        ``probe_<TASK>`` per task (points), ``probe_average`` (their mean) and
        ``sts_unsupervised`` (points), an undefined score counted as 0 (:func:`defined_score`);
        the chosen C or alpha of each task is logged.

    Raises:
        FileNotFoundError: a task is not prepared in ``glue_data``.
        ValueError: the GLUE data was prepared with another dictionary or SentencePiece
            model, or as :func:`fit_probe`.
    """
    glue_data = Path(glue_data)
    model, dictionary = checkpoint.hub.model, checkpoint.hub.task.source_dictionary
    data_bin = Path(checkpoint.hub.cfg.task.data)
    max_positions = model.max_positions()
    row: Dict[str, float] = {}
    names = list(dict.fromkeys(options.tasks))
    if unsupervised and "STS-B" not in names and (glue_data / "STS-B" / INFO_FILE).is_file():
        names.append("STS-B")
    for name in names:
        started = time.perf_counter()
        task, task_dir = get_task(name), glue_data / name
        if not (task_dir / INFO_FILE).is_file():
            raise FileNotFoundError(f"{task_dir}: {name} is not prepared (no {INFO_FILE}); "
                                    f"prepare it with taco-prepare-glue --tasks {name}")
        check_glue_data_fits(data_bin, task_dir, str(checkpoint.path))
        features = {}
        probed = name in options.tasks
        for split in ("train", "valid") if probed else ("valid",):
            data = read_split(task, task_dir, split, dictionary)
            keep = (subsample(len(data.targets), options.max_train, options.seed)
                    if split == "train" else np.arange(len(data.targets)))
            states = [mean_states(model, with_bos([column[i] for i in keep], dictionary,
                                                  max_positions), dictionary,
                                  options.batch_tokens) for column in data.inputs]
            features[split] = (states, data.targets[keep])
        dev_states, dev_y = features["valid"]
        if probed:
            train_states, train_y = features["train"]
            join = (lambda s: s[0]) if len(train_states) == 1 else (lambda s: pair_features(*s))
            fitted = fit_probe(task, join(train_states), train_y, join(dev_states), dev_y,
                               options)
            row[f"probe_{name}"] = defined_score(fitted["score"], checkpoint.path,
                                                 f"the {name} probe's {task.glue_metric}")
            logger.info("probe %s: %.2f points, regularization %g (grid %s)", name,
                        fitted["score"], fitted["regularization"],
                        "alphas" if task.regression else "Cs")
        if name == "STS-B" and unsupervised:
            row["sts_unsupervised"] = defined_score(cosine_spearman(*dev_states, dev_y),
                                                    checkpoint.path, "the unsupervised STS-B")
        logger.info("%s: %s train, %d dev examples, %.1f s", name,
                    len(features["train"][1]) if probed else "no", len(dev_y),
                    time.perf_counter() - started)
    scores = [row[f"probe_{t}"] for t in options.tasks]
    if scores:
        row["probe_average"] = float(np.mean(scores))
    return row


def neighbour_attention(model, sentences: Sequence[Tensor], dictionary,
                        batch_tokens: int = 8192) -> Dict[str, float]:
    """The neighbour-attention share and attention entropy of a model (module doc).

    Args:
        model: a fairseq RoBERTa model whose encoder layers are
            ``model.encoder.sentence_encoder.layers`` with ``self_attn``; eval mode is set here.
        sentences: ``[length]`` int64 ids, ``<s>`` … ``</s>``.
        batch_tokens: padded tokens per forward pass.

    Returns:
        ``neighbour_attention`` (mean over layers, heads and pieces of the weight on
        positions i ± 1), ``neighbour_attention_layer<L>`` (L = 1, 2, …),
        ``neighbour_attention_uniform`` (the mean of 2/n), ``attention_entropy`` (bits, mean
        over layers, heads and pieces), ``attention_entropy_layer<L>``,
        ``attention_entropy_uniform`` (the mean of log2 n); the number of pieces averaged
        over is logged.

    Raises:
        ValueError: no sentence has a piece.
    """
    layers = model.encoder.sentence_encoder.layers
    captured: List[Tuple[Tensor, Optional[Tensor]]] = []

    def capture(module, args, kwargs):
        captured.append((kwargs["query"], kwargs.get("key_padding_mask")))

    hooks = [layer.self_attn.register_forward_pre_hook(capture, with_kwargs=True)
             for layer in layers]
    neighbour = torch.zeros(len(layers), dtype=torch.float64)
    entropy = torch.zeros(len(layers), dtype=torch.float64)
    uniform_share = uniform_entropy = 0.0
    pieces = 0
    model.eval()
    device = next(model.parameters()).device
    try:
        with torch.no_grad():
            for batch in length_batches([len(s) for s in sentences], batch_tokens):
                tokens = pad([sentences[i] for i in batch], dictionary.pad()).to(device)
                captured.clear()
                model(tokens, features_only=True)
                anchors = _piece_mask(tokens, dictionary)  # [batch, length]
                n = tokens.ne(dictionary.pad()).sum(1, keepdim=True).expand_as(tokens)[anchors]
                pieces += int(anchors.sum())
                uniform_entropy += float(torch.log2(n.double()).sum())
                for layer, (query, padding) in zip(range(len(layers)), captured):
                    weights = head_weights(layers[layer].self_attn, query, padding)
                    sums = neighbour_sums(weights, anchors, padding)
                    neighbour[layer] += sums.share.cpu()
                    if layer == 0:
                        uniform_share += float(sums.uniform)
                    bits = -(weights * torch.log2(weights.clamp(min=1e-30))).sum(-1)
                    mask = anchors[:, None, :].expand_as(bits)
                    entropy[layer] += bits[mask].double().sum().cpu() / weights.size(1)
    finally:
        for hook in hooks:
            hook.remove()
    if pieces == 0:
        raise ValueError("no sentence with a piece to measure the attention of")
    neighbour, entropy = neighbour / pieces, entropy / pieces
    row = {"neighbour_attention": float(neighbour.mean()),
           "neighbour_attention_uniform": uniform_share / pieces,
           "attention_entropy": float(entropy.mean()),
           "attention_entropy_uniform": uniform_entropy / pieces}
    logger.info("neighbour attention over %d pieces", pieces)
    for layer in range(len(layers)):
        row[f"neighbour_attention_layer{layer + 1}"] = float(neighbour[layer])
        row[f"attention_entropy_layer{layer + 1}"] = float(entropy[layer])
    return row
