"""What a policy judges is what its tree then touches, on random symlink graphs.

Every file holds its own real path. For each tree kind (``temp_fs``, ``cow_fs`` over ``temp_fs``
and over ``dir_fs``, ``dir_fs`` on a real directory, with ``openat2`` and with its own walk),
every path of up to three names is read
through the tree (which tells where it went: the content) and through ``policy_fs`` with one real
file denied: the
policy must refuse exactly the paths that reach that file, however the links spell it (``..``,
absolute, relative, chains), and loops and dead ends fail alike on both.
"""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import vfs
from vfs._dir import DirFileSystem
from vfs._policy import PolicyDeniedError

KINDS = ("temp", "cow", "cow-dir", "dir", "dir-walk")  # dir-walk: dir_fs without openat2
# A skeleton of directories and files, then links at three places drawn over it.
SKELETON = [
    ("/a", ("dir", "")),
    ("/a/b", ("dir", "")),
    ("/c", ("dir", "")),
    ("/f", ("file", "")),
    ("/a/f", ("file", "")),
    ("/a/b/f", ("file", "")),
    ("/c/f", ("file", "")),
]
# Pieces of link targets that lead somewhere: directories one and two deep, climbs, other links.
PIECES = ["a/b", "l1/..", "..", "a", "/c", "l2", "f", ".", "/l3/.."]
targets = st.lists(st.sampled_from(PIECES), min_size=1, max_size=2).map("/".join)
layouts = st.tuples(*(st.one_of(st.none(), targets) for _ in ("/l1", "/l2", "/a/l3"))).map(
    lambda drawn: (
        SKELETON
        + [
            (slot, ("link", target))
            for slot, target in zip(("/l1", "/l2", "/a/l3"), drawn, strict=True)
            if target
        ]
    )
)
# Every path of up to three names: what a program may spell.
NAMES = ["l1", "l2", "l3", "a", "b", "f"]
PATHS = ["/" + "/".join(p) for n in (1, 2, 3) for p in itertools.product(NAMES, repeat=n)]


async def build(
    kind: str, layout: list[tuple[str, tuple[str, str]]], host: Path
) -> vfs.PosixFileSystem:
    """``layout`` in a tree of ``kind``; files hold their own path."""
    if kind == "dir-walk":
        base: vfs.PosixFileSystem = DirFileSystem(host, use_openat2=False)
    elif kind in ("dir", "cow-dir"):
        base = vfs.posix_view(vfs.dir_fs(host))
    else:
        base = vfs.posix_view(vfs.temp_fs())
    tree = vfs.posix_view(vfs.cow_fs(base)) if kind.startswith("cow") else base
    directories = {"/"}
    taken: set[str] = set()
    for path, (what, target) in layout:
        if (path.rsplit("/", 1)[0] or "/") not in directories or path in taken:
            continue
        if what == "dir":
            await tree.mkdir(path)
            directories.add(path)
        elif what == "file":
            await tree.write(path, path)
        elif target:
            await tree.symlink(path, target)
        taken.add(path)
    return tree


async def reached(tree: vfs.PosixFileSystem, path: str) -> str | type[BaseException]:
    """The real file ``path`` reads (its content), or the kind of error."""
    try:
        content = await tree.read(path)
    except vfs.PathError as error:
        return type(error)
    return content if isinstance(content, str) else content.decode()


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=60, deadline=None)
@given(layout=layouts)
def test_the_policy_judges_where_the_tree_goes(
    kind: str, layout: list[tuple[str, tuple[str, str]]]
) -> None:
    async def body() -> None:
        with tempfile.TemporaryDirectory() as scratch:
            tree = await build(kind, layout, Path(scratch))
            files = {path for path, (what, _) in layout if what == "file"}
            files = {p for p in files if await reached(tree, p) == p}  # those that were made
            for path in PATHS:
                went = await reached(tree, path)
                for denied in sorted(files):
                    through = await reached(vfs.policy_fs(tree, {denied: "none"}), path)
                    if went == denied:  # never reached through any spelling
                        assert through is PolicyDeniedError, (path, denied, went)
                    elif isinstance(went, str):  # and nothing else readable is refused
                        assert through == went, (path, denied, went, through)
                    else:  # a dead end, a loop: the same error, or refused on the way
                        assert through in (went, PolicyDeniedError), (path, denied, went, through)

    anyio.run(body, backend="trio")
