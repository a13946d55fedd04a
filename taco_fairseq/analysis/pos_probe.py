"""A token-level probe of syntax: gold part-of-speech tags read off a frozen encoder's states.

The sentence-level GLUE probes (:mod:`taco_fairseq.glue.probes`) mean-pool a sentence's
states, so they cannot see word order, the first thing a small masked LM learns; a word's
part of speech in context can (Tenney et al. 2019, "What do you learn from context?", §3;
Hewitt & Manning 2019 probe the same frozen states for syntax). The measure:

* **Data**: two CoNLL-U files (:mod:`.conllu`), one to train the probe on and one to score it
  on; this project uses UD English EWT's dev and test splits (``../shared/data/ud-english-ewt``:
  25,147 and 25,094 words). Each sentence is encoded unmasked, as the checkpoint's
  SentencePiece model and dictionary encode text (``<s>`` pieces ``</s>``), within the
  **window**: at most ``window`` positions per encoded sequence (default the model's
  ``max_positions``; a shorter one for a model trained on shorter blocks than it has
  positions, so that no untrained position is read). A sentence whose pieces fit
  (``window − 2``, for ``<s>`` and ``</s>``) is encoded whole, as ``hub.encode`` does; a longer
  one in overlapping windows of ``window − 2`` pieces (:func:`window_spans`), each encoded
  ``<s>`` window ``</s>``, with a stride of half a window and the last window aligned to the
  sentence's end.
* **Features**: per syntactic word, the encoder's state at the word's *first piece*: the
  first SentencePiece piece whose span overlaps the word's span in the text (piece spans
  include the space before a word; a piece of spaces only belongs to no word), at every layer:
  layer 0 is the embedding output (``inner_states[0]`` of fairseq's encoder: token and
  position embeddings after their LayerNorm, no context), layer L the L-th Transformer
  layer's output. A word of a windowed sentence takes its state from the window in which its
  first piece is most central (the most pieces of context on its less-served side; ties: the
  earlier window), so every word is kept. Two words can share a piece (a piece that spans
  both: "it." → ``it.``), then they share the feature; a word that overlaps no piece (none
  in EWT) is left out and counted.
* **Probe**: per layer, features standardized (scikit-learn's ``StandardScaler``, fitted on
  the train words) and a multinomial logistic regression (``LogisticRegression``, lbfgs, L2,
  inverse regularization :data:`POS_C`, tolerance :data:`POS_TOL`) fitted on the train
  words; scored on the test words as **accuracy** (points) over all words and over the
  **ambiguous** words: those whose form (FORM as written, case kept) carries more than one
  UPOS tag across train and test, where the tag cannot be read off the word alone.
* **Baseline**: each form's most frequent tag in train (ties: the tag first seen), the most
  frequent tag of train for unseen forms; scored the same way, the same for every checkpoint.

Deterministic given the checkpoint and window (eval mode; lbfgs has no randomness). Measured
cost per checkpoint: docs/analysis.md.

Before the windows, a sentence longer than the model's positions was **cut** there and the
words beyond the cut were left out: the rows of the studies measured before (e.g.
docs/results/pos-study) were measured so. On a 128-position model at the default window the
two differ only in the few EWT sentences longer than 126 pieces (docs/analysis.md); on a
32-position model the cut left out a large, biased share of the words (those of long
sentences).
"""

import logging
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

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


def window_spans(n_pieces: int, size: int) -> Tuple[List[Tuple[int, int]], List[int]]:
    """The windows a sentence of ``n_pieces`` pieces is encoded in, at most ``size`` pieces
    each (module doc), and the window each piece takes its state from.

    ``n_pieces <= size``: one window, the whole sentence. Longer: windows of ``size`` pieces
    starting every ``size // 2`` pieces (half a window) from 0, the last one starting at
    ``n_pieces − size`` (aligned to the end); they overlap and cover every piece. Piece ``i``
    in window ``[start, end)`` has ``min(i − start, end − 1 − i)`` pieces of context on its
    less-served side; it takes the window where that is largest (the most central; ties: the
    earlier window).

    Args:
        n_pieces: the sentence's pieces, >= 0.
        size: pieces per window (the window's positions less ``<s>`` and ``</s>``), >= 1.

    Returns:
        ``(spans, choice)``: ``spans`` the windows as ``(start, end)`` piece indices (end
        exclusive) in sentence order; ``choice`` ``[n_pieces]``: each piece's window, an index
        into ``spans``.

    Raises:
        ValueError: ``size`` < 1 or ``n_pieces`` < 0.
    """
    if size < 1 or n_pieces < 0:
        raise ValueError(f"window_spans({n_pieces}, {size}): needs n_pieces >= 0 and size >= 1")
    if n_pieces <= size:
        return [(0, n_pieces)], [0] * n_pieces
    stride = max(1, size // 2)
    spans = [(a, a + size) for a in range(0, n_pieces - size, stride)]
    spans.append((n_pieces - size, n_pieces))
    choice = []
    for i in range(n_pieces):
        best, context = -1, -1
        for w, (a, b) in enumerate(spans):
            if a <= i < b and min(i - a, b - 1 - i) > context:  # strict: ties keep the earlier
                best, context = w, min(i - a, b - 1 - i)
        choice.append(best)
    return spans, choice


def check_window(window: int, option: str = "--pos-window") -> int:
    """``window``, positions per encoded sequence (``<s>`` and ``</s>`` included), checked.

    Raises:
        ValueError: ``window`` < 3 (no room for a piece beside ``<s>`` and ``</s>``), naming
            ``option`` (the command lines' option by default).
    """
    if window < 3:
        raise ValueError(f"{option} {window}: the part-of-speech probe's window needs at least "
                         "3 positions (<s>, a piece, </s>); give the positions the model was "
                         "trained on, e.g. its --tokens-per-sample")
    return window


@dataclass(frozen=True)
class EncodedWords:
    """Sentences encoded for the probe, in windows (module doc).

    Attributes:
        tokens: per encoded sequence (a sentence that fits: one; a longer one: one per
            window, in order; sentence-major), ``[length <= window]`` int64 ids, ``<s>``
            pieces ``</s>``.
        rows: per sentence, each word's sequence: an index into ``tokens`` (−1: the word
            overlaps no piece).
        positions: per sentence, each word's first-piece position in its sequence
            (−1: the word overlaps no piece).
        windows: per sentence, how many sequences of ``tokens`` it is encoded in (1: it
            fits).
    """

    tokens: List[Tensor]
    rows: List[List[int]]
    positions: List[List[int]]
    windows: List[int]


def encode_words(sentences: Sequence[Sentence], processor, dictionary,
                 max_positions: int) -> EncodedWords:
    """Encode each sentence's text with the SentencePiece ``processor`` and ``dictionary``
    (the pieces' ids, as ``hub.encode`` gives them: ``<s>`` pieces ``</s>``) in sequences of
    at most ``max_positions`` (the window; a sentence that fits: one sequence, as
    ``hub.encode`` gives it; a longer one: the windows of :func:`window_spans`), and find each
    word's first piece and the window it takes its state from (module doc).

    Args:
        processor: a ``sentencepiece.SentencePieceProcessor`` (the checkpoint's: fairseq's
            ``hub.bpe.sp``).
        dictionary: the checkpoint's fairseq dictionary (a piece it lacks is ``<unk>``).
        max_positions: positions per encoded sequence, ``<s>`` and ``</s>`` included, >= 3.

    Raises:
        ValueError: ``max_positions`` < 3.
    """
    check_window(max_positions, "max_positions")
    bos, eos = dictionary.bos(), dictionary.eos()
    tokens, rows, positions, windows = [], [], [], []
    for sentence in sentences:
        pieces = processor.encode(sentence.text, out_type="proto").pieces
        ids = [dictionary.index(p.piece) for p in pieces]
        spans, choice = window_spans(len(pieces), max_positions - 2)
        first_row = len(tokens)
        windows.append(len(spans))
        for a, b in spans:
            tokens.append(torch.tensor([bos, *ids[a:b], eos], dtype=torch.long))
        word_rows, first = [], []
        for word in sentence.words:
            hit = next((i for i, p in enumerate(pieces)
                        if p.begin < word.end and p.end > word.start
                        and p.surface.strip()), None)
            if hit is None:
                word_rows.append(-1)
                first.append(-1)
            else:
                word_rows.append(first_row + choice[hit])
                first.append(hit - spans[choice[hit]][0] + 1)  # + 1: after <s>
        rows.append(word_rows)
        positions.append(first)
    return EncodedWords(tokens, rows, positions, windows)


def word_states(model, encoded: EncodedWords, batch_tokens: int = 8192) -> List[np.ndarray]:
    """Per layer (0 = the embedding output, module doc), the states at the words' first
    pieces, each read in the sequence the word takes it from: ``[layers + 1]`` arrays of
    ``[words kept, hidden]`` float32, words in sentence order with those that overlap no
    piece left out. Sequences no word takes a state from are not run.

    Args:
        model: a fairseq RoBERTa model (``model(tokens, features_only=True,
            return_all_hiddens=True)[1]["inner_states"]``: ``[length, batch, hidden]`` per
            layer); put in eval mode here.
        encoded: :func:`encode_words`.
        batch_tokens: padded tokens per forward pass.

    Raises:
        ValueError: no word to take a state of.
    """
    targets: List[List[Tuple[int, int]]] = [[] for _ in encoded.tokens]  # (word, position)
    kept = 0
    for rows, positions in zip(encoded.rows, encoded.positions):
        for row, position in zip(rows, positions):
            if position >= 0:
                targets[row].append((kept, position))
                kept += 1
    if not kept:
        raise ValueError("the part-of-speech probe: no word overlaps a piece of its sentence")
    used = [r for r, t in enumerate(targets) if t]
    model.eval()
    device = next(model.parameters()).device
    pad_index = model.encoder.sentence_encoder.padding_idx
    out = None
    with torch.no_grad():
        for batch in length_batches([len(encoded.tokens[r]) for r in used], batch_tokens):
            tokens = pad([encoded.tokens[used[i]] for i in batch], pad_index).to(device)
            layers = model(tokens, features_only=True, return_all_hiddens=True)[1][
                "inner_states"]
            states = torch.stack(layers).transpose(1, 2).float().cpu()  # [L+1, batch, T, C]
            if out is None:
                out = np.empty((states.shape[0], kept, states.shape[-1]), dtype=np.float32)
            for b, i in enumerate(batch):
                words, where = zip(*targets[used[i]])
                out[:, list(words)] = states[:, b, list(where)].numpy()
    return list(out)


def pos_probe(hub, data: PosProbeData, c: float = POS_C, batch_tokens: int = 8192,
              window: Optional[int] = None) -> Dict[str, float]:
    """The part-of-speech probe of one checkpoint (module doc).

    Args:
        hub: the loaded checkpoint's hub (``model``, ``task.source_dictionary``, ``bpe.sp``).
        data: the train and test words (:meth:`PosProbeData.read`).
        c: the logistic regression's inverse regularization strength.
        batch_tokens: padded tokens per forward pass.
        window: positions per encoded sequence, ``<s>`` and ``</s>`` included (the command
            lines' ``--pos-window``): 3 … the model's ``max_positions()``; None: the model's
            ``max_positions()``. Give the block length the model was trained on when it has
            more positions than that.

    Returns:
        ``pos_accuracy`` and ``pos_accuracy_ambiguous`` (points, the last layer),
        ``pos_accuracy_layer<L>`` and ``pos_accuracy_ambiguous_layer<L>`` for L = 0 (the
        embedding output) … layers, and the baseline's ``pos_accuracy_baseline`` and
        ``pos_accuracy_ambiguous_baseline``; the sentences encoded in windows are logged.

    Raises:
        ValueError: the train words carry a single tag (nothing to classify); ``window`` < 3
            or above the model's positions (naming ``--pos-window``).
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if len(data.tags) < 2:
        raise ValueError(f"the part-of-speech probe's train words carry {len(data.tags)} "
                         "tag(s); give a treebank with several UPOS tags")
    model, dictionary = hub.model, hub.task.source_dictionary
    positions = model.max_positions()
    window = positions if window is None else check_window(window)
    if window > positions:
        raise ValueError(f"--pos-window {window}: the model has {positions} positions; give "
                         f"at most {positions} (the block length it was trained on)")
    started = time.perf_counter()
    sides = {}
    for name, sentences in (("train", data.train), ("test", data.test)):
        encoded = encode_words(sentences, hub.bpe.sp, dictionary, window)
        words = [w for s, p in zip(sentences, encoded.positions)
                 for w, i in zip(s.words, p) if i >= 0]
        windowed = [n for n in encoded.windows if n > 1]
        if windowed:
            logger.info("part-of-speech probe: %d %s sentences longer than the %d-position "
                        "window encoded in %d windows", len(windowed), name, window,
                        sum(windowed))
        dropped = sum(len(s.words) for s in sentences) - len(words)
        if dropped:
            logger.info("part-of-speech probe: %d %s words overlap no piece, left out",
                        dropped, name)
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
