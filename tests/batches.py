"""Synthetic masked-LM batches for the collater and criterion tests: a hypothesis strategy of
odd right-padded batches (empty rows, stray </s>, nothing or much masked) and a dataset that
collates a prepared batch."""

import copy

import numpy as np
import torch
from fairseq.data import BaseWrapperDataset
from hypothesis import strategies as st


class FixedBatch(BaseWrapperDataset):
    """A dataset whose collater returns a prepared masked-LM batch."""

    def __init__(self, batch):
        super().__init__(None)
        self.batch = batch

    def collater(self, samples):
        return copy.deepcopy(self.batch)


@st.composite
def masked_lm_batches(draw, vocab=204, pad=1, bos=0, eos=2, mask=204, max_len=12):
    """A right-padded batch as fairseq's masked_lm collates it: rows of 0..max_len tokens
    (0 = an all-padding row) starting with <s> and ending with </s> (plus stray </s> inside),
    some positions masked (target = the token, input = <mask>)."""
    lengths = draw(st.lists(st.integers(0, max_len), min_size=1, max_size=6))
    seq_len = max(max(lengths), 1)
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    tokens = np.full((len(lengths), seq_len), pad)
    target = np.full_like(tokens, pad)
    for row, length in enumerate(lengths):
        tokens[row, :length] = rng.integers(4, vocab, length)
        tokens[row, :length][rng.random(length) < 0.1] = eos
        if length:
            tokens[row, 0], tokens[row, length - 1] = bos, eos
        masked = np.flatnonzero(rng.random(length) < draw(st.sampled_from([0.0, 0.15, 0.5])))
        target[row, masked] = tokens[row, masked]
        tokens[row, masked] = mask
    return {
        "id": torch.arange(len(lengths)),
        "nsentences": len(lengths),
        "ntokens": int(sum(lengths)),
        "net_input": {"src_tokens": torch.from_numpy(tokens),
                      "src_lengths": torch.tensor(lengths)},
        "target": torch.from_numpy(target),
    }
