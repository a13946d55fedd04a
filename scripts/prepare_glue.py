#!/usr/bin/env python3
"""A shim of `taco-prepare-glue` (taco_fairseq/cli/prepare_glue.py)
for existing command lines; the docs use `taco-prepare-glue`."""

from taco_fairseq.cli.prepare_glue import main

if __name__ == "__main__":
    main()
