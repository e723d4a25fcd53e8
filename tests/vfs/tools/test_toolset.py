"""The contract's Allowlist and Fail closed tables, one test per row, literal expectations."""

from __future__ import annotations

import anyio
import pytest

import vfs
from vfs.tools import LocalOptions, Toolset, ToolsetError, resolve_toolset

SEVEN = ("Read", "LS", "Grep", "Glob", "Write", "StrReplace", "Delete")
EIGHT = (*SEVEN, "SemanticSearch")
ROOT = vfs.temp_fs({"/notes.md": "hello"})


def factory(ctx: object) -> vfs.FileSystem:
    return vfs.temp_fs()


# --- Allowlist --------------------------------------------------------------------------------

ALLOWLIST = [
    pytest.param(
        None,
        None,
        Toolset(
            file_tools=SEVEN,
            native_tools=None,
            disallowed_tools=("read", "ls", "grep", "glob", "edit", "delete"),
            scratch_tmp=False,
            mcp=True,
            authored_root=False,
        ),
        id="host-default, tools omitted: seven file tools, SDK catalog, host file natives hidden",
    ),
    pytest.param(
        None,
        ["read", "shell"],
        Toolset(file_tools=("Read",), native_tools=("shell",), mcp=True),
        id="host-default, [read, shell]: Read + shell + mcp",
    ),
    pytest.param(
        None,
        [],
        Toolset(file_tools=(), native_tools=(), mcp=False),
        id="host-default, []: nothing",
    ),
    pytest.param(
        ROOT,
        None,
        Toolset(
            file_tools=EIGHT,
            native_tools=("webSearch", "webFetch", "updateTodos", "readTodos"),
            scratch_tmp=True,
            mcp=True,
            authored_root=True,
        ),
        id="root, tools omitted: eight + web tools + todos + mcp, /tmp bound",
    ),
    pytest.param(
        ROOT,
        ["updateTodos"],
        Toolset(file_tools=EIGHT, native_tools=("updateTodos",), mcp=True, authored_root=True),
        id="root, [updateTodos]: eight + updateTodos + mcp",
    ),
    pytest.param(
        ROOT,
        ["semSearch"],
        Toolset(file_tools=("SemanticSearch",), native_tools=(), mcp=True, authored_root=True),
        id="root, [semSearch]: SemanticSearch + mcp, no native semSearch",
    ),
    pytest.param(
        ROOT,
        [],
        Toolset(file_tools=(), native_tools=(), mcp=False, authored_root=True),
        id="root, []: legal and empty",
    ),
    pytest.param(
        ROOT,
        ["webSearch"],
        Toolset(
            file_tools=EIGHT,
            native_tools=("webSearch",),
            scratch_tmp=True,
            mcp=True,
            authored_root=True,
        ),
        id="root, [webSearch]: eight + webSearch + mcp, /tmp bound",
    ),
    pytest.param(
        ROOT,
        ["webFetch"],
        Toolset(
            file_tools=EIGHT,
            native_tools=("webFetch",),
            scratch_tmp=True,
            mcp=True,
            authored_root=True,
        ),
        id="root, [webFetch]: eight + webFetch + mcp, /tmp bound",
    ),
]


@pytest.mark.parametrize(("root", "tools", "toolset"), ALLOWLIST)
def test_allowlist_table(
    root: vfs.FileSystem | None, tools: list[str] | None, toolset: Toolset
) -> None:
    assert resolve_toolset(root=root, tools=tools) == toolset


@pytest.mark.parametrize("tools", [["shell"], ["task"], ["readLints"]])
def test_allowlist_table_fail_closed_row(tools: list[str]) -> None:
    """The Allowlist row ``set | ["shell"] / ["task"] / ["readLints"] | Fail closed``."""
    with pytest.raises(ToolsetError, match=r"\(fail closed\)$"):
        resolve_toolset(root=ROOT, tools=tools)


def test_sdk_allowlist_adds_mcp() -> None:
    assert resolve_toolset(root=None, tools=["read", "shell"]).sdk_allowlist == ("shell", "mcp")
    assert resolve_toolset(root=ROOT, tools=None).sdk_allowlist == (
        "webSearch",
        "webFetch",
        "updateTodos",
        "readTodos",
        "mcp",
    )
    assert resolve_toolset(root=ROOT, tools=[]).sdk_allowlist == ()
    assert resolve_toolset(root=None, tools=None).sdk_allowlist is None


# --- Tool synthesis examples of the contract, and the rules between the rows ------------------


@pytest.mark.parametrize(
    ("root", "tools", "file_tools", "native_tools"),
    [
        pytest.param(None, ["edit"], ("Write", "StrReplace"), (), id="edit is Write + StrReplace"),
        pytest.param(ROOT, ["edit"], ("Write", "StrReplace"), (), id="root: edit"),
        pytest.param(ROOT, ["write"], ("Write",), (), id="write is Write alone"),
        pytest.param(
            ROOT,
            ["read", "grep", "webFetch"],
            ("Read", "Grep"),
            ("webFetch",),
            id="families filter",
        ),
        pytest.param(
            None, ["semSearch"], (), ("semSearch",), id="host-default: semSearch stays native"
        ),
        pytest.param(
            None, ["read", "semSearch"], ("Read",), ("semSearch",), id="host: never SemanticSearch"
        ),
        pytest.param(ROOT, ["read_file", "list_dir"], ("Read", "LS"), (), id="runtime aliases"),
        pytest.param(ROOT, ["READ", "Read"], ("Read",), (), id="case-insensitive, deduplicated"),
        pytest.param(ROOT, ["search"], EIGHT, ("search",), id="search is not an allowlist alias"),
        pytest.param(ROOT, ["myTool"], EIGHT, ("myTool",), id="an authored tool rides along"),
        pytest.param(None, ["shell"], SEVEN, ("shell",), id="host: no family named, seven"),
        pytest.param(ROOT, ["mcp"], EIGHT, (), id="mcp is the flag, not a native name"),
    ],
)
def test_filtering(
    root: vfs.FileSystem | None,
    tools: list[str],
    file_tools: tuple[str, ...],
    native_tools: tuple[str, ...],
) -> None:
    toolset = resolve_toolset(root=root, tools=tools)
    assert toolset.file_tools == file_tools
    assert toolset.native_tools == native_tools
    assert toolset.mcp
    assert toolset.disallowed_tools == ()


def test_a_factory_root_counts_as_authored() -> None:
    assert resolve_toolset(root=factory, tools=None) == resolve_toolset(root=ROOT, tools=None)


def test_host_default_off_the_local_runtime_synthesizes_nothing() -> None:
    assert resolve_toolset(root=None, tools=None, runtime="cloud") == Toolset((), None, mcp=True)
    assert resolve_toolset(root=None, tools=["bash"], runtime="grokbot") == Toolset(
        (), ("shell",), mcp=True
    )


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_bind(backend: str) -> None:
    async def main() -> None:
        tools = resolve_toolset(root=ROOT, tools=["read"]).bind(ROOT)
        assert list(tools) == ["Read"]
        assert (await tools["Read"].invoke({"path": "/notes.md"})).content == "     1\thello"

    anyio.run(main, backend=backend)


# --- Fail closed ------------------------------------------------------------------------------

FAIL_CLOSED = [
    pytest.param(
        {"root": ROOT, "tools": None, "local": LocalOptions(cwd="/work")},
        "root+local.cwd",
        "root cannot be combined with local.cwd: the root is the agent's whole disk, not a host "
        "working directory (fail closed)",
        id="root + local.cwd",
    ),
    pytest.param(
        {"root": ROOT, "tools": None, "local": LocalOptions(workspace_dir="/ws")},
        "root+local.workspace_dir",
        "root cannot be combined with local.workspace_dir: the root is the agent's whole disk, "
        "not a host workspace directory (fail closed)",
        id="root + local.workspaceDir",
    ),
    pytest.param(
        {"root": ROOT, "tools": None, "local": LocalOptions(sandbox={"enabled": True})},
        "root+local.sandbox",
        "root cannot be combined with local.sandbox: the sandbox wraps host child processes and "
        "a root runs none (fail closed)",
        id="root + local.sandbox",
    ),
    pytest.param(
        {"root": ROOT, "tools": None, "runtime": "cloud"},
        "root+runtime",
        'root cannot be combined with runtime "cloud": root binds a FileSystem in local turns '
        "only (fail closed)",
        id="root + runtime cloud",
    ),
    pytest.param(
        {"root": factory, "tools": None, "runtime": "grokbot"},
        "root+runtime",
        'root cannot be combined with runtime "grokbot": root binds a FileSystem in local turns '
        "only (fail closed)",
        id="root + runtime grokbot",
    ),
    pytest.param(
        {"root": ROOT, "tools": ["read", "shell"]},
        "root+shell",
        'root cannot be combined with tools ["shell"]: shell runs on the host, outside the root '
        "(fail closed)",
        id="root + tools containing shell",
    ),
    pytest.param(
        {"root": ROOT, "tools": ["run_terminal_cmd"]},
        "root+shell",
        'root cannot be combined with tools ["run_terminal_cmd"] (shell): shell runs on the host, '
        "outside the root (fail closed)",
        id="root + tools containing a shell alias",
    ),
    pytest.param(
        {"root": ROOT, "tools": ["task"]},
        "root+task",
        'root cannot be combined with tools ["task"]: a task\'s child agent keeps the host '
        "toolset; sharing root needs a Cursor SDK inherit, not an overridden Task (fail closed)",
        id="root + tools containing task",
    ),
    pytest.param(
        {"root": ROOT, "tools": ["readLints"]},
        "root+readLints",
        'root cannot be combined with tools ["readLints"]: diagnostics are not a FileSystem '
        "verb; readLints would run the host language service (fail closed)",
        id="root + tools containing readLints",
    ),
    pytest.param(
        {"root": None, "tools": None, "user_tool_files": ["agent/tools/Read.ts"]},
        "user-tool-clash",
        "user tool file agent/tools/Read.ts clashes with the synthesized Read tool (fail closed)",
        id="agent/tools/Read.ts on host-default",
    ),
    pytest.param(
        {"root": ROOT, "tools": None, "user_tool_files": ["agent/tools/Read.ts"]},
        "user-tool-clash",
        "user tool file agent/tools/Read.ts clashes with the synthesized Read tool (fail closed)",
        id="agent/tools/Read.ts on authored root",
    ),
    pytest.param(
        {
            "root": ROOT,
            "tools": [],
            "user_tool_files": ["agent/tools/ok.py", "agent/tools/strreplace.py"],
        },
        "user-tool-clash",
        "user tool file agent/tools/strreplace.py clashes with the synthesized StrReplace tool "
        "(fail closed)",
        id="agent/tools/strreplace.py (any case, any extension, even with tools [])",
    ),
    pytest.param(
        {"root": None, "tools": None, "user_tool_files": ["agent/tools/SemanticSearch.js"]},
        "user-tool-clash",
        "user tool file agent/tools/SemanticSearch.js clashes with the synthesized "
        "SemanticSearch tool (fail closed)",
        id="every synthesized name, also on host-default",
    ),
    pytest.param(
        {"root": None, "tools": None, "runtime": "remote"},
        "runtime",
        'unknown runtime "remote" (expected local, cloud or grokbot)',
        id="unknown runtime",
    ),
    pytest.param(
        {"root": ROOT, "tools": "read"},
        "tools",
        'tools must be a list of tool names, not the string "read"',
        id="tools as a bare string",
    ),
]


@pytest.mark.parametrize(("config", "rule", "message"), FAIL_CLOSED)
def test_fail_closed_table(config: dict[str, object], rule: str, message: str) -> None:
    with pytest.raises(ToolsetError) as caught:
        resolve_toolset(**config)  # type: ignore[arg-type]
    assert str(caught.value) == message
    assert caught.value.rule == rule
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize(
    "config",
    [
        pytest.param({"root": None, "tools": ["shell", "task", "readLints"]}, id="host keeps them"),
        pytest.param(
            {"root": None, "tools": None, "local": LocalOptions(cwd="/w", sandbox=True)},
            id="host local",
        ),
        pytest.param(
            {"root": ROOT, "tools": None, "local": LocalOptions()}, id="empty local options"
        ),
        pytest.param(
            {
                "root": ROOT,
                "tools": None,
                "user_tool_files": ["agent/tools/Reader.ts", "agent/tools/search.ts"],
            },
            id="other names",
        ),
    ],
)
def test_what_does_not_fail(config: dict[str, object]) -> None:
    resolve_toolset(**config)  # type: ignore[arg-type]
