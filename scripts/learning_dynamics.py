#!/usr/bin/env python3
"""A shim of `taco-analyze-dynamics` (taco_fairseq/cli/learning_dynamics.py)
for existing command lines; the docs use `taco-analyze-dynamics`."""

from taco_fairseq.cli.learning_dynamics import main

if __name__ == "__main__":
    main()
