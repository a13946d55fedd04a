"""A token-level probe of syntax: gold part-of-speech tags read off a frozen encoder's states.

The sentence-level GLUE probes (:mod:`taco_fairseq.glue.probes`) mean-pool a sentence's
states, so they cannot see word order, the first thing a small masked LM learns; a word's
part of speech in context can (Tenney et al. 2019, "What do you learn from context?", §3;
Hewitt & Manning 2019 probe the same frozen states for syntax). The measure:

* **Data**: two CoNLL-U files (:mod:`.conllu`), one to train the probe on and one to score it
  on; this project uses UD English EWT's dev and test splits (``../shared/data/ud-english-ewt``:
  25,147 and 25,094 words). Each sentence is encoded whole and unmasked, as the checkpoint's
  SentencePiece model and dictionary encode text (``<s>`` pieces ``</s>``, cut to the model's
  positions).
* **Features**: per syntactic word, the encoder's state at the word's *first piece*: the
  first SentencePiece piece whose span overlaps the word's span in the text (piece spans
  include the space before a word; a piece of spaces only belongs to no word), at every layer:
  layer 0 is the embedding output (``inner_states[0]`` of fairseq's encoder: token and
  position embeddings after their LayerNorm, no context), layer L the L-th Transformer
  layer's output. A word whose first piece lies beyond the cut is left out (counted); two
  words can share a piece (a piece that spans both: "it." → ``it.``), then they share the
  feature.
* **Probe**: per layer, features standardized (scikit-learn's ``StandardScaler``, fitted on
  the train words) and a multinomial logistic regression (``LogisticRegression``, lbfgs, L2,
  inverse regularization :data:`POS_C`, tolerance :data:`POS_TOL`) fitted on the train
  words; scored on the test words as **accuracy** (points) over all words and over the
  **ambiguous** words: those whose form (FORM as written, case kept) carries more than one
  UPOS tag across train and test, where the tag cannot be read off the word alone.
* **Baseline**: each form's most frequent tag in train (ties: the tag first seen), the most
  frequent tag of train for unseen forms; scored the same way, the same for every checkpoint.

Deterministic given the checkpoint (eval mode; lbfgs has no randomness). Measured cost per
checkpoint: docs/analysis.md.
"""

import logging
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor

from .batching import length_batches, pad
from .conllu import Sentence, read_conllu

logger = logging.getLogger(__name__)

#: Inverse regularization strength of the logistic regression (scikit-learn's ``C``), on
#: standardized features, and lbfgs's stopping tolerance (docs/analysis.md: the choice,
#: measured).
POS_C = 1.0
POS_TOL = 1e-3


@dataclass(frozen=True)
class PosProbeData:
    """The probe's words, read once per pair of files (:meth:`read`).

    Attributes:
        train, test: the sentences.
        ambiguous: the forms with more than one UPOS tag over ``train`` and ``test``.
        tags: every UPOS tag of ``train``, sorted; a test tag unseen in train is always
            scored wrong.
    """

    train: Tuple[Sentence, ...]
    test: Tuple[Sentence, ...]
    ambiguous: frozenset
    tags: Tuple[str, ...]

    @classmethod
    def read(cls, train: Path, test: Path) -> "PosProbeData":
        """Read ``train`` and ``test`` (:func:`.conllu.read_conllu`).

        Raises:
            FileNotFoundError, CoNLLUError: as :func:`.conllu.read_conllu`.
        """
        train_sentences = tuple(read_conllu(train))
        test_sentences = tuple(read_conllu(test))
        seen: Dict[str, set] = {}
        for sentence in train_sentences + test_sentences:
            for word in sentence.words:
                seen.setdefault(word.form, set()).add(word.upos)
        tags = sorted({w.upos for s in train_sentences for w in s.words})
        return cls(train_sentences, test_sentences,
                   frozenset(f for f, t in seen.items() if len(t) > 1), tuple(tags))

    def baseline(self) -> Dict[str, float]:
        """The most-frequent-tag baseline (module doc): ``pos_accuracy_baseline`` and
        ``pos_accuracy_ambiguous_baseline``, points on the test words."""
        counts: Dict[str, Counter] = {}
        for sentence in self.train:
            for word in sentence.words:
                counts.setdefault(word.form, Counter())[word.upos] += 1
        overall = Counter(w.upos for s in self.train for w in s.words).most_common(1)[0][0]
        words = [w for s in self.test for w in s.words]
        predicted = [counts[w.form].most_common(1)[0][0] if w.form in counts else overall
                     for w in words]
        return _accuracies(predicted, words, self.ambiguous, "_baseline")


@dataclass(frozen=True)
class EncodedWords:
    """Sentences encoded for the probe.

    Attributes:
        tokens: per sentence, ``[length]`` int64 ids, ``<s>`` pieces ``</s>``.
        positions: per sentence, each word's first-piece position in ``tokens`` (−1: beyond
            the cut).
    """

    tokens: List[Tensor]
    positions: List[List[int]]


def encode_words(sentences: Sequence[Sentence], processor, dictionary,
                 max_positions: int) -> EncodedWords:
    """Encode each sentence's text with the SentencePiece ``processor`` and ``dictionary``
    (the pieces' ids, as ``hub.encode`` gives them: ``<s>`` pieces ``</s>``, at most
    ``max_positions``) and find each word's first piece (module doc).

    Args:
        processor: a ``sentencepiece.SentencePieceProcessor`` (the checkpoint's: fairseq's
            ``hub.bpe.sp``).
        dictionary: the checkpoint's fairseq dictionary (a piece it lacks is ``<unk>``).
    """
    bos, eos = dictionary.bos(), dictionary.eos()
    tokens, positions = [], []
    for sentence in sentences:
        pieces = processor.encode(sentence.text, out_type="proto").pieces[: max_positions - 2]
        ids = [bos, *(dictionary.index(p.piece) for p in pieces), eos]
        tokens.append(torch.tensor(ids, dtype=torch.long))
        first = []
        for word in sentence.words:
            hit = next((i for i, p in enumerate(pieces)
                        if p.begin < word.end and p.end > word.start
                        and p.surface.strip()), None)
            first.append(-1 if hit is None else hit + 1)  # + 1: after <s>
        positions.append(first)
    return EncodedWords(tokens, positions)


def word_states(model, encoded: EncodedWords, batch_tokens: int = 8192) -> List[np.ndarray]:
    """Per layer (0 = the embedding output, module doc), the states at the words' first
    pieces: ``[layers + 1]`` arrays of ``[words kept, hidden]`` float32, words in sentence
    order with those beyond the cut left out.

    Args:
        model: a fairseq RoBERTa model (``model(tokens, features_only=True,
            return_all_hiddens=True)[1]["inner_states"]``: ``[length, batch, hidden]`` per
            layer); put in eval mode here.
        encoded: :func:`encode_words`.
        batch_tokens: padded tokens per forward pass.
    """
    model.eval()
    device = next(model.parameters()).device
    pad_index = model.encoder.sentence_encoder.padding_idx
    per_sentence: Dict[int, List[np.ndarray]] = {}
    with torch.no_grad():
        for batch in length_batches([len(t) for t in encoded.tokens], batch_tokens):
            tokens = pad([encoded.tokens[i] for i in batch], pad_index).to(device)
            layers = model(tokens, features_only=True, return_all_hiddens=True)[1][
                "inner_states"]
            states = torch.stack(layers).transpose(1, 2).float().cpu()  # [L+1, batch, T, C]
            for row, i in enumerate(batch):
                kept = [p for p in encoded.positions[i] if p >= 0]
                per_sentence[i] = states[:, row, kept].numpy()
    layers = next(iter(per_sentence.values())).shape[0]
    return [np.concatenate([per_sentence[i][layer] for i in range(len(encoded.tokens))])
            for layer in range(layers)]


def pos_probe(hub, data: PosProbeData, c: float = POS_C,
              batch_tokens: int = 8192) -> Dict[str, float]:
    """The part-of-speech probe of one checkpoint (module doc).

    Args:
        hub: the loaded checkpoint's hub (``model``, ``task.source_dictionary``, ``bpe.sp``).
        data: the train and test words (:meth:`PosProbeData.read`).
        c: the logistic regression's inverse regularization strength.

    Returns:
        ``pos_accuracy`` and ``pos_accuracy_ambiguous`` (points, the last layer),
        ``pos_accuracy_layer<L>`` and ``pos_accuracy_ambiguous_layer<L>`` for L = 0 (the
        embedding output) … layers, and the baseline's ``pos_accuracy_baseline`` and
        ``pos_accuracy_ambiguous_baseline``; words left out beyond the cut are logged.

    Raises:
        ValueError: the train words carry a single tag (nothing to classify).
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if len(data.tags) < 2:
        raise ValueError(f"the part-of-speech probe's train words carry {len(data.tags)} "
                         "tag(s); give a treebank with several UPOS tags")
    started = time.perf_counter()
    model, dictionary = hub.model, hub.task.source_dictionary
    sides = {}
    for name, sentences in (("train", data.train), ("test", data.test)):
        encoded = encode_words(sentences, hub.bpe.sp, dictionary, model.max_positions())
        words = [w for s, p in zip(sentences, encoded.positions)
                 for w, i in zip(s.words, p) if i >= 0]
        dropped = sum(len(s.words) for s in sentences) - len(words)
        if dropped:
            logger.info("part-of-speech probe: %d %s words beyond the model's %d positions "
                        "left out", dropped, name, model.max_positions())
        sides[name] = (word_states(model, encoded, batch_tokens), words)
    (train_states, train_words), (test_states, test_words) = sides["train"], sides["test"]
    labels = np.array([w.upos for w in train_words])
    row: Dict[str, float] = {}
    for layer, (train_x, test_x) in enumerate(zip(train_states, test_states)):
        probe = make_pipeline(StandardScaler(),
                              LogisticRegression(C=c, tol=POS_TOL, max_iter=1000))
        probe.fit(train_x, labels)
        row.update(_accuracies(probe.predict(test_x).tolist(), test_words, data.ambiguous,
                               f"_layer{layer}"))
    last = len(train_states) - 1
    row["pos_accuracy"] = row[f"pos_accuracy_layer{last}"]
    row["pos_accuracy_ambiguous"] = row[f"pos_accuracy_ambiguous_layer{last}"]
    row.update(data.baseline())
    logger.info("part-of-speech probe: %.2f points (ambiguous words %.2f), %d train and %d test "
                "words, %.1f s", row["pos_accuracy"], row["pos_accuracy_ambiguous"],
                len(train_words), len(test_words), time.perf_counter() - started)
    return row


def _accuracies(predicted: Sequence[str], words, ambiguous: frozenset,
                suffix: str) -> Dict[str, float]:
    """``pos_accuracy<suffix>`` over ``words`` and ``pos_accuracy_ambiguous<suffix>`` over
    those whose form is ``ambiguous``, points (NaN with no ambiguous word)."""
    right = np.array([p == w.upos for p, w in zip(predicted, words)])
    mask = np.array([w.form in ambiguous for w in words])
    return {f"pos_accuracy{suffix}": 100.0 * float(right.mean()),
            f"pos_accuracy_ambiguous{suffix}": (100.0 * float(right[mask].mean()) if mask.any()
                                                else float("nan"))}
