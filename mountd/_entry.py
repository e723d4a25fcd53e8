"""The ``mountd`` command's entry point (and ``python -m mountd``'s): :func:`mountd.cli.main`,
imported with the collector paused and what it imported frozen (see ``mountd._collector``)."""

from __future__ import annotations

from ._collector import pause_for_imports, settle_imports


def main() -> int:
    collecting = pause_for_imports()
    from .cli import main as cli_main

    settle_imports(collecting)
    return cli_main()
