"""``python -m benchmarks`` (from the repository root): :func:`benchmarks.cli.main`."""

import sys

from .cli import main

sys.exit(main())
