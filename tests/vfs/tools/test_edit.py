"""StrReplace: the literal splice, the contract's four EditError sentences, write-back failures."""

from __future__ import annotations

import errno
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import vfs
from vfs.tools import ToolResult, splice, synthesize_tools
from vfs.tools._edit import EDIT_LOCKS

from ..eightverb import EightVerbTree
from .helpers import BACKENDS, call, err, ok
from .trees import WRITABLE, YieldingTree, build

EMPTY = "oldText is empty"
SAME = "oldText and newText are exactly the same"
NOT_FOUND = "The string to replace was not found in the file"
MULTIPLE = (
    "The string to replace was found multiple times in the file. Use replace_all to replace all "
    "occurrences, or include more context to only edit one occurrence."
)


@pytest.mark.parametrize(
    ("text", "old", "new", "replace_all", "result"),
    [
        ("a b c", "b", "B", False, ("a B c", 1)),
        ("x.y x*y", ".", "$&", False, ("x$&y x*y", 1)),
        ("f(a)", "(a)", r"\1\g<0>", False, (r"f\1\g<0>", 1)),
        ("$& $&", "$&", "$1", True, ("$1 $1", 2)),
        ("aaa", "aa", "b", False, ("ba", 1)),  # non-overlapping, left to right
        ("aaaa", "aa", "b", True, ("bb", 2)),
        ("one\ntwo\n", "one\ntwo", "", False, ("\n", 1)),
        ("[^]*+?{}|\\", "[^]*+?{}|\\", "ok", False, ("ok", 1)),
    ],
)
def test_splice_is_literal(
    text: str, old: str, new: str, replace_all: bool, result: tuple[str, int]
) -> None:
    assert splice("/f", text, old, new, replace_all) == result


@pytest.mark.parametrize(
    ("text", "old", "new", "replace_all", "message"),
    [
        ("abc", "", "x", False, EMPTY),
        ("", "", "", True, EMPTY),
        ("abc", "b", "b", False, SAME),
        ("abc", "z", "b", True, NOT_FOUND),
        ("abab", "ab", "x", False, MULTIPLE),
        ("a.c", "a*c", "x", False, NOT_FOUND),  # a pattern would match; literal text does not
    ],
)
def test_splice_errors(text: str, old: str, new: str, replace_all: bool, message: str) -> None:
    with pytest.raises(vfs.EditError) as caught:
        splice("/f", text, old, new, replace_all)
    assert str(caught.value) == message
    assert caught.value.path == "/f"


@settings(max_examples=300, deadline=None)
@given(
    st.text(alphabet="ab$&\\.", max_size=30),
    st.text(alphabet="ab$&\\.", min_size=1, max_size=4),
    st.text(alphabet="ab$&\\.", max_size=4),
)
def test_replace_all_is_str_replace(text: str, old: str, new: str) -> None:
    """Python's ``str.replace`` is literal and non-overlapping: the splice must agree with it."""
    if old == new or old not in text:
        return
    assert splice("/f", text, old, new, True) == (text.replace(old, new), text.count(old))
    if text.count(old) == 1:
        assert splice("/f", text, old, new, False) == (text.replace(old, new), 1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_tool_edits_and_counts(backend: str) -> None:
    async def main() -> None:
        fs = vfs.temp_fs({"/a.ts": "let x = 1;\nlet y = x;\n"})
        edit = synthesize_tools(fs, ["StrReplace"])["StrReplace"]
        result = await edit.invoke({"path": "/a.ts", "oldText": "x = 1", "newText": "x = $&"})
        assert result == ok({"occurrencesModified": 1})
        assert await fs.read("/a.ts") == "let x = $&;\nlet y = x;\n"
        result = await edit.invoke(
            {"file_path": "a.ts", "old_string": "x", "new_string": "z", "replace_all": True}
        )
        assert result == ok({"occurrencesModified": 2})
        assert await fs.read("/a.ts") == "let z = $&;\nlet y = z;\n"
        result = await edit.invoke(
            {"path": "/a.ts", "old_str": "$&", "new_str": "1", "replaceAll": False}
        )
        assert result == ok({"occurrencesModified": 1})
        assert await fs.read("/a.ts") == "let z = 1;\nlet y = z;\n"

    anyio.run(main, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"path": "/a.txt", "oldText": "", "newText": "x"}, EMPTY),
        ({"path": "/missing", "oldText": "", "newText": "x"}, EMPTY),  # checked before reading
        ({"path": "/a.txt", "oldText": "a", "newText": "a"}, SAME),
        ({"path": "/a.txt", "oldText": "zzz", "newText": "y"}, NOT_FOUND),
        ({"path": "/a.txt", "oldText": "a", "newText": "b"}, MULTIPLE),
        ({"path": "/a.txt", "oldText": "a", "newText": "b", "replaceAll": False}, MULTIPLE),
        ({"path": "/missing", "oldText": "a", "newText": "b"}, "not found: /missing"),
        (
            {"path": "/p.png", "oldText": "a", "newText": "b"},
            "StrReplace: /p.png is an image, not text",
        ),
        ({"path": "/a.txt", "oldText": "a"}, "StrReplace: missing required argument: newText"),
        ({"path": "/a.txt", "newText": "a"}, "StrReplace: missing required argument: oldText"),
        (
            {"path": "/a.txt", "oldText": "a", "newText": "b", "replace_all": "yes"},
            "StrReplace: replace_all must be a boolean, not a string",
        ),
        (
            {"path": "/a.txt", "oldText": "a", "old_string": "b", "newText": "c"},
            "StrReplace: conflicting arguments: oldText and old_string",
        ),
    ],
)
def test_tool_errors(backend: str, arguments: dict[str, object], error: str) -> None:
    fs = vfs.temp_fs({"/a.txt": "a a", "/p.png": b"\x89PNG"})
    assert call(backend, fs, "StrReplace", arguments) == err(error)


@pytest.mark.parametrize("backend", BACKENDS)
def test_write_back_failure_is_write_failed(backend: str) -> None:
    tree = EightVerbTree({"/a.txt": "old"})
    tree.write_failure = OSError(errno.ENOSPC, "No space left on device")

    async def main() -> None:
        edit = synthesize_tools(tree, ["StrReplace"])["StrReplace"]
        result = await edit.invoke({"path": "/a.txt", "oldText": "old", "newText": "new"})
        assert result == err("write failed: /a.txt")

    anyio.run(main, backend=backend)
    assert tree.files["/a.txt"] == b"old"


@pytest.mark.parametrize("backend", BACKENDS)
def test_read_only_mount(backend: str, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("old")
    union = vfs.union_fs({"/": vfs.temp_fs(), "/ro": vfs.dir_fs(tmp_path, read_only=True)})
    arguments = {"path": "/ro/a.txt", "oldText": "old", "newText": "new"}
    assert call(backend, union, "StrReplace", arguments) == err("write failed: /ro/a.txt")
    assert (tmp_path / "a.txt").read_text() == "old"


# --- Bytes outside the edit, and parallel edits ------------------------------------------------

LATIN1 = b"caf\xe9 menu\nprice\n"
EXACT_TREES = [kind for kind in WRITABLE if kind != "user_tree"]  # a user tree's read decodes


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", EXACT_TREES)
@pytest.mark.parametrize(
    ("data", "old", "new", "replace_all", "edited"),
    [
        (LATIN1, "price", "cost", False, b"caf\xe9 menu\ncost\n"),
        (b"\xff\xfe a \x80 a \xc3", "a", "\u00e9", True, b"\xff\xfe \xc3\xa9 \x80 \xc3\xa9 \xc3"),
        (b"x\r\n\xe9\r\ny\r\n", "y", "z", False, b"x\r\n\xe9\r\nz\r\n"),
        ("caf\u00e9 \U0001f600\n".encode(), "\U0001f600", ":)", False, b"caf\xc3\xa9 :)\n"),
    ],
)
def test_edit_never_changes_bytes_outside_the_span(
    backend: str,
    kind: str,
    tmp_path: Path,
    data: bytes,
    old: str,
    new: str,
    replace_all: bool,
    edited: bytes,
) -> None:
    """Bytes that are not UTF-8 (which ``read`` shows as U+FFFD) survive an edit elsewhere."""
    tree = build(kind, tmp_path, {"/m.txt": data})

    async def main() -> None:
        edit = synthesize_tools(tree.fs, ["StrReplace"])["StrReplace"]
        arguments = {"path": tree.p("/m.txt"), "oldText": old, "newText": new}
        result = await edit.invoke({**arguments, "replaceAll": replace_all})
        assert result == ok({"occurrencesModified": data.count(old.encode())})
        assert await tree.raw("/m.txt") == edited

    anyio.run(main, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_replacement_characters_the_file_does_not_hold_are_not_found(
    backend: str, tmp_path: Path
) -> None:
    """What Read showed as U+FFFD is not in the file: editing it finds nothing, changes nothing."""
    tree = build("dir", tmp_path, {"/m.txt": LATIN1})
    arguments = {"path": "/m.txt", "oldText": "caf\ufffd", "newText": "cafe"}
    assert call(backend, tree.fs, "StrReplace", arguments) == err(NOT_FOUND)
    assert (tmp_path / "dir" / "m.txt").read_bytes() == LATIN1


@settings(max_examples=300, deadline=None)
@given(
    prefix=st.binary(max_size=20),
    suffix=st.binary(max_size=20),
    old=st.text(min_size=1, max_size=5),
    new=st.text(max_size=5),
)
def test_byte_splice_changes_only_the_span(
    prefix: bytes, suffix: bytes, old: str, new: str
) -> None:
    """Splicing bytes replaces exactly the occurrences of ``old``'s UTF-8, nothing else."""
    if old == new:
        return
    data = prefix + old.encode() + suffix
    needle = old.encode()
    count = data.count(needle)
    assert splice("/f", data, old, new, True) == (data.replace(needle, new.encode()), count)


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=30), old=st.text(min_size=1, max_size=4), new=st.text(max_size=4))
def test_byte_splice_of_utf8_is_the_text_splice(text: str, old: str, new: str) -> None:
    """On UTF-8 the byte splice agrees with the text splice (occurrences and result)."""
    if old == new or old not in text:
        return
    by_text = splice("/f", text, old, new, True)
    by_bytes = splice("/f", text.encode(), old, new, True)
    assert by_bytes == (by_text[0].encode(), by_text[1])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", WRITABLE)
def test_parallel_edits_of_one_file_all_land(backend: str, kind: str, tmp_path: Path) -> None:
    """Eight StrReplace calls at once on one file (as a model's parallel tool calls): each one
    reports its edit, and every edit is in the file afterwards. The file is big enough that a
    host tree reads it on a worker thread, so the calls interleave unless they are serialized."""
    body = "".join(f"line{i}\n" for i in range(8)) + "x" * (5 << 20) + "\n"
    tree = build(kind, tmp_path, {"/p.txt": body.encode()})
    results: list[ToolResult] = []

    async def main() -> None:
        edit = synthesize_tools(tree.fs, ["StrReplace"])["StrReplace"]

        async def one(i: int) -> None:
            arguments = {"path": tree.p("/p.txt"), "oldText": f"line{i}\n", "newText": f"L{i}\n"}
            results.append(await edit.invoke(arguments))

        async with anyio.create_task_group() as group:
            for i in range(8):
                group.start_soon(one, i)
        assert results == [ok({"occurrencesModified": 1})] * 8
        edited = await tree.raw("/p.txt")
        assert edited.startswith("".join(f"L{i}\n" for i in range(8)).encode())
        assert len(EDIT_LOCKS) == 0  # nothing stays registered once the edits are done

    anyio.run(main, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_edits_through_two_turn_roots_over_one_root_are_serialized(backend: str) -> None:
    """Two sessions' turn roots (each ``union_fs({"/": root, "/tmp": ...})``) over one static
    root: StrReplace, Write and Delete of one of its files through either are serialized."""
    shared = YieldingTree({"/p.txt": "".join(f"line{i}\n" for i in range(8))})
    turns = [vfs.union_fs({"/": shared, "/tmp": vfs.temp_fs()}) for _ in range(2)]

    async def main() -> None:
        tools = [synthesize_tools(root, ["StrReplace", "Write", "Delete"]) for root in turns]
        results: list[ToolResult] = []

        async def one(i: int) -> None:
            edit = tools[i % 2]["StrReplace"]
            arguments = {"path": "/p.txt", "oldText": f"line{i}\n", "newText": f"L{i}\n"}
            results.append(await edit.invoke(arguments))

        async with anyio.create_task_group() as group:
            for i in range(8):
                group.start_soon(one, i)
        assert results == [ok({"occurrencesModified": 1})] * 8
        assert shared.files["/p.txt"] == "".join(f"L{i}\n" for i in range(8)).encode()

        async def write_then_edit() -> None:
            await tools[0]["Write"].invoke({"path": "/w.txt", "fileText": "one two"})

        async def edit_after() -> None:
            await anyio.lowlevel.checkpoint()
            edit = tools[1]["StrReplace"]
            results.append(await edit.invoke({"path": "/w.txt", "oldText": "two", "newText": "2"}))

        async with anyio.create_task_group() as group:
            group.start_soon(write_then_edit)
            group.start_soon(edit_after)
        assert results[-1] == ok({"occurrencesModified": 1})
        assert shared.files["/w.txt"] == b"one 2"

    anyio.run(main, backend=backend)
