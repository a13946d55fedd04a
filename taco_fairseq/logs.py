"""The log lines of the ``taco-*`` commands: fairseq's format (``fairseq_cli/train.py``), so
that a command's lines and those of the fairseq runs it starts read alike."""

import logging

#: time | level | logger | message, as fairseq_cli logs.
LOG_FORMAT = "%(asctime)s | %(levelname)s | %(name)s | %(message)s"


def configure_logging() -> None:
    """Log INFO and above to stderr in :data:`LOG_FORMAT`, replacing any handler configured
    before (``logging.basicConfig(force=True)``): a command's start, or a worker process's."""
    logging.basicConfig(format=LOG_FORMAT, level=logging.INFO, force=True)
