#!/usr/bin/env python3
"""`taco-glue-sweep` (taco_fairseq/cli/glue_sweep.py), under the path the docs and existing command lines
use."""

from taco_fairseq.cli.glue_sweep import main

if __name__ == "__main__":
    main()
