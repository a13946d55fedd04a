#!/usr/bin/env python3
"""A shim of `taco-glue-sweep` (taco_fairseq/cli/glue_sweep.py)
for existing command lines; the docs use `taco-glue-sweep`."""

from taco_fairseq.cli.glue_sweep import main

if __name__ == "__main__":
    main()
