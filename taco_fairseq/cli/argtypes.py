"""The argparse types the commands share: counts, tolerances and seeds checked by argparse,
so that a bad value is a usage error naming the option."""

import argparse
import math
from typing import Callable


def positive(kind: type, zero: bool = False) -> Callable[[str], object]:
    """An argparse ``type``: a finite ``kind`` (``int`` or ``float``) value above 0 (with
    ``zero``, at least 0); argparse reports others as "argument --OPTION: must be > 0, got
    VALUE" (">= 0" with ``zero``; "must be finite" for inf and NaN)."""

    def parse(text: str):
        value = kind(text)
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be finite, got {text}")
        if not (value >= 0 if zero else value > 0):
            raise argparse.ArgumentTypeError(f"must be {'>=' if zero else '>'} 0, got {text}")
        return value

    parse.__name__ = kind.__name__  # argparse's "invalid int value" for what kind() rejects
    return parse


#: The type of the count options (``--workers``, ``--vocab-size``, ``--sentences``, ...).
positive_int = positive(int)
#: The type of the seed options (fairseq's numpy seeding needs seeds >= 0).
seed = positive(int, zero=True)
