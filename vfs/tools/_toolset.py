"""The allowlist and fail-closed tables of the contract, as one function.

Theory of operation
-------------------
:func:`resolve_toolset` takes what an author configured (``root``, ``tools``, ``runtime``, the
``local`` options and the discovered user tool files) and answers the model-facing tool set, a
:class:`Toolset`, or raises :class:`ToolsetError` naming the rule that refused the combination.
It only decides; binding a FileSystem is :meth:`Toolset.bind` (a factory ``root`` is re-resolved
before every turn, so the set of tools is decided once and bound per turn).

Names in ``tools`` are read as SDK names through the runtime alias table, case-insensitively
(``bash`` is ``shell``, ``read_file`` is ``read``), except ``search``: it is not an allowlist
alias, so it stays a name of its own (an authored tool) and is never SemanticSearch or Grep.

*File families* are the allowlist names that stand for synthesized tools: ``read`` (Read),
``ls`` (LS), ``grep`` (Grep), ``glob`` (Glob), ``write`` (Write), ``edit`` (Write and StrReplace),
``delete`` (Delete) and ``semSearch`` (SemanticSearch, authored ``root`` only; on the host
default ``semSearch`` is the native host index and stays native). Then:

* ``tools`` omitted: every file tool of the root kind (seven on the host default, eight with
  SemanticSearch under ``root``). Host default keeps the SDK's own catalog (``native_tools`` is
  ``None``) and hides the host file natives with ``disallowed_tools``; ``root`` gets webSearch,
  webFetch, updateTodos, readTodos and ``mcp`` and binds ``/tmp`` scratch.
* ``tools == []``: nothing at all (legal).
* ``tools`` names a file family: exactly those families' tools are synthesized.
* ``tools`` names no file family: every file tool of the root kind.
* Other names ride the SDK allowlist (``native_tools``) unchanged; file-family names never do
  (the synthesized tools replace them). ``mcp`` is granted whenever any tool rides that path.
* Under ``root``, ``/tmp`` scratch is bound when webSearch or webFetch stays.

Fail closed (checked in this order; the first broken rule is raised):

1. an unknown ``runtime``;
2. a user tool file named like a synthesized tool (``agent/tools/Read.ts``, ``read.py``; the
   name before the first dot, case-insensitively), for the host default and ``root`` alike;
3. ``root`` with a non-local ``runtime`` (``cloud``, ``grokbot``);
4. ``root`` with ``local.cwd``, ``local.workspace_dir`` or ``local.sandbox``;
5. ``root`` with ``shell``, ``task`` or ``readLints`` in ``tools`` (any alias spelling).

Without ``root`` and off the local runtime there is no local turn: nothing is synthesized and
``tools`` passes through as given.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal, Protocol, runtime_checkable

from .._types import FileSystem
from ._file_tools import synthesize_tools
from ._names import (
    DELETE,
    FILE_TOOL_NAMES,
    GLOB,
    GREP,
    LS,
    READ,
    SEMANTIC_SEARCH,
    STR_REPLACE,
    WRITE,
    sdk_name,
)
from ._tool import Tool

Runtime = Literal["local", "cloud", "grokbot"]
RUNTIMES: tuple[str, ...] = ("local", "cloud", "grokbot")

FILE_FAMILIES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "read": (READ,),
        "ls": (LS,),
        "grep": (GREP,),
        "glob": (GLOB,),
        "write": (WRITE,),
        "edit": (WRITE, STR_REPLACE),
        "delete": (DELETE,),
        "semSearch": (SEMANTIC_SEARCH,),
    }
)
"""Allowlist name -> the synthesized tools it stands for."""

HOST_DEFAULT_FILE_TOOLS = tuple(name for name in FILE_TOOL_NAMES if name != SEMANTIC_SEARCH)
HOST_FILE_NATIVES = ("read", "ls", "grep", "glob", "edit", "delete")
"""What the host default hides from the SDK catalog: the synthesized tools replace them."""
ROOT_DEFAULT_NATIVES = ("webSearch", "webFetch", "updateTodos", "readTodos")
SCRATCH_TOOLS = frozenset({"webSearch", "webFetch"})

REFUSED_WITH_ROOT = {
    "shell": "shell runs on the host, outside the root",
    "task": (
        "a task's child agent keeps the host toolset; sharing root needs a Cursor SDK inherit, "
        "not an overridden Task"
    ),
    "readLints": (
        "diagnostics are not a FileSystem verb; readLints would run the host language service"
    ),
}


class ToolsetError(ValueError):
    """A configuration the allowlist refuses; ``rule`` names the rule (see the module)."""

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(message)
        self.rule = rule


@dataclass(frozen=True, slots=True)
class LocalOptions:
    """The ``local`` options of an agent that matter here. ``sandbox`` is Cursor's process
    sandbox around host child processes (any value but ``None`` means it is configured)."""

    cwd: str | None = None
    workspace_dir: str | None = None
    sandbox: object = None


@dataclass(frozen=True, slots=True)
class Toolset:
    """The model-facing tool set of a turn.

    ``file_tools``: the synthesized tools, in canonical order. ``native_tools``: the SDK
    allowlist besides the synthesized tools (``None``: the SDK's default catalog, host default
    only). ``disallowed_tools``: host natives hidden from that catalog. ``scratch_tmp``: bind
    ``/tmp`` scratch for the turn. ``mcp``: MCP tools are granted. ``authored_root``: a ``root``
    was given.
    """

    file_tools: tuple[str, ...]
    native_tools: tuple[str, ...] | None
    disallowed_tools: tuple[str, ...] = ()
    scratch_tmp: bool = False
    mcp: bool = False
    authored_root: bool = False

    @property
    def sdk_allowlist(self) -> tuple[str, ...] | None:
        """What the SDK is given as its allowlist (``native_tools`` plus ``mcp`` if granted)."""
        if self.native_tools is None:
            return None
        return (*self.native_tools, "mcp") if self.mcp else self.native_tools

    def bind(self, target: FileSystem | BindsTools) -> dict[str, Tool]:
        """The synthesized tools bound to this turn: to a :class:`vfs.turns.Turn` (which knows
        its spill rewrite and when it ends; see :class:`BindsTools`), or to a tree."""
        if isinstance(target, BindsTools):
            return target.bind_tools(self.file_tools)
        return synthesize_tools(target, self.file_tools)


@runtime_checkable
class BindsTools(Protocol):
    """What binds the file tools of a turn itself (:class:`vfs.turns.Turn`)."""

    def bind_tools(self, names: Iterable[str]) -> dict[str, Tool]: ...


def resolve_toolset(
    *,
    root: FileSystem | Callable[..., object] | None,
    tools: Sequence[str] | None,
    runtime: str = "local",
    local: LocalOptions | None = None,
    user_tool_files: Sequence[str] = (),
) -> Toolset:
    """The model-facing tool set for this configuration (see the module docstring); raises
    :class:`ToolsetError` naming the rule when the combination fails closed."""
    authored = root is not None
    if runtime not in RUNTIMES:
        raise ToolsetError(
            "runtime", f'unknown runtime "{runtime}" (expected local, cloud or grokbot)'
        )
    if isinstance(tools, str):
        raise ToolsetError("tools", f'tools must be a list of tool names, not the string "{tools}"')
    _check_user_tool_files(user_tool_files)
    if authored:
        _check_root(runtime, local or LocalOptions(), tools or ())
    names = None if tools is None else _allowlist_names(tools)

    if not authored and runtime != "local":
        # No local turn binds a tree: the runtime gets the allowlist as written.
        return Toolset((), names, mcp=names is None or bool(names))
    if names is None:
        if authored:
            return Toolset(
                FILE_TOOL_NAMES,
                ROOT_DEFAULT_NATIVES,
                scratch_tmp=True,
                mcp=True,
                authored_root=True,
            )
        return Toolset(HOST_DEFAULT_FILE_TOOLS, None, HOST_FILE_NATIVES, mcp=True)

    available = FILE_TOOL_NAMES if authored else HOST_DEFAULT_FILE_TOOLS
    families = [name for name in names if name in FILE_FAMILIES]
    if families:
        chosen = {tool for family in families for tool in FILE_FAMILIES[family]}
        file_tools = tuple(tool for tool in available if tool in chosen)
    else:
        file_tools = available if names else ()
    natives = tuple(
        name
        for name in names
        if name != "mcp" and (name not in FILE_FAMILIES or (name == "semSearch" and not authored))
    )
    return Toolset(
        file_tools,
        natives,
        scratch_tmp=authored and bool(SCRATCH_TOOLS.intersection(natives)),
        mcp=bool(names),
        authored_root=authored,
    )


def _allowlist_names(tools: Iterable[str]) -> tuple[str, ...]:
    """SDK names for the allowlist, deduplicated in order; ``search`` stays ``search``."""
    names = (name if name.lower() == "search" else sdk_name(name) for name in tools)
    return tuple(dict.fromkeys(names))


def _check_user_tool_files(files: Sequence[str]) -> None:
    synthesized = {name.casefold(): name for name in FILE_TOOL_NAMES}
    for file in files:
        stem = file.replace("\\", "/").rsplit("/", 1)[-1].split(".", 1)[0]
        clash = synthesized.get(stem.casefold())
        if clash is not None:
            raise ToolsetError(
                "user-tool-clash",
                f"user tool file {file} clashes with the synthesized {clash} tool (fail closed)",
            )


def _check_root(runtime: str, local: LocalOptions, tools: Sequence[str]) -> None:
    if runtime != "local":
        raise ToolsetError(
            "root+runtime",
            f'root cannot be combined with runtime "{runtime}": root binds a FileSystem in local '
            "turns only (fail closed)",
        )
    options = (
        ("cwd", local.cwd, "the root is the agent's whole disk, not a host working directory"),
        (
            "workspace_dir",
            local.workspace_dir,
            "the root is the agent's whole disk, not a host workspace directory",
        ),
        ("sandbox", local.sandbox, "the sandbox wraps host child processes and a root runs none"),
    )
    for option, value, reason in options:
        if value is not None:
            raise ToolsetError(
                f"root+local.{option}",
                f"root cannot be combined with local.{option}: {reason} (fail closed)",
            )
    for spelled in tools:
        name = sdk_name(spelled)
        reason_or_none = REFUSED_WITH_ROOT.get(name)
        if reason_or_none is not None:
            alias = "" if spelled == name else f" ({name})"
            raise ToolsetError(
                f"root+{name}",
                f'root cannot be combined with tools ["{spelled}"]{alias}: {reason_or_none} '
                "(fail closed)",
            )
