"""grep's lines: the block pre-check never changes a result, and a stream matches like a whole.

``grep_lines`` searches a block of lines at once (``MULTILINE``, at C speed) before it searches
line by line, and skips the block when nothing matched. These properties compare it with the
plain line-by-line search (the pre-check off) over patterns built from the constructs that look
past a line (``\\A``, ``\\Z``, lookarounds, atomic groups, possessive quantifiers) and the ones
that must not (``^``, ``$``, ``\\b``, ``\\B``), on texts of ``a``, ``b``, ``\\r`` and ``\\n``.
Then the same hits for a file fed to :class:`LineGrep` in any chunking, and on real trees.
"""

from __future__ import annotations

import re
from pathlib import Path

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import vfs
from vfs._lines import split_lines
from vfs._match import LineGrep, block_precheck, compile_grep, grep_block, grep_lines

from .tools.trees import build

TOKENS = [
    "a",
    "b",
    "ab",
    "\\r",
    "\\n",
    ".",
    "[^a]",
    "\\s",
    "\\W",
    "$",
    "^",
    "\\A",
    "\\Z",
    "\\b",
    "\\B",
    "(?=a)",
    "(?!a)",
    "(?=\\n)",
    "(?<=a)",
    "(?<!a)",
    "(?<![^b])",
    "(?>[^b]*)",
    "a*+",
    "[^a]++",
    "a?",
    "b*",
    "(a|b)",
    "(?:a|$)",
]


def reference(text: str, regex: re.Pattern[str]) -> list[tuple[int, str]]:
    """The plain line-by-line search: every line, no pre-check."""
    return [
        (number, line)
        for number, line in enumerate(split_lines(text), start=1)
        if regex.search(line) is not None
    ]


patterns = st.lists(st.sampled_from(TOKENS), min_size=1, max_size=4).map("".join)
texts = st.text(alphabet="ab\r\n", max_size=24)


@settings(max_examples=3000, deadline=None)
@given(pattern=patterns, text=texts, ignore_case=st.booleans())
def test_the_precheck_never_changes_the_result(pattern: str, text: str, ignore_case: bool) -> None:
    regex = compile_grep(pattern, case_insensitive=ignore_case, path="/")
    assert grep_lines(text, regex) == reference(text, regex)


@settings(max_examples=1000, deadline=None)
@given(pattern=patterns, text=texts)
def test_a_sound_precheck_skips_only_blocks_without_hits(pattern: str, text: str) -> None:
    """Where the pre-check runs, a block it rejects has no hit line by line."""
    regex = re.compile(pattern)
    precheck = block_precheck(regex)
    if precheck is None:
        return
    block = "".join(line + "\n" for line in split_lines(text))
    if precheck.search(block) is None:
        assert grep_block(block, regex, None, 1) == []


@pytest.mark.parametrize(
    ("pattern", "text", "hits"),
    [
        ("abc$", "abc\r\n", [(1, "abc")]),
        ("abc$", "abc\r\nabc\n", [(1, "abc"), (2, "abc")]),
        ("abc$", "abc\r", [(1, "abc")]),
        ("\\Aabc", "x\nabc\n", [(2, "abc")]),
        ("abc\\Z", "abc\nx\n", [(1, "abc")]),
        ("(?<![^b])x", "b\nx\n", [(2, "x")]),
        ("^$", "\n\r", [(1, ""), (2, "")]),
    ],
)
def test_the_issue_examples(pattern: str, text: str, hits: list[tuple[int, str]]) -> None:
    assert grep_lines(text, compile_grep(pattern, case_insensitive=False, path="/")) == hits


@settings(max_examples=1000, deadline=None)
@given(
    pattern=patterns,
    data=st.binary(max_size=40).map(lambda b: b.replace(b"\0", b"a")) | texts.map(str.encode),
    cuts=st.lists(st.integers(min_value=0, max_value=40), max_size=6),
)
def test_a_stream_matches_like_the_whole(pattern: str, data: bytes, cuts: list[int]) -> None:
    """Fed in any chunking, ``LineGrep`` answers ``grep_lines`` of the decoded whole."""
    regex = re.compile(pattern)
    grep = LineGrep(regex, skip_binary=False)
    hits = []
    start = 0
    for cut in sorted(set(cuts)):
        hits += grep.feed(data[start:cut])
        start = max(start, cut)
    hits += grep.feed(data[start:])
    hits += grep.end()
    assert hits == grep_lines(data.decode("utf-8", "replace"), regex)


def test_binary_is_told_by_the_first_8k_fed_in_pieces() -> None:
    grep = LineGrep(re.compile("x"))
    assert grep.feed(b"x\n" * 100) == []  # held until 8 KiB are seen
    assert grep.feed(b"\0" + b"x" * 9000) == []
    assert grep.binary
    assert grep.feed(b"x\n") == []
    assert grep.end() == []


def test_a_later_nul_ends_the_search_and_keeps_the_hits_before_it() -> None:
    """As ripgrep's default: a sparse file (holes read as NULs) is never scanned to its end."""
    text = LineGrep(re.compile("x"))
    assert text.feed(b"x\n" * 5000) == [(n, "x") for n in range(1, 5001)]
    assert text.feed(b"x\nx\0x\nx\n") == [(5001, "x")]  # the NUL's own line is not searched
    assert text.binary
    assert text.feed(b"x\n") == []
    assert text.end() == []
    late = LineGrep(re.compile("x"))
    assert late.feed(b"y\n" * 4100 + b"x\n\0x\n") == [(4101, "x")]  # one chunk, sniffed
    assert late.end() == []
    early = LineGrep(re.compile("x"))
    assert early.feed(b"x\n\0") == []  # within the first 8 KiB: the whole file is skipped
    assert early.end() == []


ANCHORED = {
    "/crlf.txt": "abc\r\n",
    "/two.txt": "abc\r\nabc\n",
    "/cr.txt": "abc\r",
    "/z.txt": "x\nabc\nabc",
}


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
@pytest.mark.parametrize("kind", ["temp", "dir", "local", "host", "union", "cow", "user_tree"])
@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        (
            "abc$",
            [
                ("/cr.txt", 1),
                ("/crlf.txt", 1),
                ("/two.txt", 1),
                ("/two.txt", 2),
                ("/z.txt", 2),
                ("/z.txt", 3),
            ],
        ),
        (
            "\\Aabc",
            [
                ("/cr.txt", 1),
                ("/crlf.txt", 1),
                ("/two.txt", 1),
                ("/two.txt", 2),
                ("/z.txt", 2),
                ("/z.txt", 3),
            ],
        ),
        (
            "abc\\Z",
            [
                ("/cr.txt", 1),
                ("/crlf.txt", 1),
                ("/two.txt", 1),
                ("/two.txt", 2),
                ("/z.txt", 2),
                ("/z.txt", 3),
            ],
        ),
    ],
)
def test_every_tree_finds_every_line(
    backend: str, kind: str, pattern: str, expected: list[tuple[str, int]], tmp_path: Path
) -> None:
    tree = build(kind, tmp_path, {path: text.encode() for path, text in ANCHORED.items()})

    async def main() -> None:
        query = vfs.GrepQuery(pattern, path=tree.p("/"))
        found = [(hit.path, hit.line_number) async for hit in tree.fs.grep(query)]
        assert found == [(tree.p(path), line) for path, line in expected]

    anyio.run(main, backend=backend)
