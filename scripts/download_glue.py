#!/usr/bin/env python3
"""A shim of `taco-download-glue` (taco_fairseq/cli/glue_download.py)
for existing command lines; the docs use `taco-download-glue`."""

from taco_fairseq.cli.glue_download import main

if __name__ == "__main__":
    main()
