#!/usr/bin/env python3
"""Prepare a fairseq data-bin for masked-LM (TACO) pre-training from raw text (``--help``);
the command is :func:`taco_fairseq.prep.pretraining.main`."""

from taco_fairseq.prep.pretraining import main

if __name__ == "__main__":
    main()
