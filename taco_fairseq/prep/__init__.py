"""Pre-training data preparation: raw text (plain, .gz or .xz; WikiExtractor and Project
Gutenberg files cleaned) -> documents -> SentencePiece vocabulary -> a fairseq data-bin, whole
or in shards. Its vocabulary encoder and binarizer also write GLUE's data-bins
(:mod:`taco_fairseq.glue.databin`)."""
