"""The command-line tools, one module per command with ``main(argv=None)``, installed as the
``taco-*`` console scripts of ``setup.py`` (``scripts/*.py`` call the same functions). Like
``fairseq_cli``, nothing here is part of the plugin: ``import taco_fairseq`` loads none of it.
"""

import argparse


def positive_int(text: str) -> int:
    """argparse type of the count options (``--workers``, ``--vocab-size``, ``--sentences``,
    ...): an int >= 1, else argparse's error naming the option."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value
