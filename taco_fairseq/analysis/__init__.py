"""The paper's analyses of pre-training (Fu et al., ACL 2022, §2.2, §5 and appendix A.3).

The intra- and inter-context pairs and their similarity sums are the plugin's
(:mod:`taco_fairseq.diagnostics`, also measured online on every batch); this package runs them
offline on checkpoints.

* :mod:`.checkpoints`: finding a run's checkpoints and loading them with their SentencePiece
  model.
* :mod:`.sentences`: raw text to sentences to token ids.
* :mod:`.contextual_score`: the contextual score of a checkpoint on a text corpus.
* :mod:`.wordsim`: WordSim353 pairs and the cosine similarity of their static embeddings.
* :mod:`.figures`: CSV tables and matplotlib figures of all the above over updates.
* :mod:`.cli`: the options and runs shared by the analysis commands of
  :mod:`taco_fairseq.cli`.
"""
