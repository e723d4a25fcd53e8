"""Read: ``cat -n`` numbering, offset/limit, images as base64 parts, errors as envelopes."""

from __future__ import annotations

import base64

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import vfs
from vfs._lines import split_lines
from vfs._match import compile_grep, grep_lines
from vfs.tools import ArgumentError, number_lines
from vfs.tools._read import read_text

from .helpers import BACKENDS, call, err, ok

TEXT = "alpha\nbeta\r\ngamma\n"


@pytest.mark.parametrize(
    ("text", "offset", "limit", "shown"),
    [
        (TEXT, None, None, "     1\talpha\n     2\tbeta\n     3\tgamma"),
        (TEXT, 2, None, "     2\tbeta\n     3\tgamma"),
        (TEXT, 2, 1, "     2\tbeta"),
        (TEXT, 0, 1, "     1\talpha"),
        (TEXT, -1, None, "     3\tgamma"),
        (TEXT, -2, 1, "     2\tbeta"),
        (TEXT, -10, 1, "     1\talpha"),
        (TEXT, 1, 100, "     1\talpha\n     2\tbeta\n     3\tgamma"),
        ("no newline", None, None, "     1\tno newline"),
        ("a\n\nb", None, None, "     1\ta\n     2\t\n     3\tb"),
        ("\n", None, None, "     1\t"),
        ("", None, None, ""),
        ("", 1, None, ""),
        ("tab\there\x0bvt\u2028ls", None, None, "     1\ttab\there\x0bvt\u2028ls"),
    ],
)
def test_number_lines(text: str, offset: int | None, limit: int | None, shown: str) -> None:
    assert number_lines(text, "/f", offset, limit) == shown


def test_wide_line_numbers_grow_past_six_columns() -> None:
    text = "x\n" * 1_000_000
    assert number_lines(text, "/f", 999_999, 2) == "999999\tx\n1000000\tx"


@pytest.mark.parametrize(
    ("text", "offset", "message"),
    [
        (TEXT, 4, "Read: offset 4 is past the end of /f (3 lines)"),
        ("one", 2, "Read: offset 2 is past the end of /f (1 line)"),
        ("", 2, "Read: offset 2 is past the end of /f (0 lines)"),
    ],
)
def test_offset_past_the_end(text: str, offset: int, message: str) -> None:
    with pytest.raises(ArgumentError) as caught:
        number_lines(text, "/f", offset)
    assert str(caught.value) == message


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="ab\n\r\t\x0b", min_size=1, max_size=40))
def test_numbers_agree_with_grep(text: str) -> None:
    """Grep's ``(n, line)`` for a pattern matching every line is exactly Read's numbering.

    (Non-empty text: ``grep_lines`` reports an empty file as one empty line 1; Read shows none.)
    """
    every_line = grep_lines(text, compile_grep("", case_insensitive=False, path="/"))
    assert number_lines(text, "/f") == "\n".join(f"{n:6d}\t{line}" for n, line in every_line)


@pytest.mark.parametrize("backend", BACKENDS)
def test_read_tool(backend: str) -> None:
    fs = vfs.temp_fs({"/a.txt": TEXT, "/d/b.md": "# b\n"})
    assert call(backend, fs, "Read", {"path": "/a.txt", "offset": 3}) == ok("     3\tgamma")
    assert call(backend, fs, "Read", {"path": "d/b.md"}) == ok("     1\t# b")
    assert call(backend, fs, "Read", {"target_file": "/d/../a.txt", "limit": 1}) == ok(
        "     1\talpha"
    )
    assert call(backend, fs, "Read", {"file_path": "/a.txt", "offset": 2.0, "limit": 1}) == ok(
        "     2\tbeta"
    )
    assert call(backend, fs, "Read", {"path": "/a.txt", "explanation": "why"}).ok


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("name", "mime"),
    [
        ("p.png", "image/png"),
        ("p.JPG", "image/jpeg"),
        ("p.jpeg", "image/jpeg"),
        ("p.gif", "image/gif"),
        ("p.webp", "image/webp"),
    ],
)
def test_images_become_base64_parts(backend: str, name: str, mime: str) -> None:
    data = bytes(range(256))
    fs = vfs.temp_fs({"/" + name: data})
    expected = {"type": "image", "mime_type": mime, "data": base64.b64encode(data).decode()}
    assert call(backend, fs, "Read", {"path": "/" + name}) == ok(expected)
    # offset/limit do not apply to an image
    assert call(backend, fs, "Read", {"path": "/" + name, "offset": 5, "limit": 1}) == ok(expected)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"path": "/missing.txt"}, "not found: /missing.txt"),
        ({"path": "missing.txt"}, "not found: /missing.txt"),
        ({"path": "/d"}, "is a directory: /d"),
        ({"path": "/a.txt", "offset": 9}, "Read: offset 9 is past the end of /a.txt (3 lines)"),
        ({}, "Read: missing required argument: path"),
        ({"path": 3}, "Read: path must be a string, not a number"),
        ({"path": "/a.txt", "offset": "2"}, "Read: offset must be an integer, not a string"),
        ({"path": "/a.txt", "offset": 1.5}, "Read: offset must be an integer, not 1.5"),
        ({"path": "/a.txt", "offset": True}, "Read: offset must be an integer, not a boolean"),
        ({"path": "/a.txt", "limit": 0}, "Read: limit must be at least 1, not 0"),
        ({"path": "/a.txt", "lines": 3}, "Read: unknown argument: lines"),
        (
            {"path": "/a.txt", "file_path": "/b.txt"},
            "Read: conflicting arguments: path and file_path",
        ),
        ({"path": "/a\0"}, "invalid path: /a\\0: path contains a NUL byte"),
    ],
)
def test_read_errors(backend: str, arguments: dict[str, object], error: str) -> None:
    fs = vfs.temp_fs({"/a.txt": TEXT, "/d/b.md": "b"})
    assert call(backend, fs, "Read", arguments) == err(error)


@pytest.mark.parametrize("backend", BACKENDS)
def test_same_value_under_two_spellings_is_fine(backend: str) -> None:
    fs = vfs.temp_fs({"/a.txt": "x"})
    assert call(backend, fs, "Read", {"path": "/a.txt", "file_path": "/a.txt"}) == ok("     1\tx")
    assert call(backend, fs, "Read", {"path": "/a.txt", "offset": None}) == ok("     1\tx")


@pytest.mark.parametrize("backend", BACKENDS)
def test_arguments_must_be_an_object(backend: str) -> None:
    fs = vfs.temp_fs()
    assert call(backend, fs, "Read", ["/a.txt"]) == err(  # type: ignore[arg-type]
        "Read: arguments must be an object, not an array"
    )


def _model(data: bytes, path: str, offset: int | None, limit: int | None, budget: int) -> str:
    """Read's rules written out plainly over the decoded whole (the documented behaviour)."""
    lines = split_lines(data.decode("utf-8", "replace"))
    start = 1 if not offset else offset if offset > 0 else max(1, len(lines) + 1 + offset)
    if start > len(lines) and not (start == 1 and not lines):
        count = "1 line" if len(lines) == 1 else f"{len(lines)} lines"
        raise ArgumentError(f"Read: offset {start} is past the end of {path} ({count})")
    shown: list[str] = []
    used = 0
    last = len(lines) if limit is None else min(len(lines), start - 1 + limit)
    for number in range(start, last + 1):
        line = lines[number - 1]
        if used + len(line) > budget:
            if not shown:
                shown.append(f"{number:6d}\t{line[:budget]}")
                shown.append(
                    f"[Line {number} of {path} is cut after {budget} characters. "
                    f"Use offset {number + 1} to read on.]"
                )
            else:
                shown.append(
                    f"[Read stopped before line {number} of {path}: it shows at most {budget} "
                    f"characters at once. Use offset {number} to read on.]"
                )
            break
        shown.append(f"{number:6d}\t{line}")
        used += len(line)
    return "\n".join(shown)


@settings(max_examples=600, deadline=None)
@given(
    data=st.lists(
        st.sampled_from([b"a", b"bb", b"\n", b"\r", b"\r\n", b"\xc3\xa9", b"\xe9", b"\xf0\x9f"]),
        max_size=30,
    ).map(b"".join),
    offset=st.none() | st.integers(min_value=-6, max_value=12),
    limit=st.none() | st.integers(min_value=1, max_value=6),
    budget=st.integers(min_value=1, max_value=12),
    chunk=st.integers(min_value=1, max_value=9),
)
def test_a_streamed_window_is_the_window_of_the_whole(
    data: bytes, offset: int | None, limit: int | None, budget: int, chunk: int
) -> None:
    """Read a few bytes at a time, with a tiny output budget, the window is what the rules say
    of the whole file (line numbers, cuts, the note, the past-the-end error)."""
    fs = vfs.temp_fs({"/f.txt": data})

    async def streamed() -> str:
        return await read_text(fs, "/f.txt", offset, limit, budget=budget, chunk_size=chunk)

    try:
        expected: str | None = _model(data, "/f.txt", offset, limit, budget)
    except ArgumentError as error:
        expected = None
        with pytest.raises(ArgumentError) as caught:
            anyio.run(streamed)
        assert str(caught.value) == str(error)
    if expected is not None:
        assert anyio.run(streamed) == expected
