"""Argument types of the commands: a value out of range is refused by the command line parser, with its usage and a
one-line error naming the option, before any file is read."""

from __future__ import annotations

import argparse
from collections.abc import Callable

MAX_PORT = 65535


def at_least(minimum: int) -> Callable[[str], int]:
    """An integer option of at least `minimum` (0: a count that may be zero; 1: one that may not)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is less than {minimum}")
        return value

    return parse


def positive(text: str) -> float:
    """A number above 0 (a size, a duration)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} is not above 0")
    return value


def port(text: str) -> int:
    """A TCP port, 0 (any free one) to 65535."""
    value = at_least(0)(text)
    if value > MAX_PORT:
        raise argparse.ArgumentTypeError(f"{value} is not a port (0 to {MAX_PORT})")
    return value
