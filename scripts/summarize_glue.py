#!/usr/bin/env python3
"""`taco-glue-summary` (taco_fairseq/cli/glue_summary.py), under the path the docs and existing command lines
use."""

from taco_fairseq.cli.glue_summary import main

if __name__ == "__main__":
    main()
