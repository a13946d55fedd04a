#!/usr/bin/env python3
"""`taco-analyze-dynamics` (taco_fairseq/cli/learning_dynamics.py), under the path the docs and existing command lines
use."""

from taco_fairseq.cli.learning_dynamics import main

if __name__ == "__main__":
    main()
