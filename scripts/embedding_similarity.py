#!/usr/bin/env python3
"""A shim of `taco-analyze-wordsim` (taco_fairseq/cli/embedding_similarity.py)
for existing command lines; the docs use `taco-analyze-wordsim`."""

from taco_fairseq.cli.embedding_similarity import main

if __name__ == "__main__":
    main()
