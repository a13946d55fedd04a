#!/usr/bin/env python3
"""`taco-analyze-context` (taco_fairseq/cli/contextual_score.py), under the path the docs and existing command lines
use."""

from taco_fairseq.cli.contextual_score import main

if __name__ == "__main__":
    main()
