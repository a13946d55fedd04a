#!/usr/bin/env python3
"""``python -m benchmarks`` (benchmarks/cli.py), under the path the docs use: the benchmark is
a development tool at the repository root, not installed with the package."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root

from benchmarks.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
