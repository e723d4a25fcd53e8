"""The ``mountd`` command line (being written)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    print("mountd: not yet available", file=sys.stderr)
    return 2
