#!/usr/bin/env python3
"""A shim of `taco-export-hf` (taco_fairseq/cli/export_hf.py)
for existing command lines; the docs use `taco-export-hf`."""

from taco_fairseq.cli.export_hf import main

if __name__ == "__main__":
    main()
