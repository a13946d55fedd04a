"""The log lines of the ``taco-*`` commands: fairseq's format (``fairseq_cli/train.py``), so
that a command's lines and those of the fairseq runs it starts read alike; and their error line
(:mod:`taco_fairseq.errors`' hook)."""

import logging

#: time | level | logger | message, as fairseq_cli logs.
LOG_FORMAT = "%(asctime)s | %(levelname)s | %(name)s | %(message)s"


def configure_logging() -> None:
    """Log INFO and above to stderr in :data:`LOG_FORMAT`, replacing any handler configured
    before (``logging.basicConfig(force=True)``): a command's start, or a worker process's. Also
    installs :func:`taco_fairseq.errors.install_excepthook` (a configuration error ends the
    command in one line), which ``import taco_fairseq`` leaves to :func:`taco_fairseq.register`
    so that a command's ``--help`` imports nothing heavy."""
    from taco_fairseq.errors import install_excepthook

    logging.basicConfig(format=LOG_FORMAT, level=logging.INFO, force=True)
    install_excepthook()
