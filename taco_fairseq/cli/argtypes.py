"""The argparse types the commands share: counts, tolerances, fractions and seeds checked by
argparse, so that a bad value is a usage error naming the option."""

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


def fraction(include_one: bool = False) -> Callable[[str], float]:
    """An argparse ``type``: a float in (0, 1) (with ``include_one``, in (0, 1]); argparse
    reports others, NaN included, as "argument --OPTION: must be in (0, 1), got VALUE"
    ("(0, 1]" with ``include_one``)."""

    def parse(text: str) -> float:
        value = float(text)
        if not (0.0 < value <= 1.0 if include_one else 0.0 < value < 1.0):
            raise argparse.ArgumentTypeError(
                f"must be in (0, {'1]' if include_one else '1)'}, got {text}")
        return value

    parse.__name__ = "float"  # argparse's "invalid float value" for what float() rejects
    return parse


def int_at_most(limit: int, why: str) -> Callable[[str], int]:
    """An argparse ``type``: an int in 1..``limit``; argparse reports others as "argument
    --OPTION: must be > 0, got VALUE" or "must be <= LIMIT (WHY), got VALUE"."""

    def parse(text: str) -> int:
        value = positive_int(text)
        if value > limit:
            raise argparse.ArgumentTypeError(f"must be <= {limit} ({why}), got {text}")
        return value

    parse.__name__ = "int"
    return parse


#: The type of the count options (``--workers``, ``--vocab-size``, ``--sentences``, ...).
positive_int = positive(int)
#: The type of the seed options (fairseq's numpy seeding needs seeds >= 0).
seed = positive(int, zero=True)
