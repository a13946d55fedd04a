#!/usr/bin/env python3
"""`taco-glue` (taco_fairseq/cli/glue.py), under the path the docs and existing command lines
use."""

from taco_fairseq.cli.glue import main

if __name__ == "__main__":
    main()
