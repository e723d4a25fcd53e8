"""``vfs.tools``: the native file tools synthesized from a bound FileSystem, and the allowlist.

A local turn binds one FileSystem and builds the model's file tools from it
(:func:`synthesize_tools`): Read, LS, Grep, Glob, Write, StrReplace, Delete and SemanticSearch.
Each is a frozen :class:`Tool` with a name, a description, a JSON schema and
``await tool.invoke(arguments) -> ToolResult``, which turns FileSystem errors and bad arguments
into error envelopes. Native argument aliases (``old_string``, ``file_path`` ...) map at invoke
time; native tool names (``read_file``, ``str_replace`` ...) resolve with :func:`resolve_tool`.

:func:`resolve_toolset` is the contract's Allowlist and Fail closed tables in one function, and
:func:`check_workspace_file_path` refuses per-send workspace files under ``memory/``.
See ``docs/tools.md``.
"""

from ._args import ArgumentError, Param
from ._edit import splice
from ._file_tools import lookup_tool, path_resolver, synthesize_tools
from ._grep import OutputMode
from ._names import FILE_TOOL_NAMES, RUNTIME_ALIASES, resolve_tool, sdk_name
from ._read import number_lines
from ._tool import Content, Tool, ToolResult, ToolSpec
from ._toolset import (
    FILE_FAMILIES,
    BindsTools,
    LocalOptions,
    Runtime,
    Toolset,
    ToolsetError,
    resolve_toolset,
)
from ._workspace import ReservedPathError, check_workspace_file_path

__all__ = [
    "FILE_FAMILIES",
    "FILE_TOOL_NAMES",
    "RUNTIME_ALIASES",
    "ArgumentError",
    "BindsTools",
    "Content",
    "LocalOptions",
    "OutputMode",
    "Param",
    "ReservedPathError",
    "Runtime",
    "Tool",
    "ToolResult",
    "ToolSpec",
    "Toolset",
    "ToolsetError",
    "check_workspace_file_path",
    "lookup_tool",
    "number_lines",
    "path_resolver",
    "resolve_tool",
    "resolve_toolset",
    "sdk_name",
    "splice",
    "synthesize_tools",
]
