"""Fake native web-tool spills for the turn tests: real files in a real ``{cwd}/agent-tools``.

The native tools write ``{cwd}/agent-tools/{uuid}.txt`` and say so in their result: WebFetch in
its structured ``output_location`` field (and its text), WebSearch inside the chunk string. The
exact native wording is not ours; these results follow the contract's description of it
("host path and follow-up", follow-up today: shell / grep / ``read_file``).
"""

from __future__ import annotations

import re
import uuid as uuids
from pathlib import Path
from typing import Any

BACKENDS = ("trio", "asyncio")

BIG = "".join(
    f"line {n}: the fetched page says {'needle' if n == 777 else 'hay'}\n" for n in range(1, 2001)
)


def exactly(message: str) -> str:
    """A ``pytest.raises(match=)`` pattern for exactly ``message``."""
    return "^" + re.escape(message) + "$"


def new_uuid() -> str:
    return str(uuids.uuid4())


def spill(cwd: Path, text: str = BIG, uuid: str | None = None) -> tuple[str, Path]:
    """Write a spill file as the native tool would; its uuid and host path."""
    uuid = uuid or new_uuid()
    directory = cwd / "agent-tools"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{uuid}.txt"
    path.write_text(text)
    return uuid, path


def fetch_result(host_path: Path | str) -> dict[str, Any]:
    """A large webFetch result: the structured field plus the notice in the text."""
    return {
        "url": "https://example.com/big",
        "content": (
            "The page is long; here is the start.\n"
            f"Output was too large and was saved to {host_path}. "
            "Use grep or read_file to search it."
        ),
        "output_location": str(host_path),
    }


def search_chunk(host_path: Path | str) -> str:
    """A large webSearch result: the path only inside the chunk string."""
    return (
        "Result 1: Example Domain (https://example.com)\n"
        f"[Results truncated. Full results saved to {host_path}. "
        "Run `rg` in the shell to search them.]"
    )
