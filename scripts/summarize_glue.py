#!/usr/bin/env python3
"""A shim of `taco-glue-summary` (taco_fairseq/cli/glue_summary.py)
for existing command lines; the docs use `taco-glue-summary`."""

from taco_fairseq.cli.glue_summary import main

if __name__ == "__main__":
    main()
