#!/usr/bin/env python3
"""Prepare a fairseq data-bin for masked-LM (TACO) pre-training from raw text (``--help``);
the command is :func:`taco_fairseq.cli.prepare_data.main`."""

from taco_fairseq.cli.prepare_data import main

if __name__ == "__main__":
    main()
