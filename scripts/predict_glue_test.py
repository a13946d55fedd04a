#!/usr/bin/env python3
"""A shim of `taco-predict-glue` (taco_fairseq/cli/glue_predict.py)
for existing command lines; the docs use `taco-predict-glue`."""

from taco_fairseq.cli.glue_predict import main

if __name__ == "__main__":
    main()
