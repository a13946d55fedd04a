"""Count-based references for the validation masked-LM loss (bits per masked token): what
predictors that use no encoder score under the study's masking (issue 33 §3.5).

    python docs/results/study5/mlm_baselines.py DATA_BIN   # e.g. /work/study/wiki-aa

Reads DATA_BIN/{train,valid}.{idx,bin} (fairseq's mmap indexed format, read with numpy), cuts
the validation text into the study's blocks (`--sample-break-mode none`: 127 tokens and a
<s>), masks them as fairseq's MaskTokensDataset does (15% of the positions; of those 80%
<mask>, 10% kept, 10% a token drawn uniformly from the non-special symbols), two masking draws,
and scores at the masked positions, with counts of the training text (add-0.5 unigram):

- unigram: p(x);
- unigram + copy: p(x) where the input is <mask>; where a token v is visible, the exact
  posterior p(x) (1{x = v} + q(v)) / (p(v) + q(v)) (kept and replaced are equally likely);
- bag of words + copy: the prior 0.2 · (count of x among the block's other visible tokens) /
  (their number) + 0.8 · p(x), with the same copy posterior;
- bigram from both neighbours + copy: the prior p(x | left) · p(right | x), normalized (bigram
  counts interpolated with the unigram, 0.8/0.2; a neighbour that is <mask> contributes nothing),
  with the same copy posterior; also with the true neighbours and without copy.

The mixing weights were picked from a few values on this validation text (0.1/0.2/0.3): the
numbers are references, not tuned models.
"""

import struct
import sys

import numpy as np
import scipy.sparse as sp

NSPECIAL, BOS, PAD = 4, 0, 1  # fairseq's <s>, <pad>, </s>, <unk>


def read(prefix):
    """The token ids of a fairseq mmap indexed dataset, concatenated (int64)."""
    index = open(prefix + ".idx", "rb").read()
    assert index[:9] == b"MMIDIDX\x00\x00", "not a fairseq mmap index"
    n, = struct.unpack("<Q", index[18:26])
    dtype = {4: np.int32, 5: np.int64, 8: np.uint16}[index[17]]
    sizes = np.frombuffer(index, np.int32, n, 26)
    data = np.fromfile(prefix + ".bin", dtype).astype(np.int64)
    assert data.size == sizes.sum()
    return data


def main(data_bin, draws=2, seed=0):
    train, valid = read(data_bin + "/train"), read(data_bin + "/valid")
    vocab = NSPECIAL + sum(1 for _ in open(data_bin + "/dict.txt"))
    mask, size = vocab, vocab + 1  # <mask> is appended to the dictionary
    counts = np.bincount(train, minlength=size).astype(float) + 0.5
    counts[[PAD, mask]] = 0
    p = counts / counts.sum()
    q = np.ones(size)
    q[:NSPECIAL] = 0
    q /= q.sum()
    bigram = sp.coo_matrix((np.ones(train.size - 1), (train[:-1], train[1:])),
                           shape=(size, size)).tocsr()
    following = np.maximum(np.asarray(bigram.sum(1)).ravel(), 1)
    bigram_t = bigram.T.tocsr()
    m = valid.size // 127
    blocks = np.concatenate([np.full((m, 1), BOS), valid[:m * 127].reshape(m, 127)], 1)
    rng = np.random.default_rng(seed)
    results = {}
    for _ in range(draws):
        selected = np.zeros(blocks.shape, bool)
        for i in range(m):
            k = int(0.15 * blocks.shape[1] + rng.random())
            selected[i, rng.choice(blocks.shape[1], k, replace=False)] = True
        u = rng.random(blocks.shape)
        shown = blocks.copy()
        shown[selected & (u >= 0.2)] = mask
        replaced = selected & (u >= 0.1) & (u < 0.2)
        shown[replaced] = rng.choice(size, replaced.sum(), p=q)
        rows, cols = np.nonzero(selected)
        x, v = blocks[rows, cols], shown[rows, cols]
        masked = v == mask

        def copy(prior_x, prior_v):
            return np.where(masked, prior_x, prior_x * ((x == v) + q[v]) / (prior_v + q[v]))

        def add(name, prob):
            results.setdefault(name, []).append(float(-np.log2(prob).mean()))

        add("unigram", p[x])
        add("unigram + copy", copy(p[x], p[v]))
        visible = shown.copy()
        visible[:, 0] = mask
        bag_x, bag_v, n_visible = (np.zeros(len(x)) for _ in range(3))
        for i in range(m):
            at = rows == i
            tokens = visible[i][visible[i] != mask]
            c = np.bincount(tokens, minlength=size)
            own = visible[i, cols[at]]
            bag_x[at] = c[x[at]] - ((own == x[at]) & (own != mask))
            bag_v[at] = np.where(own != mask, c[own] - 1, 0)
            n_visible[at] = len(tokens) - (own != mask)
        add("bag of words + copy", copy(0.2 * bag_x / n_visible + 0.8 * p[x],
                                        0.2 * bag_v / n_visible + 0.8 * p[v]))
        for source, name in ((shown, "masked"), (blocks, "true")):
            left = np.where(cols > 0, source[rows, np.maximum(cols - 1, 0)], BOS)
            right = np.where(cols < blocks.shape[1] - 1,
                             source[rows, np.minimum(cols + 1, blocks.shape[1] - 1)], mask)
            px, pv = np.empty(len(x)), np.empty(len(x))
            for s in range(0, len(x), 2000):
                l, r, at = left[s:s + 2000], right[s:s + 2000], np.arange(min(2000, len(x) - s))
                a = 0.8 * bigram[l].toarray() / following[l][:, None] + 0.2 * p[None, :]
                a[l == mask] = p
                b = 0.8 * bigram_t[r].toarray() / following[None, :] + 0.2 * p[r][:, None]
                b[r == mask] = 1.0
                prior = a * b
                prior[:, [PAD, mask]] = 0
                prior /= prior.sum(1, keepdims=True)
                px[s:s + 2000], pv[s:s + 2000] = prior[at, x[s:s + 2000]], prior[at, v[s:s + 2000]]
            add(f"bigram from both neighbours ({name} neighbours)", px)
            add(f"bigram from both neighbours ({name} neighbours) + copy", copy(px, pv))
    for name, values in results.items():
        print(f"{name}: {np.mean(values):.2f} bits (draws {', '.join(f'{v:.3f}' for v in values)})")


if __name__ == "__main__":
    main(sys.argv[1])
