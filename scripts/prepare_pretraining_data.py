#!/usr/bin/env python3
"""A shim of `taco-prepare-data` (taco_fairseq/cli/prepare_data.py)
for existing command lines; the docs use `taco-prepare-data`."""

from taco_fairseq.cli.prepare_data import main

if __name__ == "__main__":
    main()
