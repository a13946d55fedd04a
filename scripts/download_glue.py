#!/usr/bin/env python3
"""`taco-download-glue` (taco_fairseq/cli/glue_download.py), under the path the docs and existing command lines
use."""

from taco_fairseq.cli.glue_download import main

if __name__ == "__main__":
    main()
