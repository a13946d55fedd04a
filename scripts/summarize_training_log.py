#!/usr/bin/env python3
"""A shim of `taco-analyze-log` (taco_fairseq/cli/training_log.py)
for existing command lines; the docs use `taco-analyze-log`."""

from taco_fairseq.cli.training_log import main

if __name__ == "__main__":
    main()
