"""Shared bits of the ``vfs.tools`` tests: run a tool call under a backend, in one line."""

from __future__ import annotations

from collections.abc import Mapping

import anyio

import vfs
from vfs.tools import ToolResult, synthesize_tools

BACKENDS = ("trio", "asyncio")


def call(
    backend: str, fs: vfs.FileSystem, tool: str, arguments: Mapping[str, object]
) -> ToolResult:
    """Synthesize ``tool`` over ``fs`` and invoke it once under ``backend``."""

    async def main() -> ToolResult:
        return await synthesize_tools(fs, [tool])[tool].invoke(arguments)

    return anyio.run(main, backend=backend)


def ok(content: object) -> ToolResult:
    return ToolResult(ok=True, content=content)  # type: ignore[arg-type]


def err(message: str) -> ToolResult:
    return ToolResult(ok=False, error=message)
