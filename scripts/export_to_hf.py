#!/usr/bin/env python3
"""`taco-export-hf` (taco_fairseq/cli/export_hf.py), under the path the docs and existing command lines
use."""

from taco_fairseq.cli.export_hf import main

if __name__ == "__main__":
    main()
