"""An operator's editor, saving ``.cursor/mcp.json`` while mcpstage works on it.

``python -m tests.mcpstage.editor save CONFIG STYLE VALUE``: one save (what a test runs at an
exact step through ``MCPSTAGE_RUN``): read the config, set the operator's server ``mine`` to
``{"command": "edited", "args": [VALUE]}`` and ``"edited": VALUE``, write it back. Saving the
same value twice writes the same bytes, so a step reached again does not edit again.

``python -m tests.mcpstage.editor race CONFIG CONTROL LOG INTERVAL STYLES``: while the file
CONTROL does not say ``stop``, every INTERVAL seconds save ``"edit": N`` (N = 1, 2, ...) the same
way, taking the STYLES (comma-separated) in turn. Before each save it checks that its previous save is still in the file
(waiting up to ``SETTLE`` seconds for a peer's in-flight write to finish); an edit that never
shows again was lost. LOG gets one line per save (``saved N STYLE``) and per loss (``lost N``).

STYLE ``rename`` writes a temporary file and renames it over the config (vim, most editors);
``inplace`` truncates and rewrites the file itself (``open(path, "w")``, as VS Code does).
Every save reads the file first, as an editor reloading a changed file does, so mcpstage's
servers stay in it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

SETTLE = 3.0


def _read(config: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(config.read_bytes())
    except (FileNotFoundError, ValueError):
        return None  # absent, or caught mid-write by someone else's in-place save
    return value if isinstance(value, dict) else None


def _write(config: Path, value: dict[str, Any], style: str) -> None:
    data = json.dumps(value, indent=4).encode() + b"\n"
    if style == "inplace":
        with open(config, "wb") as file:
            file.write(data)
        return
    temp = config.with_name(f"mcp.json.editor-{os.getpid()}")
    temp.write_bytes(data)
    os.rename(temp, config)


def _load_or_wait(config: Path) -> dict[str, Any]:
    deadline = time.monotonic() + SETTLE
    while True:
        value = _read(config)
        if value is not None or time.monotonic() > deadline:
            return value or {}
        time.sleep(0.01)


def save(config: Path, style: str, text: str) -> None:
    value = _load_or_wait(config)
    servers = value.setdefault("mcpServers", {})
    servers["mine"] = {"command": "edited", "args": [text]}
    value["edited"] = text
    _write(config, value, style)


def _shows(config: Path, edit: int) -> bool:
    deadline = time.monotonic() + SETTLE
    while time.monotonic() < deadline:
        value = _read(config)
        if value is not None and value.get("edit") == edit:
            return True
        time.sleep(0.01)
    return False


def race(config: Path, control: Path, log_path: Path, interval: float, styles: list[str]) -> None:
    edit = 0
    with open(log_path, "a", encoding="ascii") as log:
        while control.read_text().strip() != "stop":
            time.sleep(interval)
            if edit and not _shows(config, edit):
                log.write(f"lost {edit}\n")
            value = _load_or_wait(config)
            edit += 1
            value["edit"] = edit
            style = styles[edit % len(styles)]
            _write(config, value, style)
            log.write(f"saved {edit} {style}\n")
            log.flush()
        if edit and not _shows(config, edit):
            log.write(f"lost {edit}\n")


def main(argv: list[str]) -> int:
    if argv[0] == "save":
        save(Path(argv[1]), argv[2], argv[3])
    else:
        assert argv[0] == "race"
        race(Path(argv[1]), Path(argv[2]), Path(argv[3]), float(argv[4]), argv[5].split(","))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
