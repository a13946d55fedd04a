#!/usr/bin/env python3
"""`taco-analyze-log` (taco_fairseq/cli/training_log.py), under the path the docs and existing command lines
use."""

from taco_fairseq.cli.training_log import main

if __name__ == "__main__":
    main()
