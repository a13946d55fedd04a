#!/usr/bin/env python3
"""A shim of `taco-glue` (taco_fairseq/cli/glue.py)
for existing command lines; the docs use `taco-glue`."""

from taco_fairseq.cli.glue import main

if __name__ == "__main__":
    main()
