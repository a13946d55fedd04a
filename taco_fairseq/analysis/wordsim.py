"""Embedding similarity of WordSim353 word pairs (paper §2.2, Figure 3(a), appendix A.3).

The paper averages the cosine similarity of the static embeddings (the embedding layer's
token-embedding matrix) of 20 sampled pairs of frequently co-occurring WordSim353 words over
pre-training checkpoints. Here:

* **Pairs**: the file's rows (``word1 word2 score``, tab-separated, a header line); 353 rows
  in ``../shared/data/wordsim353/combined.tsv``. :func:`distinct_pairs` merges rows naming the
  same unordered pair (``money cash`` twice, ``bank money``/``money bank``) into one with the
  mean human score and drops pairs of a word with itself (``tiger tiger``, cosine 1 by
  definition): 350 pairs. :func:`select_pairs` picks a given list, the top N by human score or
  a seeded sample of N.
* **Words**: case is kept (the vocabularies are cased). A word is encoded as it appears
  mid-sentence after a space: the checkpoint's SentencePiece model with its leading ``▁``
  (e.g. ``cash`` → ``▁ca`` ``sh``); its vector is the mean of its pieces' rows of the
  token-embedding matrix (the input embedding when untied). A word with an ``<unk>`` piece is
  unknown; pairs with an unknown word (in any of the compared vocabularies) are skipped and
  reported.
"""

import csv
import math
import random
import statistics
from pathlib import Path
from typing import Dict, Iterable, List, NamedTuple, Optional, Sequence, Set, Tuple, Union

import torch.nn.functional as F
from torch import Tensor

from ..loss import NORM_EPS

PathLike = Union[str, Path]


class WordPair(NamedTuple):
    """A pair of words and its human similarity score (0-10; NaN when not rated)."""

    word1: str
    word2: str
    score: float


class WordVectors(NamedTuple):
    """Static embeddings of words in one checkpoint.

    Attributes:
        vectors: word -> ``[hidden]`` float32, the mean of its pieces' embedding rows.
        pieces: word -> its SentencePiece pieces (e.g. ``["▁ca", "sh"]``).
        unknown: words with an ``<unk>`` piece (no vector).
    """

    vectors: Dict[str, Tensor]
    pieces: Dict[str, List[str]]
    unknown: Set[str]


def load_wordsim353(path: PathLike) -> List[WordPair]:
    """Every row of a WordSim353 file (tab-separated ``word1 word2 score`` after one header
    line), in file order, duplicates kept.

    Raises:
        FileNotFoundError: if the file is missing.
        ValueError: naming the file and line, for a row without three fields or a score that
            is not a number.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"WordSim353 file not found: {path}")
    pairs = []
    with path.open(encoding="utf-8", newline="") as f:
        rows = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        next(rows, None)  # header
        for line, row in enumerate(rows, start=2):
            if not row:
                continue
            try:
                word1, word2, score = row
                pairs.append(WordPair(word1.strip(), word2.strip(), float(score)))
            except ValueError:
                raise ValueError(
                    f"{path}:{line}: expected 'word1<TAB>word2<TAB>score', got {row!r}"
                ) from None
    return pairs


def distinct_pairs(pairs: Iterable[WordPair]) -> List[WordPair]:
    """One pair per unordered pair of different words, with the mean score of its rows, in
    order of first occurrence."""
    scores: Dict[Tuple[str, ...], List[float]] = {}
    first: Dict[Tuple[str, ...], WordPair] = {}
    for pair in pairs:
        if pair.word1 == pair.word2:
            continue
        key = tuple(sorted((pair.word1, pair.word2)))
        scores.setdefault(key, []).append(pair.score)
        first.setdefault(key, pair)
    return [first[k]._replace(score=statistics.fmean(s)) for k, s in scores.items()]


def read_pair_list(path: PathLike, rated: Sequence[WordPair] = ()) -> List[WordPair]:
    """A given list of pairs: one ``word1 word2`` per line (tab or space separated; ``#``
    comments and blank lines ignored). Scores come from ``rated`` (either order; e.g.
    :func:`distinct_pairs`), NaN if absent.

    Raises:
        FileNotFoundError: if the file is missing.
        ValueError: naming the file and line, for a line without exactly two words.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"pair list not found: {path}")
    score = {}
    for pair in rated:
        score[(pair.word1, pair.word2)] = score[(pair.word2, pair.word1)] = pair.score
    pairs = []
    for line, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        words = text.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) != 2:
            raise ValueError(f"{path}:{line}: expected two words, got {text!r}")
        pairs.append(WordPair(*words, score.get(tuple(words), math.nan)))
    return pairs


def select_pairs(
    pairs: Sequence[WordPair], top: Optional[int] = None, sample: Optional[int] = None,
    seed: int = 1,
) -> List[WordPair]:
    """All ``pairs``, the ``top`` N by human score (ties in file order), or a seeded uniform
    ``sample`` of N (``random.Random(seed).sample``, kept in the order of ``pairs``); all
    ``pairs`` when there are no more than N (the caller compares the length to say so).

    Raises:
        ValueError: if both ``top`` and ``sample`` are given, or either is < 1.
    """
    if top is not None and sample is not None:
        raise ValueError("choose either the top N pairs or a sample of N pairs, not both")
    count = top if top is not None else sample
    if count is not None and count < 1:
        raise ValueError(f"the number of pairs must be >= 1, got {count}")
    if top is not None:
        return sorted(pairs, key=lambda p: -p.score)[:top]
    if sample is not None:
        chosen = set(random.Random(seed).sample(range(len(pairs)), min(sample, len(pairs))))
        return [p for i, p in enumerate(pairs) if i in chosen]
    return list(pairs)


def word_vectors(hub, words: Iterable[str]) -> WordVectors:
    """The static embeddings of ``words`` in a checkpoint (see the module doc).

    Args:
        hub: fairseq's ``RobertaHubInterface`` of the checkpoint (SentencePiece ``encode``,
            ``task.source_dictionary`` and ``model.encoder.sentence_encoder.embed_tokens``).
        words: the words.
    """
    dictionary = hub.task.source_dictionary
    embedding = hub.model.encoder.sentence_encoder.embed_tokens.weight.detach().float().cpu()
    vectors, pieces, unknown = {}, {}, set()
    for word in dict.fromkeys(words):
        ids = hub.encode(word)[1:-1]  # without <s> and </s>
        pieces[word] = [dictionary[i] for i in ids.tolist()]
        if len(ids) == 0 or bool((ids == dictionary.unk()).any()):
            unknown.add(word)
        else:
            vectors[word] = embedding[ids].mean(dim=0)
    return WordVectors(vectors, pieces, unknown)


def known_pairs(
    pairs: Iterable[WordPair], vocabularies: Sequence[WordVectors]
) -> Tuple[List[WordPair], List[WordPair]]:
    """Split ``pairs`` into those whose two words have vectors in every vocabulary and the
    skipped rest (an unknown word somewhere)."""
    known, skipped = [], []
    for pair in pairs:
        ok = all(w in v.vectors for v in vocabularies for w in (pair.word1, pair.word2))
        (known if ok else skipped).append(pair)
    return known, skipped


def pair_cosines(vectors: WordVectors, pairs: Iterable[WordPair]) -> List[float]:
    """Cosine similarity of each pair's word vectors (cos(a, b) = a·b / (‖a‖ ‖b‖), norms
    clamped at :data:`taco_fairseq.loss.NORM_EPS`).

    Raises:
        KeyError: naming a word without a vector (select with :func:`known_pairs`).
    """
    cosines = []
    for pair in pairs:
        missing = [w for w in (pair.word1, pair.word2) if w not in vectors.vectors]
        if missing:
            raise KeyError(f"no embedding for {missing} (unknown words are skipped first)")
        a, b = (F.normalize(vectors.vectors[w], dim=0, eps=NORM_EPS) for w in pair[:2])
        cosines.append(float(a @ b))
    return cosines


class EmbeddingSimilarity(NamedTuple):
    """Results of :func:`embedding_similarity`.

    Attributes:
        summary: one row per checkpoint: ``run``, ``checkpoint``, ``updates``, ``pairs`` and
            ``mean_cosine`` over the selected pairs.
        pairs: one row per checkpoint and selected pair: ``run``, ``checkpoint``,
            ``updates``, ``word1``, ``word2``, ``human_score``, ``pieces1``, ``pieces2``
            (space-separated) and ``cosine``.
        skipped: pairs left out for an unknown word.
    """

    summary: List[Dict]
    pairs: List[Dict]
    skipped: List[WordPair]


def embedding_similarity(
    checkpoints: Iterable, pairs: Sequence[WordPair], top: Optional[int] = None,
    sample: Optional[int] = None, seed: int = 1,
) -> EmbeddingSimilarity:
    """Cosine similarity of the static embeddings of word pairs across checkpoints.

    The pairs whose words are known in every checkpoint's vocabulary are kept (the others are
    returned as ``skipped``), then :func:`select_pairs` picks the ``top`` N or a ``sample`` of
    N of them (all when neither is given), so every checkpoint is measured on the same pairs.

    Args:
        checkpoints: :class:`~.checkpoints.Checkpoint` objects (``run``, ``path``,
            ``updates``, ``hub``); only their word vectors are kept in memory.
        pairs: candidate pairs (e.g. :func:`distinct_pairs` of :func:`load_wordsim353`, or
            :func:`read_pair_list`).
        top, sample, seed: as :func:`select_pairs`.

    Raises:
        ValueError: if no checkpoint is given, or no pair is left.
    """
    words = [w for pair in pairs for w in pair[:2]]
    measured = [(c.run, str(c.path), c.updates, word_vectors(c.hub, words)) for c in checkpoints]
    if not measured:
        raise ValueError("no checkpoints to measure")
    known, skipped = known_pairs(pairs, [m[3] for m in measured])
    selected = select_pairs(known, top=top, sample=sample, seed=seed)
    if not selected:
        raise ValueError(f"no word pair left: all {len(skipped)} pairs have unknown words")
    summary, pair_rows = [], []
    for run, path, updates, vectors in measured:
        cosines = pair_cosines(vectors, selected)
        summary.append({"run": run, "checkpoint": path, "updates": updates,
                        "pairs": len(selected), "mean_cosine": statistics.fmean(cosines)})
        for pair, cosine in zip(selected, cosines):
            pair_rows.append({
                "run": run, "checkpoint": path, "updates": updates, "word1": pair.word1,
                "word2": pair.word2, "human_score": pair.score,
                "pieces1": " ".join(vectors.pieces[pair.word1]),
                "pieces2": " ".join(vectors.pieces[pair.word2]), "cosine": cosine,
            })
    return EmbeddingSimilarity(summary, pair_rows, skipped)
