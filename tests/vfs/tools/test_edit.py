"""StrReplace: the literal splice, the contract's four EditError sentences, write-back failures."""

from __future__ import annotations

import errno
from pathlib import Path

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import vfs
from vfs.tools import splice, synthesize_tools

from ..eightverb import EightVerbTree
from .helpers import BACKENDS, call, err, ok

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
