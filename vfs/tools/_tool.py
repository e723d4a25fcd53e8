"""The synthesized tool value and its success/error envelope.

Theory of operation
-------------------
A :class:`Tool` is a frozen value: ``name``, ``description``, ``input_schema`` (a JSON-schema
dict, fresh on every access so nobody can edit a shared one) and the FileSystem it is bound to.
``await tool.invoke(arguments)`` never raises for anything the model can cause; it returns a
:class:`ToolResult`:

* success: ``ToolResult(ok=True, content=...)``, where ``content`` is JSON-ready (a string, or
  a dict such as ``{"occurrencesModified": 1}`` or an image part);
* failure: ``ToolResult(ok=False, error=message)`` for invalid arguments
  (:class:`~vfs.tools._args.ArgumentError`) and for every ``OSError`` a FileSystem raises,
  ``PathError`` included, whose message is shown as-is (``not found: /a.txt``): FileSystem
  methods throw, and invoke wraps the throw into the executor's error envelope.

Anything else (a ``TypeError`` from a buggy tree, cancellation) propagates: it is not the
model's doing and hiding it would hide the bug.

What comes back is text any JSON encoder takes: a host name that is not UTF-8 reaches Python
with surrogate escapes (``os.fsdecode``), which no UTF-8 encoder accepts, so every string of
the content and of an error is shown through :func:`vfs._paths.printable` (byte ``0x80`` of a
name as ``\\x80``). Such a name is shown, not addressable by that spelling.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .._paths import printable
from .._types import FileSystem
from ._args import ArgumentError, Param, input_schema, parse_arguments

Content = str | dict[str, Any]
"""What a successful tool call returns: text, or a JSON-ready dict."""


@dataclass(frozen=True, slots=True)
class ToolResult:
    """The executor's envelope: ``ok`` with ``content``, or not ``ok`` with ``error``."""

    ok: bool
    content: Content | None = None
    error: str | None = None

    @classmethod
    def success(cls, content: Content) -> ToolResult:
        return cls(ok=True, content=content)

    @classmethod
    def failure(cls, message: str) -> ToolResult:
        return cls(ok=False, error=message)


Body = Callable[[FileSystem, Callable[[str], str], dict[str, object]], Awaitable[Content]]
"""A tool's work: ``(fs, resolve_path, canonical arguments) -> content``; raises on failure."""


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """What a tool is, before it is bound to a FileSystem."""

    name: str
    description: str
    params: tuple[Param, ...]
    body: Body = field(repr=False)


@dataclass(frozen=True, slots=True)
class Tool:
    """A file tool synthesized from a bound FileSystem (see the module docstring)."""

    spec: ToolSpec = field(repr=False)
    fs: FileSystem
    resolve_path: Callable[[str], str] = field(repr=False)
    name: str = field(init=False)
    description: str = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", self.spec.name)
        object.__setattr__(self, "description", self.spec.description)

    @property
    def input_schema(self) -> dict[str, Any]:
        """The JSON schema of the arguments (canonical names only; aliases are accepted too)."""
        return input_schema(self.spec.params)

    def parse_arguments(self, arguments: Mapping[str, object]) -> dict[str, object]:
        """``arguments`` under their canonical names, validated (aliases mapped, ``explanation``
        dropped); raises :class:`~vfs.tools._args.ArgumentError`. For callers that rewrite a
        call's arguments before invoking it."""
        return parse_arguments(self.name, self.spec.params, arguments)

    async def invoke(self, arguments: Mapping[str, object]) -> ToolResult:
        """Run the tool; FileSystem errors and bad arguments become error envelopes."""
        try:
            parsed = self.parse_arguments(arguments)
            content = await self.spec.body(self.fs, self.resolve_path, parsed)
        except (ArgumentError, OSError) as error:
            return ToolResult.failure(printable(str(error)))
        return ToolResult.success(_printable_content(content))


def _printable_content(content: Any) -> Any:
    """``content`` with every string :func:`~vfs._paths.printable` (JSON-ready for any encoder)."""
    if isinstance(content, str):
        return printable(content)
    if isinstance(content, dict):
        return {printable(key): _printable_content(value) for key, value in content.items()}
    if isinstance(content, list):
        return [_printable_content(item) for item in content]
    return content
