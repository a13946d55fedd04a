"""The masked-LM loss of a checkpoint on raw text it never saw: how well it predicts masked
tokens of another corpus (WikiText-2's test split, a book), in the units of fairseq's
validation loss, and at update 0 too (fairseq validates nothing before the first update).

The text is read as pre-training data is prepared (:func:`taco_fairseq.prep.corpus
.read_document_lines`: cleaned lines, Project Gutenberg header and footer dropped), each line
encoded with the checkpoint's SentencePiece model and dictionary and ended with ``</s>`` (an
empty line between documents is one ``</s>``), as ``fairseq-preprocess`` binarizes it; then
fairseq's own datasets make what ``masked_lm`` validates on: ``TokenBlockDataset`` packs the
stream into blocks of ``tokens_per_sample − 1`` (``--sample-break-mode none``, the recipes'),
``PrependTokenDataset`` puts ``<s>`` first, and ``MaskTokensDataset`` masks with the
checkpoint's own masking options (15% of the tokens, 80/10/10 in the recipes) and a fixed
``seed``, so every checkpoint of a data-bin is scored on the same masks.

The loss is the cross-entropy of the masked tokens in bits per masked token,
``Σ −log2 p(target) / masked tokens``, as fairseq's ``masked_lm`` criterion reports it
(``loss / sample_size / ln 2``; Devlin et al. 2019, §3.1).
"""

import math
from dataclasses import dataclass
from pathlib import Path
from typing import List

import numpy as np
import torch
from torch import Tensor

from ..prep.corpus import read_document_lines


@dataclass(frozen=True)
class MaskedText:
    """A text as masked blocks.

    Attributes:
        inputs: per block, ``[length]`` int64 ids with ``<mask>`` (and random replacements)
            where tokens are predicted.
        targets: per block, ``[length]`` int64: the original id where predicted, ``pad``
            elsewhere.
        tokens: the text's length in tokens (``</s>`` included).
    """

    inputs: List[Tensor]
    targets: List[Tensor]
    tokens: int


def mask_text(hub, path: Path, seed: int = 1) -> MaskedText:
    """Read, encode, block and mask ``path`` for ``hub``'s checkpoint (module doc).

    Args:
        hub: a loaded checkpoint's hub (``bpe``, ``task.source_dictionary``, ``task.mask_idx``,
            ``cfg.task``: ``tokens_per_sample`` and the masking options).
        path: plain, ``.xz`` or ``.gz`` UTF-8 text.
        seed: of the masks.

    Raises:
        FileNotFoundError, ValueError: as :func:`taco_fairseq.prep.corpus.read_document_lines`
            (no text in the file, ...); ValueError: the checkpoint masks whole words
            (``--mask-whole-words``, which needs fairseq's word-start table: not supported).
    """
    from fairseq.data import MaskTokensDataset, PrependTokenDataset, TokenBlockDataset

    dictionary, cfg = hub.task.source_dictionary, hub.cfg.task
    if cfg.mask_whole_words:
        raise ValueError("the checkpoint was trained with --mask-whole-words: its masked-LM "
                         "loss on held-out text is not supported (mask tokens instead)")
    lines = []
    for line in read_document_lines(path):
        pieces = hub.bpe.encode(line) if line else ""
        lines.append(dictionary.encode_line(pieces, add_if_not_exist=False,
                                            append_eos=True).long())
    sizes = np.array([len(t) for t in lines])
    blocks = PrependTokenDataset(
        TokenBlockDataset(lines, sizes, cfg.tokens_per_sample - 1, pad=dictionary.pad(),
                          eos=dictionary.eos(), break_mode="none"), dictionary.bos())
    inputs, targets = MaskTokensDataset.apply_mask(
        blocks, dictionary, pad_idx=dictionary.pad(), mask_idx=hub.task.mask_idx, seed=seed,
        mask_prob=cfg.mask_prob, leave_unmasked_prob=cfg.leave_unmasked_prob,
        random_token_prob=cfg.random_token_prob,
        freq_weighted_replacement=cfg.freq_weighted_replacement,
        mask_multiple_length=cfg.mask_multiple_length, mask_stdev=cfg.mask_stdev)
    return MaskedText([inputs[i] for i in range(len(inputs))],
                      [targets[i] for i in range(len(targets))], int(sizes.sum()))


def masked_lm_loss(model, text: MaskedText, pad_index: int, batch_size: int = 32) -> float:
    """The masked-LM loss of ``model`` on ``text`` (bits per masked token, module doc).

    Args:
        model: a fairseq RoBERTa model (``model(tokens, masked_tokens=mask)[0]``: the logits
            ``[masked tokens, vocabulary]``); put in eval mode here.
        text: :func:`mask_text` of the model's checkpoint.
        pad_index: the dictionary's padding id.
        batch_size: blocks per forward pass.

    Raises:
        ValueError: ``text`` has no masked token.
    """
    from fairseq.data import data_utils

    model.eval()
    device = next(model.parameters()).device
    total, count = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(text.inputs), batch_size):
            tokens = data_utils.collate_tokens(text.inputs[start:start + batch_size],
                                               pad_index).to(device)
            target = data_utils.collate_tokens(text.targets[start:start + batch_size],
                                               pad_index).to(device)
            masked = target.ne(pad_index)
            if not masked.any():
                continue
            logits = model(tokens, masked_tokens=masked)[0]
            total += float(torch.nn.functional.cross_entropy(
                logits.float(), target[masked], reduction="sum"))
            count += int(masked.sum())
    if count == 0:
        raise ValueError("no masked token in the text: too short for --mask-prob")
    return total / count / math.log(2)
