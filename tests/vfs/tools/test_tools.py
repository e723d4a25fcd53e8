"""LS, Glob, Write, Delete, SemanticSearch; the Tool value, its schema and its envelopes."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path

import anyio
import pytest

import vfs
from vfs.tools import (
    FILE_TOOL_NAMES,
    Tool,
    ToolResult,
    lookup_tool,
    synthesize_tools,
)

from ..eightverb import EightVerbTree, exactly
from .helpers import BACKENDS, call, err, ok

FILES = {"/a.txt": "a", "/src/b.ts": "b", "/src/n/c.ts": "c", "/src/e/.keep": ""}

pytestmark = pytest.mark.parametrize("backend", BACKENDS)


# --- LS ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "result"),
    [
        ({}, ok("/\n  a.txt\n  src/")),
        ({"path": ""}, ok("/\n  a.txt\n  src/")),
        ({"path": "/src"}, ok("/src/\n  b.ts\n  e/\n  n/")),
        ({"target_directory": "src/e"}, ok("/src/e/\n  .keep")),
        ({"path": "/src/n/"}, ok("/src/n/\n  c.ts")),
        ({"path": "/nope"}, err("not found: /nope")),
        ({"path": "/a.txt"}, err("not a directory: /a.txt")),
        ({"path": "/src", "ignore_globs": ["*.ts"]}, err("LS: unknown argument: ignore_globs")),
    ],
)
def test_ls(backend: str, arguments: dict[str, object], result: ToolResult) -> None:
    assert call(backend, vfs.temp_fs(FILES), "LS", arguments) == result


def test_ls_empty_directory_and_symlinks(backend: str) -> None:
    async def main() -> None:
        fs = vfs.temp_fs({"/d/f": "x"})
        await fs.mkdir("/empty")
        await fs.symlink("/d/link", "/d/f")
        tools = synthesize_tools(fs, ["LS"])
        assert await tools["LS"].invoke({"path": "/empty"}) == ok("/empty/")
        assert await tools["LS"].invoke({"path": "/d"}) == ok("/d/\n  f\n  link@")

    anyio.run(main, backend=backend)


# --- Glob -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "result"),
    [
        ({"pattern": "*.ts", "path": "/src"}, ok("/src/b.ts")),
        ({"pattern": "**/*.ts", "target_directory": "/src"}, ok("/src/b.ts\n/src/n/c.ts")),
        ({"glob_pattern": "**/*.ts"}, ok("/src/b.ts\n/src/n/c.ts")),
        ({"pattern": "src/*"}, ok("/src/b.ts\n/src/e/\n/src/n/")),
        ({"pattern": "*.ts"}, ok("No files found")),
        ({"pattern": "*", "path": "/missing"}, ok("No files found")),
        ({"path": "/src"}, err("Glob: missing required argument: pattern")),
    ],
)
def test_glob(backend: str, arguments: dict[str, object], result: ToolResult) -> None:
    assert call(backend, vfs.temp_fs(FILES), "Glob", arguments) == result


# --- Write and Delete -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "path", "contents"),
    [
        ({"path": "/new/deep/f.txt", "fileText": "hi\n"}, "/new/deep/f.txt", "hi\n"),
        ({"file_path": "a.txt", "contents": ""}, "/a.txt", ""),
        ({"target_file": "/x/../b.txt", "content": "$&"}, "/b.txt", "$&"),
        ({"path": "/c.txt", "file_text": "c"}, "/c.txt", "c"),
    ],
)
def test_write(backend: str, arguments: dict[str, object], path: str, contents: str) -> None:
    async def main() -> None:
        fs = vfs.temp_fs(FILES)
        write = synthesize_tools(fs, ["Write"])["Write"]
        assert await write.invoke(arguments) == ok(f"Wrote contents to {path}")
        assert await fs.read(path) == contents

    anyio.run(main, backend=backend)


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"path": "/a.txt"}, "Write: missing required argument: fileText"),
        ({"fileText": "x"}, "Write: missing required argument: path"),
        ({"path": "/a.txt", "fileText": ["x"]}, "Write: fileText must be a string, not an array"),
        ({"path": "/a.txt/x", "fileText": "x"}, "not a directory: /a.txt/x"),
        ({"path": "/src", "fileText": "x"}, "is a directory: /src"),
    ],
)
def test_write_errors(backend: str, arguments: dict[str, object], error: str) -> None:
    assert call(backend, vfs.temp_fs(FILES), "Write", arguments) == err(error)


def test_delete(backend: str) -> None:
    async def main() -> None:
        fs = vfs.temp_fs(FILES)
        delete = synthesize_tools(fs, ["Delete"])["Delete"]
        assert await delete.invoke({"target_file": "src/b.ts"}) == ok("Deleted /src/b.ts")
        assert (await fs.stat("/src/b.ts")).kind == "missing"
        assert await delete.invoke({"path": "/src/b.ts"}) == err("not found: /src/b.ts")
        assert await delete.invoke({"path": "/src/n"}) == err("directory not empty: /src/n")

    anyio.run(main, backend=backend)


def test_read_only_mount_envelopes(backend: str, tmp_path: Path) -> None:
    (tmp_path / "r.txt").write_text("r\n")
    union = vfs.union_fs({"/": vfs.temp_fs(FILES), "/ro": vfs.dir_fs(tmp_path, read_only=True)})
    assert call(backend, union, "Write", {"path": "/ro/r.txt", "fileText": "x"}) == err(
        "read-only mount: /ro/r.txt"
    )
    assert call(backend, union, "Write", {"path": "/ro/new.txt", "fileText": "x"}) == err(
        "read-only mount: /ro/new.txt"
    )
    assert call(backend, union, "Delete", {"path": "/ro/r.txt"}) == err(
        "read-only mount: /ro/r.txt"
    )
    assert call(backend, union, "Read", {"path": "/ro/r.txt"}) == ok("     1\tr")
    assert call(backend, union, "LS", {"path": "/ro"}) == ok("/ro/\n  r.txt")
    assert call(backend, union, "Read", {"path": "/ro/gone.txt"}) == err("not found: /ro/gone.txt")
    assert call(backend, union, "Delete", {"path": "/ro/gone.txt"}) == err(
        "not found: /ro/gone.txt"  # nothing there to refuse
    )
    assert (tmp_path / "r.txt").read_text() == "r\n"


def test_empty_fs_and_no_mount(backend: str) -> None:
    assert call(backend, vfs.empty_fs(), "Write", {"path": "/a", "fileText": "x"}) == err(
        "read-only mount: /a"
    )
    assert call(backend, vfs.empty_fs(), "Delete", {"path": "/a"}) == err("not found: /a")
    overlay = vfs.overlay_fs([vfs.temp_fs({"/a": "a"})])
    assert call(backend, overlay, "Delete", {"path": "/a"}) == err("read-only mount: /a")
    assert call(backend, overlay, "Delete", {"path": "/b"}) == err("not found: /b")
    union = vfs.union_fs({"/m": vfs.temp_fs()})
    assert call(backend, union, "Read", {"path": "/a.txt"}) == err("no mount for path: /a.txt")


# --- SemanticSearch ---------------------------------------------------------------------------


def test_semantic_search(backend: str) -> None:
    tree = EightVerbTree(
        {
            "/notes/a.md": "cat cat cat",
            "/notes/b.md": "cat",
            "/other/c.md": "cat cat",
            "/d.md": "dog",
        }
    )
    assert call(backend, tree, "SemanticSearch", {"query": "cat"}) == ok(
        "/notes/a.md (score 3.000)\ncat\n\n/other/c.md (score 2.000)\ncat\n\n"
        "/notes/b.md (score 1.000)\ncat"
    )
    assert call(backend, tree, "SemanticSearch", {"query": "cat", "numResults": 1}) == ok(
        "/notes/a.md (score 3.000)\ncat"
    )
    assert tree.search_caps[-1] == 1
    assert call(
        backend,
        tree,
        "SemanticSearch",
        {"query": "cat", "target_directory": "/notes", "num_results": 5},
    ) == ok("/notes/a.md (score 3.000)\ncat\n\n/notes/b.md (score 1.000)\ncat")
    # several directories are merged by score, then path; overlaps count once
    arguments = {"query": "cat", "target_directories": ["/other", "/notes", "/notes/b.md"]}
    assert call(backend, tree, "SemanticSearch", arguments) == ok(
        "/notes/a.md (score 3.000)\ncat\n\n/other/c.md (score 2.000)\ncat\n\n"
        "/notes/b.md (score 1.000)\ncat"
    )
    assert call(backend, tree, "SemanticSearch", {"query": "bird"}) == ok("No results found")
    assert call(
        backend,
        tree,
        "SemanticSearch",
        {"query": "cat", "path": "/a", "target_directories": ["/b"]},
    ) == err("SemanticSearch: conflicting arguments: path and target_directories")
    assert call(
        backend, tree, "SemanticSearch", {"query": "cat", "target_directories": "/a"}
    ) == err("SemanticSearch: target_directories must be an array of strings, not a string")


def test_semantic_search_without_an_index(backend: str) -> None:
    assert call(backend, vfs.temp_fs(FILES), "SemanticSearch", {"query": "a"}) == ok(
        "No results found"
    )


# --- the host default -------------------------------------------------------------------------


def test_local_file_system_paths_are_host_paths(backend: str, tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.py").write_text("import os\n")
    local = vfs.local_file_system(tmp_path)
    root = os.fspath(tmp_path)
    assert call(backend, local, "Read", {"path": "src/a.py"}) == ok("     1\timport os")
    assert call(backend, local, "Read", {"path": f"{root}/src/a.py"}) == ok("     1\timport os")
    assert call(backend, local, "Grep", {"pattern": "os"}) == ok(f"{root}/src/a.py:1:import os")
    assert call(backend, local, "LS", {}) == ok(f"{root}/\n  src/")
    assert call(backend, local, "Write", {"path": "b.txt", "fileText": "b"}) == ok(
        f"Wrote contents to {root}/b.txt"
    )
    assert (tmp_path / "b.txt").read_text() == "b"
    assert call(backend, local, "Read", {"path": "nope.txt"}) == err(f"not found: {root}/nope.txt")
    assert call(backend, local, "Grep", {"pattern": "x", "path": "nope"}) == err(
        f"not found: {root}/nope"
    )


# --- the Tool value ---------------------------------------------------------------------------


def test_synthesize_selects_in_canonical_order(backend: str) -> None:
    fs = vfs.temp_fs()
    assert list(synthesize_tools(fs)) == list(FILE_TOOL_NAMES)
    assert list(synthesize_tools(fs, ["Delete", "Read", "Read"])) == ["Read", "Delete"]
    assert synthesize_tools(fs, []) == {}
    with pytest.raises(ValueError, match="^" + re.escape("not a file tool: read, shell")):
        synthesize_tools(fs, ["shell", "read"])


def test_tools_are_frozen_values_with_json_schemas(backend: str) -> None:
    tools = synthesize_tools(vfs.temp_fs())
    for name, tool in tools.items():
        assert isinstance(tool, Tool)
        assert tool.name == name
        assert tool.description
        schema = tool.input_schema
        assert schema["type"] == "object"
        assert schema["additionalProperties"] is False
        assert set(schema["required"]) <= set(schema["properties"])
        json.dumps(schema)  # JSON-ready
        schema["properties"].clear()
        assert tool.input_schema["properties"], "every access is a fresh dict"
        with pytest.raises(dataclasses.FrozenInstanceError):
            tool.name = "x"  # type: ignore[misc]
    assert tools["StrReplace"].input_schema == {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "The file to edit."},
            "oldText": {"type": "string", "description": "The exact text to replace."},
            "newText": {"type": "string", "description": "The text to put in its place."},
            "replaceAll": {"type": "boolean", "description": "Replace every occurrence."},
        },
        "required": ["path", "oldText", "newText"],
        "additionalProperties": False,
    }
    assert tools["Grep"].input_schema["properties"]["output_mode"] == {
        "type": "string",
        "description": "What to show.",
        "enum": ["content", "files_with_matches", "count"],
        "default": "content",
    }
    assert tools["Read"].input_schema["required"] == ["path"]
    assert tools["Write"].input_schema["required"] == ["path", "fileText"]


def test_lookup_tool_by_native_name(backend: str) -> None:
    tools = synthesize_tools(vfs.temp_fs(), ["Read", "StrReplace", "Glob"])
    assert lookup_tool(tools, "read_file") is tools["Read"]
    assert lookup_tool(tools, "str_replace") is tools["StrReplace"]
    assert lookup_tool(tools, "file_search") is tools["Glob"]
    assert lookup_tool(tools, "list_dir") is None  # LS not synthesized
    assert lookup_tool(tools, "shell") is None


def test_errors_that_are_not_the_models_propagate(backend: str) -> None:
    """A tree's bug (not an OSError) is not turned into an envelope."""
    tree = EightVerbTree({"/a": "a"})
    tree.failure = RuntimeError("bug")
    with pytest.raises(RuntimeError, match=exactly("bug")):
        call(backend, tree, "Read", {"path": "/a"})
    tree.failure = OSError(5, "Input/output error")
    assert call(backend, tree, "Read", {"path": "/a"}) == err("[Errno 5] Input/output error")
