"""Tool-name aliases: the runtime table of native-tool-replay.md, and what each name resolves to."""

from __future__ import annotations

import pytest

from vfs.tools import RUNTIME_ALIASES, resolve_tool, sdk_name

# The seed's "Runtime alias normalization" table, row by row.
TABLE = [
    (("read_file",), "read"),
    (("list_dir",), "ls"),
    (("run_terminal_cmd", "terminal", "bash", "shell"), "shell"),
    (("grep_search", "search"), "grep"),
    (("file_search",), "glob"),
    (("write_file", "writefile"), "write"),
    (
        (
            "strreplace",
            "str_replace",
            "str-replace",
            "edit_file",
            "editfile",
            "edit_notebook",
            "editnotebook",
            "notebook_edit",
            "notebookedit",
        ),
        "edit",
    ),
    (("websearch", "web_search", "web-search"), "webSearch"),
    (("webfetch", "web_fetch", "web-fetch"), "webFetch"),
]


def test_the_table_is_the_seed_table() -> None:
    assert dict(RUNTIME_ALIASES) == {alias: sdk for aliases, sdk in TABLE for alias in aliases}


@pytest.mark.parametrize(
    ("alias", "sdk"), [(alias, sdk) for aliases, sdk in TABLE for alias in aliases]
)
def test_each_alias(alias: str, sdk: str) -> None:
    assert sdk_name(alias) == sdk
    assert sdk_name(alias.upper()) == sdk


@pytest.mark.parametrize(
    ("name", "tool"),
    [
        ("read", "Read"),
        ("read_file", "Read"),
        ("Read", "Read"),
        ("ls", "LS"),
        ("list_dir", "LS"),
        ("LS", "LS"),
        ("grep", "Grep"),
        ("grep_search", "Grep"),
        ("search", "Grep"),
        ("Grep", "Grep"),
        ("glob", "Glob"),
        ("file_search", "Glob"),
        ("write", "Write"),
        ("write_file", "Write"),
        ("writefile", "Write"),
        ("Write", "Write"),
        ("edit", "StrReplace"),
        ("StrReplace", "StrReplace"),
        ("str_replace", "StrReplace"),
        ("str-replace", "StrReplace"),
        ("edit_file", "StrReplace"),
        ("delete", "Delete"),
        ("Delete", "Delete"),
        ("semSearch", "SemanticSearch"),
        ("SemanticSearch", "SemanticSearch"),
        ("shell", None),
        ("bash", None),
        ("webSearch", None),
        ("web_fetch", None),
        ("task", None),
        ("mcp", None),
        ("codebase_search", None),  # not in the table: keeps its name, is no file tool
        ("myTool", None),
    ],
)
def test_resolve_tool(name: str, tool: str | None) -> None:
    assert resolve_tool(name) == tool


@pytest.mark.parametrize(
    ("name", "sdk"),
    [
        ("readLints", "readLints"),
        ("READLINTS", "readLints"),
        ("updateTodos", "updateTodos"),
        ("SemanticSearch", "semSearch"),
        ("StrReplace", "edit"),
        ("myTool", "myTool"),
        ("codebase_search", "codebase_search"),
    ],
)
def test_sdk_name(name: str, sdk: str) -> None:
    assert sdk_name(name) == sdk
