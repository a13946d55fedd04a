#!/usr/bin/env python3
"""`taco-analyze-wordsim` (taco_fairseq/cli/embedding_similarity.py), under the path the docs and existing command lines
use."""

from taco_fairseq.cli.embedding_similarity import main

if __name__ == "__main__":
    main()
