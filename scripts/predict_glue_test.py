#!/usr/bin/env python3
"""`taco-predict-glue` (taco_fairseq/cli/glue_predict.py), under the path the docs and existing command lines
use."""

from taco_fairseq.cli.glue_predict import main

if __name__ == "__main__":
    main()
