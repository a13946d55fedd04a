"""The paper's analyses of pre-training (Fu et al., ACL 2022, §2.2, §5 and appendix A.3).

* :mod:`.context_similarity`: intra- and inter-context pairs of a padded batch and their
  similarity sums (cosine, dot product, L1/L2/L10 distance); pure torch.
* :mod:`.context_logging`: the same measured on every training and validation batch by the
  ``taco`` and ``mlm`` criterions (online diagnostics).
* :mod:`.checkpoints`: finding a run's checkpoints and loading them with their SentencePiece
  model.
* :mod:`.sentences`: raw text to sentences to token ids.
* :mod:`.contextual_score`: the contextual score of a checkpoint on a text corpus.
* :mod:`.wordsim`: WordSim353 pairs and the cosine similarity of their static embeddings.
* :mod:`.figures`: CSV tables and matplotlib figures of all the above over updates.
* :mod:`.cli`: the options and runs shared by the commands in ``scripts/``.
"""
