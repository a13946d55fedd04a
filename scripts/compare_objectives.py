#!/usr/bin/env python3
"""`taco-compare` (taco_fairseq/cli/compare.py), under the path the docs and existing command lines
use."""

from taco_fairseq.cli.compare import main

if __name__ == "__main__":
    main()
