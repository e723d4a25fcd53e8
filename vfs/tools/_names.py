"""Tool names: the runtime aliases a model or a transcript uses, and the tools they mean.

Theory of operation
-------------------
Three vocabularies name the same tools:

* **SDK names** (the Cursor SDK ``ToolType``): ``read``, ``ls``, ``grep``, ``glob``, ``write``,
  ``edit``, ``delete``, ``semSearch``, ``shell``, ``task``, ``readLints``, ``webSearch`` ...
  Authored ``tools`` allowlists speak these.
* **Runtime aliases**: what a model or a recorded transcript may call a tool (``read_file``,
  ``list_dir``, ``str_replace``, ``file_search``, ``grep_search``, ``run_terminal_cmd`` ...).
  :data:`RUNTIME_ALIASES` is exactly the table of ``native-tool-replay.md``; lookups are
  case-insensitive, as ``normalizeCursorToolName`` is (the table itself lists ``strreplace``,
  ``writefile``, ``websearch``). A name that is in no table keeps its spelling.
* **Synthesized tool names**, the model-facing tools built from a FileSystem: ``Read``, ``LS``,
  ``Grep``, ``Glob``, ``Write``, ``StrReplace``, ``Delete``, ``SemanticSearch``.

``edit`` names StrReplace when a *call* is resolved (:func:`resolve_tool`), and the whole edit
family (Write and StrReplace) when an *allowlist* is read (``vfs.tools._toolset``); ``write``
names Write alone. ``search`` is a runtime alias of ``grep`` and never of SemanticSearch; the
allowlist does not treat it as a file tool at all (see the contract's Tool synthesis section).

Pure functions over constant tables; nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

READ = "Read"
LS = "LS"
GREP = "Grep"
GLOB = "Glob"
WRITE = "Write"
STR_REPLACE = "StrReplace"
DELETE = "Delete"
SEMANTIC_SEARCH = "SemanticSearch"

FILE_TOOL_NAMES: tuple[str, ...] = (
    READ,
    LS,
    GREP,
    GLOB,
    WRITE,
    STR_REPLACE,
    DELETE,
    SEMANTIC_SEARCH,
)
"""Every synthesized file tool, in the order tool sets list them."""

SDK_NAMES: tuple[str, ...] = (
    "read",
    "ls",
    "grep",
    "glob",
    "write",
    "edit",
    "delete",
    "semSearch",
    "shell",
    "readLints",
    "updateTodos",
    "readTodos",
    "createPlan",
    "task",
    "generateImage",
    "mcp",
    "recordScreen",
    "webSearch",
    "webFetch",
)
"""The Cursor SDK tool names this package knows (``ToolType`` plus ``readTodos``/web tools)."""

RUNTIME_ALIASES: Mapping[str, str] = MappingProxyType(
    {
        "read_file": "read",
        "list_dir": "ls",
        "run_terminal_cmd": "shell",
        "terminal": "shell",
        "bash": "shell",
        "shell": "shell",
        "grep_search": "grep",
        "search": "grep",
        "file_search": "glob",
        "write_file": "write",
        "writefile": "write",
        "strreplace": "edit",
        "str_replace": "edit",
        "str-replace": "edit",
        "edit_file": "edit",
        "editfile": "edit",
        "edit_notebook": "edit",
        "editnotebook": "edit",
        "notebook_edit": "edit",
        "notebookedit": "edit",
        "websearch": "webSearch",
        "web_search": "webSearch",
        "web-search": "webSearch",
        "webfetch": "webFetch",
        "web_fetch": "webFetch",
        "web-fetch": "webFetch",
    }
)
"""Runtime alias -> SDK name: the table of ``native-tool-replay.md``, verbatim."""

SDK_NAME_OF_TOOL: Mapping[str, str] = MappingProxyType(
    {
        READ: "read",
        LS: "ls",
        GREP: "grep",
        GLOB: "glob",
        WRITE: "write",
        STR_REPLACE: "edit",
        DELETE: "delete",
        SEMANTIC_SEARCH: "semSearch",
    }
)
"""Synthesized tool -> the SDK name its calls are reported under."""

_TOOL_OF_SDK_NAME: Mapping[str, str] = MappingProxyType(
    {sdk: tool for tool, sdk in SDK_NAME_OF_TOOL.items()}
)

# Lower-cased spelling -> SDK name, for every name any table knows. Synthesized tool names are
# their own aliases ("StrReplace" -> "strreplace" is already in the runtime table).
_LOWER: Mapping[str, str] = MappingProxyType(
    {
        **{name.lower(): name for name in SDK_NAMES},
        **{tool.lower(): sdk for tool, sdk in SDK_NAME_OF_TOOL.items()},
        **RUNTIME_ALIASES,
    }
)


def sdk_name(name: str) -> str:
    """The SDK name for ``name`` (an SDK name, a runtime alias or a synthesized tool name,
    in any case); a name no table knows is returned unchanged."""
    return _LOWER.get(name.lower(), name)


def resolve_tool(name: str) -> str | None:
    """The synthesized file tool a call named ``name`` means, or ``None`` for any other tool.

    ``resolve_tool("read_file") == "Read"``, ``resolve_tool("str_replace") == "StrReplace"``,
    ``resolve_tool("search") == "Grep"``, ``resolve_tool("shell") is None``.
    """
    return _TOOL_OF_SDK_NAME.get(sdk_name(name))
