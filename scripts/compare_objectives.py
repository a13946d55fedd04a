#!/usr/bin/env python3
"""A shim of `taco-compare` (taco_fairseq/cli/compare.py)
for existing command lines; the docs use `taco-compare`."""

from taco_fairseq.cli.compare import main

if __name__ == "__main__":
    main()
