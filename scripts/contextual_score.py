#!/usr/bin/env python3
"""A shim of `taco-analyze-context` (taco_fairseq/cli/contextual_score.py)
for existing command lines; the docs use `taco-analyze-context`."""

from taco_fairseq.cli.contextual_score import main

if __name__ == "__main__":
    main()
