"""The FileSystem contract as executable checks, written once and run over every composition.

Theory of operation
-------------------
A *rule* is one async check of one contract rule (Paths, Iterators, Errors, Write, Helpers). It is
given a :class:`Harness`: a factory that builds a fresh tree seeded with given files, and the
tree's :class:`Capabilities`. Rules state what they need (``seed``, ``writable``, ``read_only``,
``virtual``, ``host``, ``posix``); :func:`rules_for` keeps the rules a composition can run, so a
composition never *skips* a rule, it simply does not have it (an empty tree has no seeded
files to read; a read-only tree has no writes that succeed, it has the read-only rules instead).

Expectations are computed from the seed by the plain models at the bottom of this module, never
from another implementation. A tree whose yielded paths are host paths (``local_file_system``)
is driven through :class:`Subject`: ``p()`` turns a contract path into the argument the tree takes
and ``v()`` turns a yielded path back, so the same rules hold for it.

Use :func:`check_filesystem` to run every rule over a tree of your own, or parametrize over
:data:`RULES` (``tests/vfs/test_conformance.py``) so each composition x rule is its own test.
This is trio's ``_check_streams.py`` and fsspec's ``tests/abstract`` idea.
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import posixpath
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, TypeVar

import pytest

import vfs
from vfs._capabilities import buffers_writes, list_info_of
from vfs._content import encode_contents, is_image_path

T = TypeVar("T")
Files = Mapping[str, "str | bytes"]

# Image bytes carry a NUL early, as real ones do, so no grep mistakes them for text.
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe TODO beta"
JPEG = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01 TODO beta"
GIF = b"GIF89a\x01\x00\x01\x00\x80\x00\x00 TODO beta"
WEBP = b"RIFF\x1a\x00\x00\x00WEBPVP8 \x00\xff TODO beta"

SEED: dict[str, str | bytes] = {
    "/a.txt": "alpha\nbeta\n",
    "/b.md": "# Title\nbeta gamma\nBETA upper\n",
    "/agent/skills/skill.md": "agent skill\nTODO agent\n",
    "/agent-tools/tool.txt": "tool\nTODO tool\n",
    "/docs/readme.txt": "read me\nbeta docs\nno final newline",
    "/docs/naïve é.txt": "unicode name\nbeta é\n",
    "/img/p.png": PNG,
    "/img/q.jpg": JPEG,
    "/img/r.jpeg": JPEG,
    "/img/s.gif": GIF,
    "/img/t.webp": WEBP,
    "/src/a.ts": "export const a = 1;\n// TODO a\n",
    "/src/b.ts": "export const b = 2;\n",
    "/src/nested/c.ts": "// TODO c\nconst c = 3;\nTODO twice TODO\n",
    "/src/nested/deep/d.py": "# TODO d\nd = 4\n",
    "/src/nested/notes.md": "TODO notes\n",
}


# --------------------------------------------------------------------------------------------
# Harness


@dataclass(frozen=True)
class Capabilities:
    """What a composition can do, which decides the rules it runs.

    ``seedable``: the factory can build a tree holding given files (not so for ``empty_fs``).
    ``writable``: write/delete succeed; otherwise they raise ``ReadOnlyMountError``.
    ``has_posix``: the tree is a :class:`vfs.PosixFileSystem`.
    ``host_paths``: arguments and yields are host paths (``local_file_system``).
    """

    writable: bool = True
    seedable: bool = True
    has_posix: bool = False
    host_paths: bool = False

    def provides(self) -> frozenset[str]:
        tags = {"any", "writable" if self.writable else "read_only"}
        tags.add("host" if self.host_paths else "virtual")
        if self.seedable:
            tags.add("seed")
        if self.has_posix:
            tags.add("posix")
        return frozenset(tags)


@dataclass(frozen=True)
class Subject:
    """A tree under test. ``host_root`` is the host directory that stands for ``/`` when the
    tree takes and yields host paths; ``None`` for a virtual tree."""

    fs: Any
    host_root: str | None = None

    def p(self, path: str) -> str:
        """The argument this tree takes for contract path ``path``."""
        if self.host_root is None:
            return path
        return self.host_root if path == "/" else self.host_root + path

    def v(self, path: str) -> str:
        """The contract path of a path this tree yielded."""
        if self.host_root is None:
            return path
        if path == self.host_root:
            return "/"
        assert path.startswith(self.host_root + "/"), f"{path} is outside {self.host_root}"
        return path[len(self.host_root) :]

    def root_aliases(self) -> list[str | None]:
        """Spellings of the root; ``None`` means the optional scope is omitted."""
        if self.host_root is None:
            return [None, "", "/"]
        return ["", ".", self.host_root]

    def normalized(self, path: str) -> bool:
        return path.startswith("/") and posixpath.normpath(path) == path and "//" not in path


Make = Callable[[Files], Awaitable[Subject]]


@dataclass(frozen=True)
class Harness:
    make: Make
    caps: Capabilities

    async def seeded(self) -> Subject:
        """The tree over :data:`SEED`, or an empty one when the composition cannot be seeded."""
        return await self.make(SEED if self.caps.seedable else {})

    def seed(self) -> Files:
        return SEED if self.caps.seedable else {}


@dataclass(frozen=True)
class Rule:
    name: str
    check: Callable[[Harness], Awaitable[None]]
    needs: frozenset[str]


# --------------------------------------------------------------------------------------------
# Small async helpers


async def aclose_if_possible(stream: object) -> None:
    close = getattr(stream, "aclose", None)
    if close is not None:
        await close()


async def collect(method: Callable[..., AsyncIterator[T]], *args: Any) -> list[T]:
    """Everything ``method(*args)`` yields; errors raised by the call or by iteration propagate."""
    async with aclosing(method(*args)) as iterator:
        return [item async for item in iterator]


async def ls(s: Subject, path: str | None) -> list[tuple[str, str]]:
    if path is None:
        found = await collect(s.fs.list)
    else:
        found = await collect(s.fs.list, path)
    return [(s.v(entry.path), entry.kind) for entry in found]


async def globbed(s: Subject, pattern: str, dir: str | None = None) -> list[tuple[str, str]]:
    if dir is None:
        found = await collect(s.fs.glob, pattern)
    else:
        found = await collect(s.fs.glob, pattern, dir)
    return [(s.v(entry.path), entry.kind) for entry in found]


async def grepped(s: Subject, query: vfs.GrepQuery) -> list[tuple[str, int, str]]:
    found = await collect(s.fs.grep, query)
    return [(s.v(hit.path), hit.line_number, hit.line) for hit in found]


def q(pattern: str, path: str | None = None, **options: Any) -> vfs.GrepQuery:
    if path is None:
        return vfs.GrepQuery(pattern, **options)
    return vfs.GrepQuery(pattern, path=path, **options)


async def raises(
    expected: type[BaseException] | tuple[type[BaseException], ...],
    call: Callable[..., Awaitable[object]],
    *args: Any,
) -> Any:
    """Await ``call(*args)`` and return the error it raised, which must be an ``expected``."""
    with pytest.raises(expected) as caught:
        await call(*args)
    return caught.value


def assert_message(error: BaseException, message: str) -> None:
    assert str(error) == message, f"{type(error).__name__}: {str(error)!r} != {message!r}"


# --------------------------------------------------------------------------------------------
# Models: what the contract says a tree holding ``files`` answers.


def model_dirs(files: Files) -> set[str]:
    dirs = set()
    for path in files:
        parent = posixpath.dirname(path)
        while parent != "/":
            dirs.add(parent)
            parent = posixpath.dirname(parent)
    return dirs


def model_entries(files: Files) -> list[tuple[str, str]]:
    entries = [(path, "file") for path in files] + [(d, "directory") for d in model_dirs(files)]
    return sorted(entries)


def under(path: str, directory: str) -> bool:
    return directory in ("/", path) or path.startswith(directory + "/")


def relative(path: str, directory: str) -> str:
    return path[1:] if directory == "/" else path[len(directory) + 1 :]


def model_children(files: Files, directory: str) -> list[tuple[str, str]]:
    return [
        (path, kind)
        for path, kind in model_entries(files)
        if under(path, directory) and path != directory and "/" not in relative(path, directory)
    ]


def glob_regex(pattern: str) -> re.Pattern[str]:
    """A small glob translator for the models: ``*``, ``?``, ``**/`` and ``**``."""
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z", re.DOTALL)


def model_glob(files: Files, pattern: str, directory: str = "/") -> list[tuple[str, str]]:
    regex = glob_regex(pattern)
    return [
        (path, kind)
        for path, kind in model_entries(files)
        if under(path, directory) and path != directory and regex.match(relative(path, directory))
    ]


def text_lines(text: str) -> list[str]:
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def model_grep(
    files: Files,
    pattern: str,
    path: str = "/",
    glob: str | None = None,
    case_insensitive: bool = False,
    max_results: int | None = None,
) -> list[tuple[str, int, str]]:
    regex = re.compile(pattern, re.IGNORECASE if case_insensitive else 0)
    hits = []
    for name in sorted(files):
        contents = files[name]
        if not under(name, path) or is_image_path(name) or isinstance(contents, bytes):
            continue
        if glob is not None:
            if "/" in glob:
                # Grepping one file: the filter sees its name (as vfs.grep_tree does).
                rel = posixpath.basename(name) if name == path else relative(name, path)
                if not glob_regex(glob).match(rel):
                    continue
            elif not fnmatchcase(posixpath.basename(name), glob):
                continue
        for number, line in enumerate(text_lines(contents), start=1):
            if regex.search(line):
                hits.append((name, number, line))
    return hits if max_results is None else hits[:max_results]


def size_of(contents: str | bytes) -> int:
    return len(encode_contents(contents))


# --------------------------------------------------------------------------------------------
# Paths


async def paths_root_aliases(h: Harness) -> None:
    """``""``, ``"/"`` and an omitted scope all mean the root (host trees: the cwd)."""
    s = await h.seeded()
    files = h.seed()
    expected_list = model_children(files, "/")
    for alias in s.root_aliases():
        assert await ls(s, alias) == expected_list, alias
        assert await globbed(s, "*", alias) == model_glob(files, "*"), alias
        assert await grepped(s, q("beta", alias)) == model_grep(files, "beta"), alias
        if alias is not None:
            assert (await s.fs.stat(alias)).kind == "directory", alias


async def paths_yielded_normalized(h: Harness) -> None:
    """Yielded paths are absolute, normalized, without a trailing slash."""
    s = await h.seeded()
    yielded: list[str] = []
    pending = [s.p("/")]
    while pending:
        directory = pending.pop()
        async with aclosing(s.fs.list(directory)) as entries:
            async for entry in entries:
                yielded.append(entry.path)
                if entry.kind == "directory":
                    pending.append(entry.path)
    yielded += [e.path for e in await collect(s.fs.glob, "**/*", s.p("/"))]
    yielded += [e.path for e in await collect(s.fs.glob, "*", s.p("/src/"))]
    yielded += [hit.path for hit in await collect(s.fs.grep, q(".", s.p("/")))]
    yielded += [hit.path for hit in await collect(s.fs.grep, q(".", s.p("/src/")))]
    for path in yielded:
        assert s.normalized(path), path
        s.v(path)
    assert sorted({s.v(path) for path in yielded if path}) == sorted(
        {p for p, _ in model_entries(h.seed())}
    )


async def paths_input_normalized(h: Harness) -> None:
    """Arguments are normalized: trailing slashes, ``.``, ``..``, doubled slashes, relative."""
    s = await h.seeded()
    files = h.seed()
    src = s.p("/src")
    spellings = [src + "/", src + "/./nested/..", src + "//", "src", "./src"]
    if s.host_root is None:
        spellings += ["//src", "/src/nested/deep/../.."]
    expected = model_children(files, "/src")
    for spelling in spellings:
        assert await ls(s, spelling) == expected, spelling
        assert await globbed(s, "*.ts", spelling) == model_glob(files, "*.ts", "/src"), spelling
        assert await grepped(s, q("TODO", spelling)) == model_grep(files, "TODO", "/src")
        assert (await s.fs.stat(spelling)).kind == ("directory" if expected else "missing")
    if h.caps.seedable:
        assert await s.fs.read("src/../a.txt") == files["/a.txt"]
        assert await s.fs.read(s.p("/src/") + "/nested/../a.ts") == files["/src/a.ts"]
        assert await s.fs.read(s.p("/src") + "//b.ts") == files["/src/b.ts"]
        assert (await s.fs.stat(s.p("/a.txt") + "/")).kind == "file"


async def paths_dotdot_never_escapes(h: Harness) -> None:
    """``..`` resolves and never climbs above ``/``."""
    s = await h.seeded()
    files = h.seed()
    assert await ls(s, "/..") == model_children(files, "/")
    assert await ls(s, "/../../..") == model_children(files, "/")
    assert await ls(s, "/../../src") == model_children(files, "/src")
    assert (await s.fs.stat("/../..")).kind == "directory"
    assert await globbed(s, "*", "/../..") == model_glob(files, "*")
    assert await grepped(s, q("TODO", "/../src")) == model_grep(files, "TODO", "/src")
    if h.caps.seedable:
        assert await s.fs.read("/../../a.txt") == files["/a.txt"]
        assert await s.fs.read("/src/../../../../a.txt") == files["/a.txt"]
    if h.caps.writable:
        await s.fs.write("/../../escape.txt", "stays inside")
        assert await s.fs.read("/escape.txt") == "stays inside"
        assert ("/escape.txt", "file") in await ls(s, "/")


async def paths_dotdot_resolves_host(h: Harness) -> None:
    """Host trees resolve ``..`` in host paths (absolute paths are used as-is)."""
    s = await h.seeded()
    files = h.seed()
    assert await ls(s, s.p("/src") + "/nested/..") == model_children(files, "/src")
    if h.caps.seedable:
        assert await s.fs.read(s.p("/src") + "/../a.txt") == files["/a.txt"]


async def paths_segment_prefix(h: Harness) -> None:
    """Prefix tests are by segment: ``/agent`` covers ``/agent/skills``, not ``/agent-tools``."""
    s = await h.seeded()
    files = h.seed()
    assert await ls(s, s.p("/agent")) == [("/agent/skills", "directory")]
    assert await globbed(s, "**/*", s.p("/agent")) == [
        ("/agent/skills", "directory"),
        ("/agent/skills/skill.md", "file"),
    ]
    assert await grepped(s, q("TODO", s.p("/agent"))) == [
        ("/agent/skills/skill.md", 2, "TODO agent")
    ]
    assert await grepped(s, q("TODO", s.p("/agent-tools"))) == model_grep(
        files, "TODO", "/agent-tools"
    )
    assert (await s.fs.stat(s.p("/agen"))).kind == "missing"
    assert await ls(s, s.p("/agen")) == []
    assert await ls(s, s.p("/age")) == []
    assert (await s.fs.stat(s.p("/agent-tools"))).kind == "directory"


NUL_PATH = "/a\0b.txt"
LONG_PATH = "/" + "x" * 252 + ".txt"  # 256 bytes in one segment
LONG_UTF8_PATH = "/src/" + "é" * 128  # 256 bytes, 128 characters


async def _refused(h: Harness, path: str, reason: str) -> None:
    s = await h.seeded()
    arg = s.p(path)
    calls: list[tuple[str, Callable[..., Awaitable[object]], tuple[Any, ...]]] = [
        ("stat", s.fs.stat, (arg,)),
        ("read", s.fs.read, (arg,)),
        ("list", collect, (s.fs.list, arg)),
        ("glob", collect, (s.fs.glob, "*", arg)),
        ("grep", collect, (s.fs.grep, q("x", arg))),
        ("write", s.fs.write, (arg, "x")),
        ("delete", s.fs.delete, (arg,)),
    ]
    for verb, call, args in calls:
        error = await raises(vfs.InvalidPathError, call, *args)
        assert isinstance(error, ValueError), verb
        assert str(error).startswith("invalid path: "), (verb, str(error))
        assert reason in str(error), (verb, str(error))


async def paths_nul_byte_refused(h: Harness) -> None:
    """A NUL byte in a path is refused with ``InvalidPathError`` by every verb."""
    await _refused(h, NUL_PATH, "NUL byte")


async def paths_lone_surrogate_refused(h: Harness) -> None:
    """A lone surrogate that names no byte (JSON's ``"\\ud800"``) is refused by every verb,
    with the surrogate escaped in the message; a surrogate-escaped byte (``os.fsdecode`` of a
    name that is not UTF-8) is an ordinary name."""
    await _refused(h, "/a\ud800b.txt", "lone surrogate (U+D800)")
    await _refused(h, "/src/\udfff/x", "lone surrogate (U+DFFF)")
    s = await h.seeded()
    error = await raises(vfs.InvalidPathError, s.fs.stat, s.p("/a\ud800"))
    assert str(error).encode("utf-8")  # printable: no surrogate left in the message
    assert (await s.fs.stat(s.p("/caf\udce9.txt"))).kind == "missing"


async def paths_long_segment_refused(h: Harness) -> None:
    """A segment over 255 bytes (UTF-8) is refused; exactly 255 bytes is a legal name."""
    await _refused(h, LONG_PATH, "longer than 255 bytes")
    await _refused(h, LONG_UTF8_PATH, "longer than 255 bytes")
    s = await h.seeded()
    legal = s.p("/" + "y" * 251 + ".txt")
    assert (await s.fs.stat(legal)).kind == "missing"
    if h.caps.writable:
        await s.fs.write(legal, "long name")
        assert await s.fs.read(legal) == "long name"


# --------------------------------------------------------------------------------------------
# Iterators


def _sorted_unique(paths: Sequence[str]) -> None:
    assert list(paths) == sorted(set(paths)), paths


async def list_sorted_unique(h: Harness) -> None:
    """``list`` is sorted by path and unique (``/agent`` < ``/agent-tools`` < ``/b.md``)."""
    s = await h.seeded()
    for directory in ["/", "/src", "/src/nested", "/docs", "/img"]:
        found = await ls(s, s.p(directory))
        _sorted_unique([path for path, _ in found])
        assert found == model_children(h.seed(), directory), directory


async def list_direct_children_only(h: Harness) -> None:
    """``list`` yields direct children with their kinds, never deeper entries."""
    s = await h.seeded()
    assert await ls(s, s.p("/src")) == [
        ("/src/a.ts", "file"),
        ("/src/b.ts", "file"),
        ("/src/nested", "directory"),
    ]
    assert await ls(s, s.p("/src/nested")) == [
        ("/src/nested/c.ts", "file"),
        ("/src/nested/deep", "directory"),
        ("/src/nested/notes.md", "file"),
    ]


async def list_file_is_empty(h: Harness) -> None:
    """A file is not under itself: listing a file path is empty."""
    s = await h.seeded()
    assert await ls(s, s.p("/a.txt")) == []
    assert await ls(s, s.p("/src/nested/c.ts")) == []
    assert await ls(s, s.p("/img/p.png")) == []


async def list_missing_is_empty(h: Harness) -> None:
    """``list`` of a missing path is empty and never raises."""
    s = await h.seeded()
    for path in ["/nope", "/a.txt/x", "/src/nope/deeper", "/agent-tools/x/y"]:
        assert await ls(s, s.p(path)) == [], path


async def stat_kinds(h: Harness) -> None:
    """``stat``: file with its size, directory, and ``missing`` (never raises)."""
    s = await h.seeded()
    for path, contents in h.seed().items():
        info = await s.fs.stat(s.p(path))
        assert info.kind == "file", path
        assert info.size == size_of(contents), path
        assert info.exists
        assert isinstance(info.mtime, float)
        assert info.mode is None or isinstance(info.mode, int)
    for directory in ["/", *model_dirs(h.seed())]:
        info = await s.fs.stat(s.p(directory))
        assert info.kind == "directory", directory
    for path in ["/nope", "/nope.txt", "/a.txt/x", "/src/nope/x", "/src/a.ts/b"]:
        info = await s.fs.stat(s.p(path))
        assert info.kind == "missing", path
        assert not info.exists


async def glob_relative_to_dir(h: Harness) -> None:
    """``glob`` matches the path relative to ``dir``, not the basename anywhere."""
    s = await h.seeded()
    ts = [("/src/a.ts", "file"), ("/src/b.ts", "file")]
    assert await globbed(s, "*.ts", s.p("/src")) == ts
    assert await globbed(s, "?.ts", s.p("/src")) == ts
    assert await globbed(s, "*.ts", s.p("/")) == []
    assert await globbed(s, "src/*.ts", s.p("/")) == ts
    assert await globbed(s, "nested/*.ts", s.p("/src")) == [("/src/nested/c.ts", "file")]
    assert await globbed(s, "*", s.p("/src")) == await ls(s, s.p("/src"))
    assert await globbed(s, "*/*.txt", s.p("/")) == model_glob(h.seed(), "*/*.txt")
    assert await globbed(s, "nested", s.p("/src")) == [("/src/nested", "directory")]


async def glob_globstar(h: Harness) -> None:
    """``**`` spans any number of segments, including none."""
    s = await h.seeded()
    files = h.seed()
    all_ts = model_glob(files, "**/*.ts")
    if h.caps.seedable:
        assert all_ts == [
            ("/src/a.ts", "file"),
            ("/src/b.ts", "file"),
            ("/src/nested/c.ts", "file"),
        ]
    assert await globbed(s, "**/*.ts", s.p("/src")) == all_ts
    assert await globbed(s, "**/*.ts", s.p("/")) == all_ts
    assert await globbed(s, "src/**/*.ts", s.p("/")) == all_ts
    assert await globbed(s, "**/deep", s.p("/")) == model_glob(files, "**/deep")
    assert await globbed(s, "**/*", s.p("/src")) == model_glob(files, "**/*", "/src")
    assert await globbed(s, "**/*.md", s.p("/")) == model_glob(files, "**/*.md")


async def glob_missing_is_empty(h: Harness) -> None:
    """``glob`` under a missing directory or a file is empty and never raises."""
    s = await h.seeded()
    assert await globbed(s, "*", s.p("/nope")) == []
    assert await globbed(s, "**/*", s.p("/nope/deeper")) == []
    assert await globbed(s, "*", s.p("/a.txt")) == []
    assert await globbed(s, "nope/*.ts", s.p("/")) == []
    assert await globbed(s, "**/*.zzz", s.p("/")) == []


async def glob_sorted_unique(h: Harness) -> None:
    """``glob`` is sorted by path and unique, with the kind of each entry."""
    s = await h.seeded()
    found = await globbed(s, "**/*", s.p("/"))
    _sorted_unique([path for path, _ in found])
    assert found == model_entries(h.seed())
    assert await globbed(s, "**", s.p("/src/nested")) == model_glob(h.seed(), "**/*", "/src/nested")


async def grep_sorted_every_hit(h: Harness) -> None:
    """``grep`` is sorted by path then line, one result per matching line, every hit kept."""
    s = await h.seeded()
    files = h.seed()
    for pattern in ["TODO", "beta", "e", "^$"]:
        found = await grepped(s, q(pattern, s.p("/")))
        assert found == sorted(found)
        assert found == model_grep(files, pattern), pattern
    hits = await collect(s.fs.grep, q("TODO", s.p("/")))
    assert all(isinstance(hit, vfs.GrepResult) for hit in hits)


async def grep_line_anchors(h: Harness) -> None:
    """Patterns match per line: ``^`` and ``$`` anchor at each line's start and end."""
    s = await h.seeded()
    files = h.seed()
    for pattern in ["^beta", "beta$", "^TODO", "TODO$", "^// TODO", "gamma$", "^$"]:
        assert await grepped(s, q(pattern, s.p("/"))) == model_grep(files, pattern), pattern
    if h.caps.seedable:
        assert await grepped(s, q("^beta", s.p("/a.txt"))) == [("/a.txt", 2, "beta")]


async def grep_glob_basename(h: Harness) -> None:
    """A slash-free ``glob`` matches the basename at any depth under ``path``."""
    s = await h.seeded()
    files = h.seed()
    for path, glob in [("/", "*.ts"), ("/", "*.md"), ("/src", "*.ts"), ("/", "c.ts")]:
        found = await grepped(s, q("TODO", s.p(path), glob=glob))
        assert found == model_grep(files, "TODO", path, glob), (path, glob)
    if h.caps.seedable:
        assert [p for p, _, _ in await grepped(s, q("TODO", s.p("/"), glob="*.ts"))] == [
            "/src/a.ts",
            "/src/nested/c.ts",
            "/src/nested/c.ts",
        ]


async def grep_glob_with_slash(h: Harness) -> None:
    """A ``glob`` with a slash matches the path relative to the grep ``path``."""
    s = await h.seeded()
    files = h.seed()
    cases = [("/src", "nested/*.ts"), ("/", "src/*.ts"), ("/", "src/**/*.ts"), ("/", "*/*.md")]
    for path, glob in cases:
        found = await grepped(s, q("TODO", s.p(path), glob=glob))
        assert found == model_grep(files, "TODO", path, glob), (path, glob)
    assert await grepped(s, q("TODO", s.p("/src"), glob="src/*.ts")) == []


async def grep_path_scope(h: Harness) -> None:
    """``path`` scopes grep to a directory or a single file."""
    s = await h.seeded()
    files = h.seed()
    for path in ["/src/nested", "/src/nested/c.ts", "/a.txt", "/docs"]:
        assert await grepped(s, q(".", s.p(path))) == model_grep(files, ".", path), path
    # Grepping one file, a glob filter sees the file's name.
    for glob in ["*.ts", "c.ts", "*.md", "**/c.ts", "nested/c.ts"]:
        found = await grepped(s, q("TODO", s.p("/src/nested/c.ts"), glob=glob))
        assert found == model_grep(files, "TODO", "/src/nested/c.ts", glob), glob


async def grep_case_insensitive(h: Harness) -> None:
    """``case_insensitive`` folds case; the default does not."""
    s = await h.seeded()
    files = h.seed()
    assert await grepped(s, q("BETA", s.p("/"))) == model_grep(files, "BETA")
    folded = await grepped(s, q("BETA", s.p("/"), case_insensitive=True))
    assert folded == model_grep(files, "BETA", case_insensitive=True)
    if h.caps.seedable:
        assert len(folded) > len(model_grep(files, "BETA")) > 0


async def grep_max_results(h: Harness) -> None:
    """``max_results`` caps the hits: exactly the first N of the full, sorted answer."""
    s = await h.seeded()
    full = await grepped(s, q("TODO", s.p("/")))
    assert full == model_grep(h.seed(), "TODO")
    for limit in [1, 2, 3, len(full), len(full) + 5]:
        assert await grepped(s, q("TODO", s.p("/"), max_results=limit)) == full[:limit], limit
    scoped = model_grep(h.seed(), "TODO", "/src", "*.ts")
    assert await grepped(s, q("TODO", s.p("/src"), glob="*.ts", max_results=2)) == scoped[:2]


async def grep_invalid_pattern(h: Harness) -> None:
    """An invalid regex raises ``InvalidGrepPatternError`` ("invalid grep pattern: ("), at the
    first iteration on every tree (``grep`` itself returns the iterator)."""
    s = await h.seeded()
    for pattern, path in [("(", "/"), ("(", "/src"), ("[a-", "/"), ("a{2,1}", "/src/nested")]:
        stream = s.fs.grep(q(pattern, s.p(path)))  # no error yet
        await aclose_if_possible(stream)
        error = await raises(vfs.InvalidGrepPatternError, collect, s.fs.grep, q(pattern, s.p(path)))
        assert_message(error, f"invalid grep pattern: {pattern}")
        assert isinstance(error, vfs.PathError)
        assert isinstance(error, ValueError)


async def grep_missing_path_is_empty(h: Harness) -> None:
    """grep over a missing virtual path yields nothing."""
    s = await h.seeded()
    for path in ["/nope", "/a.txt/x", "/src/nope/deeper"]:
        assert await grepped(s, q(".", path)) == [], path


async def grep_missing_host_root_raises(h: Harness) -> None:
    """grep over a missing host search root raises ``FileNotFoundError``."""
    s = await h.seeded()
    path = s.p("/nope")
    error = await raises(vfs.FileNotFoundError, collect, s.fs.grep, q(".", path))
    assert_message(error, f"not found: {path}")


async def grep_skips_images(h: Harness) -> None:
    """Image files (``read`` gives bytes) produce no grep hits."""
    s = await h.seeded()
    assert await grepped(s, q("TODO", s.p("/img"))) == []
    assert await grepped(s, q(".", s.p("/img/p.png"))) == []


async def iterators_stop_early(h: Harness) -> None:
    """A consumer may stop any iterator after its first item and close it cleanly."""
    s = await h.seeded()
    makers: list[Callable[[], AsyncIterator[Any]]] = [
        lambda: s.fs.list(s.p("/")),
        lambda: s.fs.glob("**/*", s.p("/")),
        lambda: s.fs.grep(q(".", s.p("/"))),
        lambda: s.fs.search(vfs.SearchQuery("x", path=s.p("/"))),
    ]
    for make_iterator in makers:
        async with aclosing(make_iterator()) as iterator:
            async for _ in iterator:
                break
    assert await ls(s, s.p("/")) == model_children(h.seed(), "/")


# --------------------------------------------------------------------------------------------
# read and the errors of read/delete


async def read_text_is_str(h: Harness) -> None:
    """``read`` returns text as ``str``, exactly as written."""
    s = await h.seeded()
    for path, contents in h.seed().items():
        if isinstance(contents, str):
            got = await s.fs.read(s.p(path))
            assert type(got) is str, path
            assert got == contents, path


async def read_images_are_bytes(h: Harness) -> None:
    """``read`` returns png/jpg/jpeg/gif/webp as ``bytes``, exactly as written."""
    s = await h.seeded()
    for path in ["/img/p.png", "/img/q.jpg", "/img/r.jpeg", "/img/s.gif", "/img/t.webp"]:
        got = await s.fs.read(s.p(path))
        assert type(got) is bytes, path
        assert got == SEED[path], path


async def read_missing_not_found(h: Harness) -> None:
    """``read`` of a missing file raises ``FileNotFoundError`` ("not found: /a.txt")."""
    s = await h.seeded()
    missing = ["/nope.txt", "/src/nope.ts", "/src/nested/deep/nope.py", "/nope/deeper.txt"]
    if not h.caps.seedable:
        missing.append("/a.txt")
    for path in missing:
        error = await raises(vfs.FileNotFoundError, s.fs.read, s.p(path))
        assert_message(error, f"not found: {s.p(path)}")
        assert error.path == s.p(path)
        assert isinstance(error, builtins.FileNotFoundError)
        assert isinstance(error, vfs.PathError)


async def delete_missing_not_found(h: Harness) -> None:
    """``delete`` of a missing file raises ``FileNotFoundError`` ("not found: /a.txt")."""
    s = await h.seeded()
    for path in ["/nope.txt", "/src/nope.ts", "/src/nested/deep/nope.py", "/nope/deeper.txt"]:
        error = await raises(vfs.FileNotFoundError, s.fs.delete, s.p(path))
        assert_message(error, f"not found: {s.p(path)}")
        assert error.path == s.p(path)


async def search_without_index_is_empty(h: Harness) -> None:
    """``search`` on a tree without an index is empty success."""
    s = await h.seeded()
    for query in [
        vfs.SearchQuery("alpha"),
        vfs.SearchQuery("alpha", path=s.p("/src")),
        vfs.SearchQuery("TODO", path=s.p("/"), max_results=3),
        vfs.SearchQuery("x", path=s.p("/nope")),
    ]:
        assert await collect(s.fs.search, query) == [], query


async def results_are_frozen(h: Harness) -> None:
    """Results (``DirEntry``, ``FileInfo``, ``GrepResult``) are frozen dataclasses."""
    s = await h.seeded()
    values: list[object] = [await s.fs.stat(s.p("/")), await s.fs.stat(s.p("/nope"))]
    values += await collect(s.fs.list, s.p("/"))
    values += await collect(s.fs.glob, "**/*", s.p("/"))
    values += await collect(s.fs.grep, q(".", s.p("/")))
    if h.caps.seedable:
        values.append(await s.fs.stat(s.p("/a.txt")))
        assert any(isinstance(v, vfs.GrepResult) for v in values)
        assert any(isinstance(v, vfs.DirEntry) for v in values)
    for value in values:
        assert dataclasses.is_dataclass(value)
        field = dataclasses.fields(value)[0].name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(value, field, getattr(value, field))
        assert isinstance(value, (vfs.DirEntry, vfs.FileInfo, vfs.GrepResult)), value


async def is_a_filesystem(h: Harness) -> None:
    """The tree has the eight verbs (and the POSIX extension when it claims one)."""
    s = await h.seeded()
    assert isinstance(s.fs, vfs.FileSystem)
    if h.caps.has_posix:
        assert isinstance(s.fs, vfs.PosixFileSystem)


# --------------------------------------------------------------------------------------------
# Write


async def write_creates(h: Harness) -> None:
    """``write`` creates a file; it is then readable, stat-able, listed, globbed and grepped."""
    s = await h.seeded()
    assert await s.fs.write(s.p("/new.txt"), "fresh\nline\n") is None
    assert await s.fs.read(s.p("/new.txt")) == "fresh\nline\n"
    info = await s.fs.stat(s.p("/new.txt"))
    assert (info.kind, info.size) == ("file", 11)
    assert ("/new.txt", "file") in await ls(s, s.p("/"))
    _sorted_unique([p for p, _ in await ls(s, s.p("/"))])
    assert ("/new.txt", "file") in await globbed(s, "*.txt", s.p("/"))
    assert await grepped(s, q("fresh", s.p("/"))) == [("/new.txt", 1, "fresh")]


async def write_overwrites(h: Harness) -> None:
    """``write`` over an existing file replaces its contents (shorter and longer)."""
    s = await h.seeded()
    await s.fs.write(s.p("/a.txt"), "x")
    assert await s.fs.read(s.p("/a.txt")) == "x"
    assert (await s.fs.stat(s.p("/a.txt"))).size == 1
    assert await grepped(s, q("alpha", s.p("/"))) == []
    await s.fs.write(s.p("/src/nested/c.ts"), "longer than before\n" * 10)
    assert await s.fs.read(s.p("/src/nested/c.ts")) == "longer than before\n" * 10
    assert [p for p, _ in await ls(s, s.p("/"))].count("/a.txt") == 1


async def write_creates_parents(h: Harness) -> None:
    """``write`` creates missing parent directories."""
    s = await h.seeded()
    await s.fs.write(s.p("/p/q/r.txt"), "deep")
    assert await s.fs.read(s.p("/p/q/r.txt")) == "deep"
    assert (await s.fs.stat(s.p("/p"))).kind == "directory"
    assert (await s.fs.stat(s.p("/p/q"))).kind == "directory"
    assert await ls(s, s.p("/p")) == [("/p/q", "directory")]
    assert ("/p", "directory") in await ls(s, s.p("/"))
    assert await globbed(s, "**/r.txt", s.p("/")) == [("/p/q/r.txt", "file")]
    await s.fs.write(s.p("/src/nested/deep/er/e.py"), "e")
    assert await ls(s, s.p("/src/nested/deep")) == [
        ("/src/nested/deep/d.py", "file"),
        ("/src/nested/deep/er", "directory"),
    ]


async def write_bytes(h: Harness) -> None:
    """``write`` takes ``bytes`` too: images read back as bytes, text as ``str``."""
    s = await h.seeded()
    await s.fs.write(s.p("/new.png"), PNG)
    assert await s.fs.read(s.p("/new.png")) == PNG
    assert (await s.fs.stat(s.p("/new.png"))).size == len(PNG)
    await s.fs.write(s.p("/bytes.txt"), b"hello\n")
    assert await s.fs.read(s.p("/bytes.txt")) == "hello\n"
    await s.fs.write(s.p("/utf8.txt"), "é ☃\n")
    assert (await s.fs.stat(s.p("/utf8.txt"))).size == len("é ☃\n".encode())
    assert await s.fs.read(s.p("/utf8.txt")) == "é ☃\n"
    await s.fs.write(s.p("/empty.txt"), "")
    assert await s.fs.read(s.p("/empty.txt")) == ""
    assert (await s.fs.stat(s.p("/empty.txt"))).size == 0


async def write_normalizes_path(h: Harness) -> None:
    """``write`` normalizes its path like every verb."""
    s = await h.seeded()
    await s.fs.write(s.p("/x") + "/../w.txt", "w")
    assert await s.fs.read(s.p("/w.txt")) == "w"
    assert (await s.fs.stat(s.p("/x"))).kind == "missing"
    await s.fs.write("rel.txt", "r")
    assert await s.fs.read(s.p("/rel.txt")) == "r"
    await s.fs.write(s.p("/src/") + "/./s.ts", "s")
    assert await s.fs.read(s.p("/src/s.ts")) == "s"


async def delete_removes(h: Harness) -> None:
    """``delete`` removes a file from every verb's view; deleting again is ``not found``."""
    s = await h.seeded()
    assert await s.fs.delete(s.p("/a.txt")) is None
    assert (await s.fs.stat(s.p("/a.txt"))).kind == "missing"
    error = await raises(vfs.FileNotFoundError, s.fs.read, s.p("/a.txt"))
    assert_message(error, f"not found: {s.p('/a.txt')}")
    assert ("/a.txt", "file") not in await ls(s, s.p("/"))
    assert await grepped(s, q("alpha", s.p("/"))) == []
    error = await raises(vfs.FileNotFoundError, s.fs.delete, s.p("/a.txt"))
    assert_message(error, f"not found: {s.p('/a.txt')}")
    await s.fs.delete(s.p("/src/nested/c.ts"))
    assert await ls(s, s.p("/src/nested")) == [
        ("/src/nested/deep", "directory"),
        ("/src/nested/notes.md", "file"),
    ]
    assert await s.fs.read(s.p("/src/a.ts")) == SEED["/src/a.ts"]


async def write_then_delete_round_trip(h: Harness) -> None:
    """A written file can be deleted, and the tree is as before (files and content)."""
    s = await h.seeded()
    before = await grepped(s, q(".", s.p("/")))
    await s.fs.write(s.p("/src/tmp.ts"), "TODO temp\n")
    assert ("/src/tmp.ts", 1, "TODO temp") in await grepped(s, q("TODO", s.p("/")))
    await s.fs.delete(s.p("/src/tmp.ts"))
    assert await grepped(s, q(".", s.p("/"))) == before
    assert await ls(s, s.p("/src")) == model_children(SEED, "/src")


async def write_read_only(h: Harness) -> None:
    """A read-only tree refuses ``write`` with ``ReadOnlyMountError`` ("read-only mount: /a.txt")."""
    s = await h.seeded()
    for path in ["/a.txt", "/new.txt", "/src/new.ts", "/p/q/r.txt"]:
        error = await raises(vfs.ReadOnlyMountError, s.fs.write, s.p(path), "x")
        assert_message(error, f"read-only mount: {s.p(path)}")
        assert error.path == s.p(path)
        assert isinstance(error, builtins.PermissionError)
    assert (await s.fs.stat(s.p("/new.txt"))).kind == "missing"
    assert (await s.fs.stat(s.p("/p"))).kind == "missing"
    if h.caps.seedable:
        assert await s.fs.read(s.p("/a.txt")) == SEED["/a.txt"]


async def delete_read_only(h: Harness) -> None:
    """A read-only tree refuses ``delete`` ("read-only mount: /a.txt"); a missing path is
    ``not found``, as on any tree (there is nothing to refuse)."""
    s = await h.seeded()
    if h.caps.seedable:
        for path in ["/a.txt", "/src/nested/c.ts"]:
            error = await raises(vfs.ReadOnlyMountError, s.fs.delete, s.p(path))
            assert_message(error, f"read-only mount: {s.p(path)}")
            assert await s.fs.read(s.p(path)) == SEED[path]
    for path in ["/nope.txt", "/src/nope.ts", "/nope/deeper.txt"]:
        error = await raises(vfs.FileNotFoundError, s.fs.delete, s.p(path))
        assert_message(error, f"not found: {s.p(path)}")


# --------------------------------------------------------------------------------------------
# POSIX extension (trees that claim it)


async def posix_extension_basics(h: Harness) -> None:
    """lstat, open with byte ranges, mkdir/rmdir (empty list is not missing), rename."""
    s = await h.seeded()
    fs = s.fs
    assert (await fs.lstat(s.p("/a.txt"))).kind == "file"
    handle = await fs.open(s.p("/a.txt"))
    try:
        assert await handle.read(0, 5) == b"alpha"
        assert await handle.read(6, 100) == b"beta\n"
    finally:
        await handle.close()
    await fs.mkdir(s.p("/empty"))
    assert (await fs.stat(s.p("/empty"))).kind == "directory"
    assert await ls(s, s.p("/empty")) == []
    assert ("/empty", "directory") in await ls(s, s.p("/"))
    await fs.rmdir(s.p("/empty"))
    assert (await fs.stat(s.p("/empty"))).kind == "missing"
    await fs.rename(s.p("/a.txt"), s.p("/moved.txt"))
    assert await fs.read(s.p("/moved.txt")) == SEED["/a.txt"]
    assert (await fs.stat(s.p("/a.txt"))).kind == "missing"
    handle = await fs.open(s.p("/made.txt"), write=True, create=True)
    try:
        assert await handle.write(0, b"made") == 4
        await handle.flush()
    finally:
        await handle.close()
    assert await fs.read(s.p("/made.txt")) == "made"
    info = await fs.setattr(s.p("/made.txt"), size=2)
    assert info.size == 2
    assert await fs.read(s.p("/made.txt")) == "ma"


async def posix_read_only_refuses(h: Harness) -> None:
    """A read-only tree opens for reading and refuses every POSIX change ("read-only mount")."""
    s = await h.seeded()
    fs = s.fs
    handle = await fs.open(s.p("/a.txt"))
    try:
        assert await handle.read(0, 5) == b"alpha"
    finally:
        await handle.close()
    changes: list[tuple[str, Callable[..., Awaitable[object]], tuple[Any, ...], dict[str, Any]]] = [
        ("/a.txt", fs.open, (s.p("/a.txt"),), {"write": True}),
        ("/new.txt", fs.open, (s.p("/new.txt"),), {"write": True, "create": True}),
        ("/dir", fs.mkdir, (s.p("/dir"),), {}),
        ("/a.txt", fs.unlink, (s.p("/a.txt"),), {}),
        ("/a.txt", fs.setattr, (s.p("/a.txt"),), {"size": 0}),
    ]
    for path, call, args, options in changes:
        with pytest.raises(vfs.ReadOnlyMountError) as caught:
            await call(*args, **options)
        assert_message(caught.value, f"read-only mount: {s.p(path)}")
    assert await fs.read(s.p("/a.txt")) == SEED["/a.txt"]


async def posix_list_info_is_list_plus_lstat(h: Harness) -> None:
    """``list_info`` (native or the generic fallback) answers ``list`` with each entry's
    ``lstat``; ``buffers_writes``, when a tree reports it, is a plain bool."""
    s = await h.seeded()
    fs = s.fs
    flag = getattr(fs, "buffers_writes", True)
    assert isinstance(flag, bool), flag
    assert isinstance(buffers_writes(fs), bool)
    if h.caps.writable:
        await fs.mkdir(s.p("/empty"))
        with contextlib.suppress(vfs.NotSupportedError):  # a tree without symlinks
            await fs.symlink(s.p("/src/link"), "a.ts")
    listed = list_info_of(fs)
    for path in ["/", *sorted(model_dirs(h.seed())), "/empty", "/a.txt", "/nope", "/nope/x"]:
        expected = []
        for entry in await collect(fs.list, s.p(path)):
            info = await fs.lstat(entry.path)
            if info.exists:
                expected.append((entry, info))
        assert await listed(s.p(path)) == expected, path


# --------------------------------------------------------------------------------------------
# The rules, and what each needs


def _rule(check: Callable[[Harness], Awaitable[None]], *needs: str) -> Rule:
    return Rule(check.__name__, check, frozenset(needs or ("any",)))


RULES: tuple[Rule, ...] = (
    _rule(paths_root_aliases),
    _rule(paths_yielded_normalized),
    _rule(paths_input_normalized),
    _rule(paths_dotdot_never_escapes, "virtual"),
    _rule(paths_dotdot_resolves_host, "host"),
    _rule(paths_segment_prefix, "seed"),
    _rule(paths_nul_byte_refused),
    _rule(paths_lone_surrogate_refused),
    _rule(paths_long_segment_refused),
    _rule(list_sorted_unique),
    _rule(list_direct_children_only, "seed"),
    _rule(list_file_is_empty),
    _rule(list_missing_is_empty),
    _rule(stat_kinds),
    _rule(glob_relative_to_dir, "seed"),
    _rule(glob_globstar),
    _rule(glob_missing_is_empty),
    _rule(glob_sorted_unique),
    _rule(grep_sorted_every_hit),
    _rule(grep_line_anchors),
    _rule(grep_glob_basename),
    _rule(grep_glob_with_slash),
    _rule(grep_path_scope),
    _rule(grep_case_insensitive),
    _rule(grep_max_results),
    _rule(grep_invalid_pattern),
    _rule(grep_missing_path_is_empty, "virtual"),
    _rule(grep_missing_host_root_raises, "host"),
    _rule(grep_skips_images, "seed"),
    _rule(iterators_stop_early),
    _rule(read_text_is_str),
    _rule(read_images_are_bytes, "seed"),
    _rule(read_missing_not_found),
    _rule(search_without_index_is_empty),
    _rule(results_are_frozen),
    _rule(is_a_filesystem),
    _rule(write_creates, "writable"),
    _rule(write_overwrites, "writable", "seed"),
    _rule(write_creates_parents, "writable", "seed"),
    _rule(write_bytes, "writable"),
    _rule(write_normalizes_path, "writable"),
    _rule(delete_removes, "writable", "seed"),
    _rule(delete_missing_not_found, "writable"),
    _rule(write_then_delete_round_trip, "writable", "seed"),
    _rule(write_read_only, "read_only"),
    _rule(delete_read_only, "read_only"),
    _rule(posix_extension_basics, "posix", "writable", "seed"),
    _rule(posix_read_only_refuses, "posix", "read_only", "seed"),
    _rule(posix_list_info_is_list_plus_lstat, "posix"),
)


def rules_for(caps: Capabilities) -> list[Rule]:
    """The rules a composition with ``caps`` runs (all of them apply; none is skipped)."""
    provided = caps.provides()
    return [rule for rule in RULES if rule.needs <= provided]


async def check_filesystem(make: Make, caps: Capabilities | None = None) -> None:
    """Run every applicable rule over fresh trees built by ``make``; the first failure raises."""
    harness = Harness(make, caps or Capabilities())
    for rule in rules_for(harness.caps):
        await rule.check(harness)
