"""The eight file tools, and :func:`synthesize_tools`, which binds them to a FileSystem.

Theory of operation
-------------------
Each tool is a :class:`~vfs.tools._tool.ToolSpec`: a name, a description, declared parameters
(with the native aliases accepted at invoke time) and a body that makes FileSystem calls:

========================  =====================================================================
``Read``                  text read a window at a time, numbered like ``cat -n``; images ``read``
                          whole, as a base64 part
``LS``                    ``stat`` then ``list``; directories marked ``/``, symlinks ``@``
``Grep``                  ``grep`` with ``output_mode``/``head_limit``/``offset`` on the tool
``Glob``                  ``glob(pattern, path)``; matches relative to ``path``
``Write``                 ``write``; ``Wrote contents to {path}``
``StrReplace``            ``read`` + literal splice + ``write``; ``{"occurrencesModified": n}``
``Delete``                ``delete``; ``Deleted {path}``
``SemanticSearch``        ``search``, by score; ``No results found`` without an index
========================  =====================================================================

Every path argument is resolved once at the tool boundary, the way the bound tree reads paths:
:func:`path_resolver` is ``normalize_path`` for a virtual tree (``a.txt`` is ``/a.txt``) and the
tree's own ``resolve`` for the host-default ``local_file_system`` (relative to its cwd). So the
paths in messages (``Wrote contents to /a.txt``, ``not found: /a.txt``) are the tree's paths.

StrReplace checks its arguments before it reads (an empty ``oldText`` fails without I/O), edits
the file's exact bytes (``vfs.tools._edit``), and refuses a file over ``EDIT_MAX_BYTES``; a
failure to write the edit back is reported as ``WriteFailedError`` (``write failed: {path}``,
the tree's own error chained as ``__cause__``), as the contract says. Write, StrReplace and
Delete of one file are serialized (``vfs.tools._edit.EDIT_LOCKS``), so parallel calls never
lose an edit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import cast

from .._content import contents_for, is_image_path
from .._errors import EditError, FileNotFoundError, NotADirectoryError, WriteFailedError
from .._local import LocalFileSystem
from .._paths import ROOT, base_name, normalize_path
from .._reading import TooLargeError, read_at_most
from .._types import FileSystem, GrepQuery, SearchQuery, SearchResult
from ._args import ArgumentError, Param
from ._edit import EDIT_LOCKS, EDIT_MAX_BYTES, TOO_LARGE, check_edit, splice
from ._grep import OUTPUT_MODES, OutputMode, grep_tool
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
    resolve_tool,
)
from ._read import render
from ._tool import Content, Tool, ToolSpec

NO_FILES = "No files found"
NO_RESULTS = "No results found"

FILE_ALIASES = ("file_path", "filePath", "target_file", "targetFile")
DIR_ALIASES = ("target_directory", "targetDirectory", "directory")


def path_resolver(fs: FileSystem) -> Callable[[str], str]:
    """How ``fs`` reads a path argument (see the module docstring)."""
    if isinstance(fs, LocalFileSystem):
        return fs.resolve
    return normalize_path


def _str(args: dict[str, object], name: str, default: str = "") -> str:
    return cast(str, args.get(name, default))


def _int(args: dict[str, object], name: str) -> int | None:
    return cast("int | None", args.get(name))


# --- Read -----------------------------------------------------------------------------------


async def _read(fs: FileSystem, resolve: Callable[[str], str], args: dict[str, object]) -> Content:
    path = resolve(_str(args, "path"))
    return await render(fs, path, _int(args, "offset"), _int(args, "limit"))


READ_SPEC = ToolSpec(
    READ,
    "Read a file. Text comes back with numbered lines, like `cat -n`: the line number "
    "right-aligned in six columns, a tab, then the line. Use offset (first line, 1-based; "
    "negative counts from the end) and limit (most lines) for long files. Images (jpeg, png, "
    "gif, webp) come back as an image.",
    (
        Param(
            "path",
            "string",
            "The file to read.",
            required=True,
            aliases=FILE_ALIASES,
            names_a_path=True,
        ),
        Param("offset", "integer", "The first line to show (1-based; negative: from the end)."),
        Param("limit", "integer", "The most lines to show.", minimum=1),
    ),
    _read,
)


# --- LS -------------------------------------------------------------------------------------


async def _ls(fs: FileSystem, resolve: Callable[[str], str], args: dict[str, object]) -> Content:
    path = resolve(_str(args, "path"))
    info = await fs.stat(path)
    if not info.exists:
        raise FileNotFoundError(path)
    if info.kind != "directory":
        raise NotADirectoryError(path)
    marks = {"directory": "/", "symlink": "@"}
    lines = [path if path == ROOT else path + "/"]
    async for entry in fs.list(path):
        lines.append("  " + base_name(entry.path) + marks.get(entry.kind, ""))
    return "\n".join(lines)


LS_SPEC = ToolSpec(
    LS,
    "List a directory: its path, then one entry per line. Directories end with `/`, "
    "symbolic links with `@`.",
    (
        Param(
            "path",
            "string",
            "The directory to list (default: the root).",
            aliases=(*DIR_ALIASES, "dir"),
            names_a_path=True,
        ),
    ),
    _ls,
)


# --- Grep -----------------------------------------------------------------------------------


async def _grep(fs: FileSystem, resolve: Callable[[str], str], args: dict[str, object]) -> Content:
    glob = args.get("glob")
    query = GrepQuery(
        pattern=_str(args, "pattern"),
        path=resolve(_str(args, "path")),
        glob=cast("str | None", glob) or None,
        case_insensitive=bool(args.get("-i", False)),
    )
    return await grep_tool(
        fs,
        query,
        cast(OutputMode, _str(args, "output_mode", "content")),
        head_limit=_int(args, "head_limit"),
        offset=_int(args, "offset") or 0,
    )


GREP_SPEC = ToolSpec(
    GREP,
    "Search file contents with a regular expression (Python `re` syntax). output_mode "
    "`content` (default) shows `path:line:text` per matching line, `files_with_matches` each "
    "matching file once, `count` `path:count` per file. glob filters files (`*.py` matches the "
    "file name at any depth). head_limit caps what is shown (0: no cap) after skipping offset.",
    (
        Param(
            "pattern",
            "string",
            "The regular expression.",
            required=True,
            aliases=("query", "regex"),
        ),
        Param(
            "path",
            "string",
            "File or directory to search (default: the root).",
            aliases=DIR_ALIASES,
            names_a_path=True,
        ),
        Param(
            "glob",
            "string",
            "Only files matching this glob.",
            aliases=("include_pattern", "includePattern"),
        ),
        Param(
            "-i",
            "boolean",
            "Case-insensitive.",
            aliases=("case_insensitive", "caseInsensitive", "ignore_case"),
        ),
        Param(
            "output_mode",
            "string",
            "What to show.",
            aliases=("outputMode",),
            enum=OUTPUT_MODES,
            default="content",
        ),
        Param(
            "head_limit",
            "integer",
            "Show at most this many lines/files (0: all).",
            aliases=("headLimit",),
            minimum=0,
        ),
        Param("offset", "integer", "Skip this many lines/files first.", minimum=0),
    ),
    _grep,
)


# --- Glob -----------------------------------------------------------------------------------


async def _glob(fs: FileSystem, resolve: Callable[[str], str], args: dict[str, object]) -> Content:
    directory = resolve(_str(args, "path"))
    lines = [
        entry.path + ("/" if entry.kind == "directory" else "")
        async for entry in fs.glob(_str(args, "pattern"), directory)
    ]
    return "\n".join(lines) if lines else NO_FILES


GLOB_SPEC = ToolSpec(
    GLOB,
    "Find files by glob pattern, matched against the path relative to `path` (`*.ts` finds "
    "`a.ts` directly in `path`; `**/*.ts` finds them at any depth). One path per line; "
    "directories end with `/`.",
    (
        Param(
            "pattern",
            "string",
            "The glob pattern.",
            required=True,
            aliases=("glob_pattern", "globPattern"),
        ),
        Param(
            "path",
            "string",
            "The directory to match under (default: the root).",
            aliases=DIR_ALIASES,
            names_a_path=True,
        ),
    ),
    _glob,
)


# --- Write ----------------------------------------------------------------------------------


async def _write(fs: FileSystem, resolve: Callable[[str], str], args: dict[str, object]) -> Content:
    path = resolve(_str(args, "path"))
    async with EDIT_LOCKS.hold(fs, path):
        await fs.write(path, _str(args, "fileText"))
    return f"Wrote contents to {path}"


WRITE_SPEC = ToolSpec(
    WRITE,
    "Create or overwrite a file with the given text. Parent directories are created.",
    (
        Param(
            "path",
            "string",
            "The file to write.",
            required=True,
            aliases=FILE_ALIASES,
            names_a_path=True,
        ),
        Param(
            "fileText",
            "string",
            "The whole new contents of the file.",
            required=True,
            aliases=("contents", "content", "file_text"),
        ),
    ),
    _write,
)


# --- StrReplace -----------------------------------------------------------------------------


async def _str_replace(
    fs: FileSystem, resolve: Callable[[str], str], args: dict[str, object]
) -> Content:
    path = resolve(_str(args, "path"))
    old, new = _str(args, "oldText"), _str(args, "newText")
    check_edit(path, old, new)
    if is_image_path(path):
        raise ArgumentError(f"StrReplace: {path} is an image, not text")
    async with EDIT_LOCKS.hold(fs, path):
        try:
            data = await read_at_most(fs, path, EDIT_MAX_BYTES)
        except TooLargeError:
            raise EditError(path, TOO_LARGE) from None
        edited, occurrences = splice(path, data, old, new, bool(args.get("replaceAll", False)))
        try:
            await fs.write(path, contents_for(path, edited))
        except OSError as error:
            raise WriteFailedError(path) from error
    return {"occurrencesModified": occurrences}


STR_REPLACE_SPEC = ToolSpec(
    STR_REPLACE,
    "Replace exact text in a file. oldText must occur exactly once unless replaceAll is true; "
    "include enough surrounding lines to make it unique. The text is matched literally "
    "(no regular expressions) and must not include Read's line-number prefixes.",
    (
        Param(
            "path",
            "string",
            "The file to edit.",
            required=True,
            aliases=FILE_ALIASES,
            names_a_path=True,
        ),
        Param(
            "oldText",
            "string",
            "The exact text to replace.",
            required=True,
            aliases=("old_string", "oldString", "old_str"),
        ),
        Param(
            "newText",
            "string",
            "The text to put in its place.",
            required=True,
            aliases=("new_string", "newString", "new_str"),
        ),
        Param("replaceAll", "boolean", "Replace every occurrence.", aliases=("replace_all",)),
    ),
    _str_replace,
)


# --- Delete ---------------------------------------------------------------------------------


async def _delete(
    fs: FileSystem, resolve: Callable[[str], str], args: dict[str, object]
) -> Content:
    path = resolve(_str(args, "path"))
    async with EDIT_LOCKS.hold(fs, path):
        await fs.delete(path)
    return f"Deleted {path}"


DELETE_SPEC = ToolSpec(
    DELETE,
    "Delete a file.",
    (
        Param(
            "path",
            "string",
            "The file to delete.",
            required=True,
            aliases=FILE_ALIASES,
            names_a_path=True,
        ),
    ),
    _delete,
)


# --- SemanticSearch -------------------------------------------------------------------------


async def _semantic_search(
    fs: FileSystem, resolve: Callable[[str], str], args: dict[str, object]
) -> Content:
    if "path" in args and "target_directories" in args:
        raise ArgumentError("SemanticSearch: conflicting arguments: path and target_directories")
    directories = cast("list[str]", args.get("target_directories") or [_str(args, "path")])
    cap = _int(args, "numResults")
    found: set[SearchResult] = set()
    for directory in dict.fromkeys(resolve(d) for d in directories):
        query = SearchQuery(_str(args, "query"), directory, max_results=cap)
        found.update([result async for result in fs.search(query)])
    # One tree's results are sorted already; several directories are merged the same way.
    results = sorted(found, key=lambda r: (-r.score, r.path, r.snippet))[:cap]
    if not results:
        return NO_RESULTS
    return "\n\n".join(f"{r.path} (score {r.score:.3f})\n{r.snippet}" for r in results)


SEMANTIC_SEARCH_SPEC = ToolSpec(
    SEMANTIC_SEARCH,
    "Search the files by meaning, with the tree's index. Results come best first: the path and "
    "score, then a snippet. Trees without an index find nothing.",
    (
        Param("query", "string", "What to look for, in plain words.", required=True),
        Param(
            "target_directories",
            "array",
            "Directories to search in (default: the root).",
            names_a_path=True,
        ),
        Param(
            "path",
            "string",
            "One directory to search in (instead of target_directories).",
            aliases=DIR_ALIASES,
            names_a_path=True,
        ),
        Param(
            "numResults",
            "integer",
            "The most results to return.",
            aliases=("num_results", "maxResults", "max_results"),
            minimum=1,
        ),
    ),
    _semantic_search,
)


SPECS: Mapping[str, ToolSpec] = MappingProxyType(
    {
        spec.name: spec
        for spec in (
            READ_SPEC,
            LS_SPEC,
            GREP_SPEC,
            GLOB_SPEC,
            WRITE_SPEC,
            STR_REPLACE_SPEC,
            DELETE_SPEC,
            SEMANTIC_SEARCH_SPEC,
        )
    }
)


def synthesize_tools(
    fs: FileSystem,
    names: Iterable[str] = FILE_TOOL_NAMES,
    *,
    resolve_path: Callable[[str], str] | None = None,
) -> dict[str, Tool]:
    """The file tools ``names`` (synthesized names, e.g. ``Toolset.file_tools``) bound to ``fs``,
    keyed by name in the canonical order. ``resolve_path`` is how path arguments resolve
    (default: :func:`path_resolver` of ``fs``). Raises ``ValueError`` for a name that is not
    one."""
    wanted = set(names)
    unknown = wanted - set(FILE_TOOL_NAMES)
    if unknown:
        known = ", ".join(FILE_TOOL_NAMES)
        raise ValueError(f"not a file tool: {', '.join(sorted(unknown))} (expected {known})")
    resolve = path_resolver(fs) if resolve_path is None else resolve_path
    return {name: Tool(SPECS[name], fs, resolve) for name in FILE_TOOL_NAMES if name in wanted}


def lookup_tool(tools: Mapping[str, Tool], name: str) -> Tool | None:
    """The tool in ``tools`` a call named ``name`` means (``read_file`` finds ``Read``)."""
    resolved = resolve_tool(name)
    return None if resolved is None else tools.get(resolved)
