#!/usr/bin/env python3
"""Prepare GLUE tasks for fine-tuning with fairseq's sentence_prediction task (``--help``);
the command is :func:`taco_fairseq.cli.prepare_glue.main`."""

from taco_fairseq.cli.prepare_glue import main

if __name__ == "__main__":
    main()
