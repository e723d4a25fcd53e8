"""cow_fs: a writable copy-on-write tree over any lower tree, and its changes as data.

Every test checks at its end that the lower tree was not written (``Lower.untouched``), under trio
and asyncio. The conformance suite runs over two compositions: a cow over an in-memory lower, and
a cow over a read-only ``dir_fs`` with a ``dir_fs`` upper that already holds half the files (the
lower holds decoys under them, so any leak of a shadowed file shows).
"""

from __future__ import annotations

import errno
import itertools
import json
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

import vfs
from vfs._cow import CowFileSystem, cow_fs
from vfs._cow_changes import file_diff
from vfs._cow_meta import META_PATH, RESERVED, CowConflictError, CowMeta, Stamp, TreeChange

from .conformance import Capabilities, Files, Harness, Subject, rules_for
from .eightverb import BACKENDS, EightVerbTree, collect, exactly, paths, run
from .test_conformance import decoy, write_host_tree

pytestmark = pytest.mark.parametrize("backend", BACKENDS)

SEED: dict[str, str | bytes] = {
    "/a.txt": "alpha\n",
    "/b.txt": "beta\nalpha again\n",
    "/img.png": b"\x89PNG\r\n\x1a\n\x00binary",
    "/d/x.txt": "x\n",
    "/d/y.txt": "y\n",
    "/d/sub/z.txt": "z\n",
    "/e/keep.txt": "keep\n",
}


async def tree_state(tree: vfs.PosixFileSystem, root: str = "/") -> dict[str, tuple[str, Any]]:
    """path -> (kind, bytes or link target) of everything beneath ``root``."""
    state: dict[str, tuple[str, Any]] = {}
    for entry in [e async for e in tree.list(root)]:
        info = await tree.lstat(entry.path)
        if info.kind == "directory":
            state[entry.path] = ("directory", info.mode)
            state.update(await tree_state(tree, entry.path))
        elif info.kind == "symlink":
            state[entry.path] = ("symlink", await tree.readlink(entry.path))
        else:
            file = await tree.open(entry.path)
            state[entry.path] = ("file", await file.read(0, 1 << 30), info.mode)
            await file.close()
    return state


class Lower:
    """A seeded lower tree and what it held, to prove it is never written."""

    def __init__(self, files: Files | None = None) -> None:
        self.tree = vfs.temp_fs(dict(SEED if files is None else files))
        self.before: dict[str, tuple[str, Any]] | None = None

    async def snap(self) -> Lower:
        self.before = await tree_state(self.tree)
        return self

    async def untouched(self) -> None:
        assert await tree_state(self.tree) == self.before


async def seeded(files: Files | None = None) -> tuple[Lower, CowFileSystem]:
    lower = await Lower(files).snap()
    return lower, cow_fs(lower.tree)


async def upper_paths(cow: CowFileSystem) -> list[str]:
    """Everything in the upper except the reserved directory."""
    state = await tree_state(vfs.posix_view(cow.upper))
    return sorted(p for p in state if not vfs.is_under(p, RESERVED))


async def read_bytes(tree: vfs.PosixFileSystem, path: str) -> bytes:
    file = await tree.open(path)
    try:
        return await file.read(0, 1 << 30)
    finally:
        await file.close()


# --------------------------------------------------------------------------------------------
# The contract, through two compositions


async def make_over_temp(tmp: Path, files: Files) -> Subject:
    return Subject(cow_fs(vfs.temp_fs(dict(files))))


async def make_split(tmp: Path, files: Files) -> Subject:
    names = sorted(files)
    upper = {path: files[path] for path in names[::2]}
    lower = {path: decoy(files[path]) if path in upper else files[path] for path in names}
    cow = cow_fs(
        vfs.dir_fs(write_host_tree(tmp / "lower", lower), read_only=True),
        vfs.dir_fs(write_host_tree(tmp / "upper", {})),
    )
    for path, contents in upper.items():
        await cow.write(path, contents)
    return Subject(cow)


@pytest.mark.parametrize("make", [make_over_temp, make_split], ids=["over_temp", "split"])
def test_conformance(backend: str, make: Callable[..., Any], tmp_path: Path) -> None:
    counter = itertools.count()

    async def subject(files: Files) -> Subject:
        return await make(tmp_path / f"t{next(counter)}", files)  # type: ignore[no-any-return]

    harness = Harness(subject, Capabilities(has_posix=True))

    async def main() -> None:
        for rule in rules_for(harness.caps):
            await rule.check(harness)

    run(backend, main)


def test_protocols(backend: str) -> None:
    async def main() -> None:
        cow = cow_fs(vfs.temp_fs())
        assert isinstance(cow, vfs.FileSystem)
        assert isinstance(cow, vfs.PosixFileSystem)
        assert isinstance(cow, vfs.Watchable)
        assert repr(cow).startswith("cow_fs(temp_fs(")

    run(backend, main)


# --------------------------------------------------------------------------------------------
# Reads never copy; the first write does


def test_reads_never_copy_up(backend: str) -> None:
    async def main() -> None:
        lower, cow = await seeded()
        handle = await cow.open("/d/x.txt")
        assert await handle.read(0, 100) == b"x\n"
        await handle.close()
        assert await cow.read("/a.txt") == "alpha\n"
        assert (await cow.stat("/d/sub/z.txt")).size == 2
        assert await paths(cow.list("/d")) == ["/d/sub", "/d/x.txt", "/d/y.txt"]
        assert len(await collect(cow.grep(vfs.GrepQuery("a")))) == 3
        assert await paths(cow.glob("**/*.txt")) == [
            "/a.txt",
            "/b.txt",
            "/d/sub/z.txt",
            "/d/x.txt",
            "/d/y.txt",
            "/e/keep.txt",
        ]
        assert await upper_paths(cow) == []
        assert not cow.meta.bases and not cow.meta.hidden
        await lower.untouched()

    run(backend, main)


def test_open_for_writing_copies_content_mode_and_times(backend: str) -> None:
    async def main() -> None:
        lower, cow = await seeded()
        await lower.tree.setattr("/d", mode=0o750)
        await lower.tree.setattr("/d/sub/z.txt", mode=0o600, mtime_ns=1_000_000_000)
        lower = await lower.snap()
        handle = await cow.open("/d/sub/z.txt", write=True)
        upper = vfs.posix_view(cow.upper)
        copied = await upper.lstat("/d/sub/z.txt")
        assert (copied.mode, copied.mtime_ns, copied.size) == (0o600, 1_000_000_000, 2)
        assert (await upper.lstat("/d")).mode == 0o750  # parents copied with the lower's modes
        assert await upper_paths(cow) == ["/d", "/d/sub", "/d/sub/z.txt"]
        await handle.write(0, b"Z")
        await handle.close()
        assert await cow.read("/d/sub/z.txt") == "Z\n"
        assert await lower.tree.read("/d/sub/z.txt") == "z\n"
        await lower.untouched()

    run(backend, main)


def test_truncate_write_and_setattr_copy_up(backend: str) -> None:
    async def main() -> None:
        lower, cow = await seeded()
        file = await cow.open("/a.txt", write=True, truncate=True)
        await file.write(0, b"new")
        await file.close()
        assert await cow.read("/a.txt") == "new"
        await cow.setattr("/b.txt", mode=0o755)
        assert (await cow.stat("/b.txt")).mode == 0o755
        assert await cow.read("/b.txt") == "beta\nalpha again\n"
        await cow.setattr("/d/x.txt", mtime_ns=5_000_000_000)
        assert (await cow.stat("/d/x.txt")).mtime_ns == 5_000_000_000
        await cow.setattr("/d/y.txt", size=1)
        assert await cow.read("/d/y.txt") == "y"
        await cow.setattr("/e", mode=0o700)
        assert (await cow.stat("/e")).mode == 0o700
        assert await cow.read("/e/keep.txt") == "keep\n"  # a copied-up directory still merges
        await cow.write("/img.png", b"\x89PNG new")
        assert await cow.read("/img.png") == b"\x89PNG new"
        assert (await cow.stat("/img.png")).mode == 0o644
        await lower.untouched()

    run(backend, main)


def test_lower_handle_sees_the_copy(backend: str) -> None:
    async def main() -> None:
        lower, cow = await seeded()
        reader = await cow.open("/a.txt")
        writer = await cow.open("/a.txt", write=True)
        await writer.write(0, b"ALPHA")
        assert await reader.read(0, 100) == b"ALPHA\n"  # one file, as POSIX says
        with pytest.raises(vfs.PathError, match=exactly("bad file descriptor: /a.txt")):
            await reader.write(0, b"no")
        await reader.close()
        await writer.close()
        survivor = await cow.open("/b.txt")
        await cow.unlink("/b.txt")
        assert await survivor.read(0, 4) == b"beta"  # unlinked while open: still readable
        await survivor.close()
        await lower.untouched()

    run(backend, main)


# --------------------------------------------------------------------------------------------
# Whiteouts and opaque directories


def test_whiteouts_hide_and_recreate(backend: str) -> None:
    async def main() -> None:
        lower, cow = await seeded()
        await cow.delete("/a.txt")
        assert (await cow.stat("/a.txt")).kind == "missing"
        with pytest.raises(vfs.FileNotFoundError, match=exactly("not found: /a.txt")):
            await cow.read("/a.txt")
        assert "/a.txt" not in await paths(cow.list("/"))
        await cow.write("/a.txt", "reborn\n")
        assert await cow.read("/a.txt") == "reborn\n"
        # A directory deleted and re-created is opaque: the lower's children stay hidden.
        for name in ("x.txt", "y.txt", "sub/z.txt"):
            await cow.unlink(f"/d/{name}")
        await cow.rmdir("/d/sub")
        await cow.rmdir("/d")
        assert (await cow.stat("/d")).kind == "missing"
        await cow.mkdir("/d")
        assert await paths(cow.list("/d")) == []
        assert (await cow.stat("/d/x.txt")).kind == "missing"
        await cow.write("/d/x.txt", "new x\n")
        assert await paths(cow.list("/d")) == ["/d/x.txt"]
        # A file replaced by a directory, and a directory by a file.
        await cow.unlink("/b.txt")
        await cow.mkdir("/b.txt")
        assert (await cow.stat("/b.txt")).kind == "directory"
        await cow.unlink("/e/keep.txt")
        await cow.rmdir("/e")
        await cow.write("/e", "a file now")
        assert (await cow.stat("/e")).kind == "file"
        assert (await cow.stat("/e/keep.txt")).kind == "missing"
        assert await paths(cow.list("/")) == ["/a.txt", "/b.txt", "/d", "/e", "/img.png"]
        await lower.untouched()

    run(backend, main)


def test_metadata_is_never_visible(backend: str) -> None:
    async def main() -> None:
        lower = await Lower({**SEED, "/.agentroot-cow/meta.json": "a lower decoy"}).snap()
        cow = cow_fs(lower.tree, vfs.temp_fs())  # a given upper keeps the record in it
        await cow.delete("/a.txt")
        await cow.write("/d/x.txt", "changed")
        assert (await cow.upper.stat(META_PATH)).kind == "file"
        assert "/.agentroot-cow" not in await paths(cow.list("/"))
        assert (await cow.stat("/.agentroot-cow")).kind == "missing"
        assert await paths(cow.glob("**/*.json")) == []
        assert await collect(cow.grep(vfs.GrepQuery("hidden|decoy"))) == []
        for attempt in (
            lambda: cow.write("/.agentroot-cow/x", "no"),
            lambda: cow.mkdir("/.agentroot-cow"),
            lambda: cow.open("/.agentroot-cow", create=True, write=True),
            lambda: cow.symlink("/.agentroot-cow", "/a.txt"),
            lambda: cow.rename("/b.txt", "/.agentroot-cow"),
        ):
            with pytest.raises(
                vfs.PermissionDeniedError, match=r"^permission denied: /\.agentroot"
            ):
                await attempt()
        with pytest.raises(vfs.FileNotFoundError, match=exactly("not found: /.agentroot-cow")):
            await cow.delete("/.agentroot-cow")
        await lower.untouched()

    run(backend, main)


# --------------------------------------------------------------------------------------------
# Lock-file protocols behave as on one filesystem


def test_exclusive_create_mkdir_and_noreplace_see_both_layers(backend: str) -> None:
    async def main() -> None:
        lower, cow = await seeded()
        with pytest.raises(vfs.FileExistsError, match=exactly("already exists: /a.txt")):
            await cow.open("/a.txt", write=True, create=True, exclusive=True)
        with pytest.raises(vfs.FileExistsError, match=exactly("already exists: /d")):
            await cow.mkdir("/d")
        with pytest.raises(vfs.FileExistsError, match=exactly("already exists: /b.txt")):
            await cow.rename("/a.txt", "/b.txt", noreplace=True)
        lock = await cow.open("/index.lock", write=True, create=True, exclusive=True)
        await lock.close()
        with pytest.raises(vfs.FileExistsError, match=exactly("already exists: /index.lock")):
            await cow.open("/index.lock", write=True, create=True, exclusive=True)
        await cow.delete("/a.txt")  # a whiteout frees the name
        file = await cow.open("/a.txt", write=True, create=True, exclusive=True)
        await file.close()
        await cow.rename("/index.lock", "/b.txt")  # rename over a lower file
        assert await cow.read("/b.txt") == ""
        with pytest.raises(vfs.FileNotFoundError, match=exactly("not found: /index.lock")):
            await cow.read("/index.lock")
        await cow.rename("/d/x.txt", "/a.txt", noreplace=False)
        assert await cow.read("/a.txt") == "x\n"
        await lower.untouched()

    run(backend, main)


def test_concurrent_lock_takers_one_wins(backend: str) -> None:
    async def main() -> None:
        lower = await Lower().snap()
        cow = cow_fs(Slow(lower.tree), Slow(vfs.temp_fs()))
        winners: list[int] = []

        async def take(index: int) -> None:
            try:
                file = await cow.open("/d/lock", write=True, create=True, exclusive=True)
            except vfs.FileExistsError:
                return
            winners.append(index)
            await file.close()

        async def mkdir_lock(index: int) -> None:
            try:
                await cow.mkdir("/d/lockdir")
            except vfs.FileExistsError:
                return
            winners.append(100 + index)

        async with anyio.create_task_group() as group:
            for index in range(8):
                group.start_soon(take, index)
                group.start_soon(mkdir_lock, index)
        assert len([w for w in winners if w < 100]) == 1
        assert len([w for w in winners if w >= 100]) == 1
        await lower.untouched()

    run(backend, main)


def test_directory_rename_is_atomic_for_readers(backend: str) -> None:
    async def main() -> None:
        files: dict[str, str | bytes] = {f"/src/f{i}.txt": f"{i}\n" for i in range(12)}
        files.update({f"/src/n/g{i}.txt": "g\n" for i in range(4)})
        lower = await Lower(files).snap()
        cow = cow_fs(Slow(lower.tree), Slow(vfs.temp_fs()))
        await cow.write("/src/f3.txt", "upper\n")  # children in both layers
        await cow.delete("/src/f4.txt")
        seen: list[tuple[str, ...]] = []
        done = anyio.Event()

        async def watch_names() -> None:
            while not done.is_set():
                seen.append(tuple(await paths(cow.list("/"))))
                kind = (await cow.stat("/src/f0.txt")).kind
                seen.append(("f0", kind) if kind == "file" else ())
                await anyio.lowlevel.checkpoint()

        async with anyio.create_task_group() as group:
            group.start_soon(watch_names)
            group.start_soon(watch_names)
            for _ in range(3):
                await cow.rename("/src", "/dst")
                await cow.rename("/dst", "/src")
            done.set()
        assert set(seen) <= {("/src",), ("/dst",), ("f0", "file"), ()}
        assert ("/dst",) in seen and ("/src",) in seen
        assert len(await paths(cow.glob("src/**"))) == 16
        await lower.untouched()

    run(backend, main)


# --------------------------------------------------------------------------------------------
# Renames across layers


def test_directory_rename_across_layers(backend: str) -> None:
    async def main() -> None:
        lower, cow = await seeded()
        await cow.write("/d/x.txt", "X upper\n")  # copied up
        await cow.write("/d/new.txt", "new\n")  # upper only
        await cow.delete("/d/y.txt")  # whited out
        await cow.mkdir("/d/sub/deeper")
        await cow.rename("/d", "/moved")
        assert (await cow.stat("/d")).kind == "missing"
        assert await paths(cow.glob("moved/**")) == [
            "/moved/new.txt",
            "/moved/sub",
            "/moved/sub/deeper",
            "/moved/sub/z.txt",
            "/moved/x.txt",
        ]
        assert await cow.read("/moved/x.txt") == "X upper\n"
        assert await cow.read("/moved/sub/z.txt") == "z\n"
        # A directory of the lower, renamed into a directory of the lower.
        await cow.rename("/moved", "/e/inner")
        assert await paths(cow.list("/e")) == ["/e/inner", "/e/keep.txt"]
        # A directory re-created where one was renamed away is empty (opaque).
        await cow.mkdir("/d")
        assert await paths(cow.list("/d")) == []
        # Renamed back over an empty directory.
        await cow.rmdir("/d")
        await cow.rename("/e/inner", "/d")
        assert await paths(cow.list("/d")) == ["/d/new.txt", "/d/sub", "/d/x.txt"]
        changes = [(c.path, c.kind, c.old_path) async for c in cow.changes()]
        assert changes == [
            ("/d/new.txt", "added", None),
            ("/d/sub/deeper", "added", None),
            ("/d/x.txt", "modified", None),
            ("/d/y.txt", "deleted", None),
        ]
        await lower.untouched()

    run(backend, main)


def test_rename_errors_as_posix(backend: str) -> None:
    async def main() -> None:
        lower, cow = await seeded()
        with pytest.raises(vfs.FileNotFoundError, match=exactly("not found: /nope")):
            await cow.rename("/nope", "/x")
        with pytest.raises(vfs.PathError, match=exactly("invalid argument: /d")) as caught:
            await cow.rename("/d", "/d/sub/inside")
        assert caught.value.errno == errno.EINVAL
        with pytest.raises(vfs.NotADirectoryError, match=exactly("not a directory: /a.txt")):
            await cow.rename("/d", "/a.txt")
        with pytest.raises(vfs.IsADirectoryError, match=exactly("is a directory: /e")):
            await cow.rename("/a.txt", "/e")
        with pytest.raises(vfs.DirectoryNotEmptyError, match=exactly("directory not empty: /e")):
            await cow.rename("/d", "/e")
        with pytest.raises(vfs.PathError, match=exactly("device or resource busy: /")):
            await cow.rename("/", "/x")
        await cow.rename("/a.txt", "/a.txt")  # the same entry: nothing happens
        await cow.rename("/a.txt", "/e/keep.txt", exchange=True)
        assert await cow.read("/a.txt") == "keep\n"
        assert await cow.read("/e/keep.txt") == "alpha\n"
        await cow.rename("/d", "/e", exchange=True)
        assert await paths(cow.list("/d")) == ["/d/keep.txt"]
        await lower.untouched()

    run(backend, main)


# --------------------------------------------------------------------------------------------
# Merged listing, grep, glob, search, symlinks


def test_list_grep_glob_search_merge(backend: str) -> None:
    async def main() -> None:
        lower_tree = EightVerbTree({"/a.txt": "alpha one\n", "/d/x.txt": "alpha x\n", "/z": "z"})
        cow = cow_fs(lower_tree)
        await cow.write("/b.txt", "alpha b\nalpha b2\n")
        await cow.write("/d/x.txt", "beta now\n")
        await cow.delete("/z")
        assert await collect(cow.list("/")) == [
            vfs.DirEntry("/a.txt", "file"),
            vfs.DirEntry("/b.txt", "file"),
            vfs.DirEntry("/d", "directory"),
        ]
        hits = [(h.path, h.line_number) for h in await collect(cow.grep(vfs.GrepQuery("alpha")))]
        assert hits == [("/a.txt", 1), ("/b.txt", 1), ("/b.txt", 2)]
        capped = await collect(cow.grep(vfs.GrepQuery("alpha|beta", max_results=2)))
        assert [(h.path, h.line_number) for h in capped] == [("/a.txt", 1), ("/b.txt", 1)]  # type: ignore[attr-defined]
        assert await collect(cow.grep(vfs.GrepQuery("alpha", path="/d"))) == []
        with pytest.raises(vfs.InvalidGrepPatternError, match=exactly("invalid grep pattern: (")):
            await collect(cow.grep(vfs.GrepQuery("(")))
        assert await paths(cow.glob("*")) == ["/a.txt", "/b.txt", "/d"]
        listed = await cow.list_info("/")
        assert [(e.path, e.kind, i.kind) for e, i in listed] == [
            ("/a.txt", "file", "file"),
            ("/b.txt", "file", "file"),
            ("/d", "directory", "directory"),
        ]
        assert listed[1][1] == await cow.lstat("/b.txt")
        assert await cow.list_info("/a.txt") == [] and await cow.list_info("/nope") == []
        assert cow.buffers_writes is False  # the upper (temp_fs) writes through
        found = await collect(cow.search(vfs.SearchQuery("alpha")))
        assert [r.path for r in found] == ["/a.txt"]  # type: ignore[attr-defined]
        await cow.delete("/a.txt")
        assert await collect(cow.search(vfs.SearchQuery("alpha"))) == []
        assert "/z" in lower_tree.files and lower_tree.written == []

    run(backend, main)


def test_grep_pushdown_stays_exact_when_lower_hits_are_shadowed(backend: str) -> None:
    async def main() -> None:
        lower_tree = EightVerbTree({f"/f{i}.txt": "hit\n" for i in range(6)})
        cow = cow_fs(lower_tree)
        for i in range(4):
            await cow.write(f"/f{i}.txt", "miss\n")  # the lower's first four hits are shadowed
        await cow.delete("/f4.txt")
        hits = await collect(cow.grep(vfs.GrepQuery("hit", max_results=1)))
        assert [h.path for h in hits] == ["/f5.txt"]  # type: ignore[attr-defined]
        assert lower_tree.grep_caps[0] == 1  # pushed down, then refilled
        assert await collect(cow.grep(vfs.GrepQuery("hit", path="/f1.txt"))) == []

    run(backend, main)


def test_symlinks_resolve_in_the_merged_view(backend: str) -> None:
    async def main() -> None:
        lower = await Lower().snap()
        await lower.tree.symlink("/link", "/d")
        await lower.tree.symlink("/d/up", "../e/keep.txt")
        lower = await lower.snap()
        cow = cow_fs(lower.tree)
        await cow.write("/d/x.txt", "upper x\n")
        assert await cow.read("/link/x.txt") == "upper x\n"  # a lower link to a copied-up file
        assert await cow.read("/d/up") == "keep\n"
        await cow.write("/link/new.txt", "via link\n")
        assert await cow.read("/d/new.txt") == "via link\n"
        await cow.delete("/e/keep.txt")
        assert (await cow.stat("/d/up")).kind == "missing"
        assert (await cow.lstat("/d/up")).kind == "symlink"
        assert await cow.readlink("/link") == "/d"
        await cow.symlink("/loop", "/loop")
        with pytest.raises(
            vfs.PathError, match=exactly("too many levels of symbolic links: /loop")
        ):
            await cow.read("/loop")
        await cow.write("/d/up", "through a dangling link\n")  # creates the target
        assert await cow.read("/e/keep.txt") == "through a dangling link\n"
        await lower.untouched()

    run(backend, main)


# --------------------------------------------------------------------------------------------
# Changes as data


def test_changes_kinds(backend: str) -> None:
    async def main() -> None:
        lower, cow = await seeded()
        await cow.write("/a.txt", "alpha changed\n")
        await cow.write("/b.txt", "beta\nalpha again\n")  # rewritten byte-identical
        await cow.setattr("/d/x.txt", mode=0o755)
        await cow.delete("/img.png")
        await cow.rename("/d/y.txt", "/d/sub/y-moved.txt")
        await cow.write("/new/deep.txt", "deep\n")
        await cow.symlink("/ln", "a.txt")
        await cow.rename("/e", "/e2")
        changes = [c async for c in cow.changes()]
        assert changes == [
            TreeChange("/a.txt", "modified", "file"),
            TreeChange("/d/sub/y-moved.txt", "renamed", "file", "/d/y.txt"),
            TreeChange("/d/x.txt", "mode_changed", "file"),
            TreeChange("/e2", "renamed", "directory", "/e"),
            TreeChange("/e2/keep.txt", "renamed", "file", "/e/keep.txt"),
            TreeChange("/img.png", "deleted", "file"),
            TreeChange("/ln", "added", "symlink"),
            TreeChange("/new", "added", "directory"),
            TreeChange("/new/deep.txt", "added", "file"),
        ]
        assert [c.path async for c in cow.changes(["/d"])] == ["/d/sub/y-moved.txt", "/d/x.txt"]
        assert [c.path async for c in cow.changes(["/e"])] == ["/e2", "/e2/keep.txt"]
        # Restored byte-identical (and mode): no change at all.
        await cow.write("/a.txt", "alpha\n")
        await cow.setattr("/d/x.txt", mode=0o644)
        assert [c.path async for c in cow.changes(["/a.txt", "/d/x.txt"])] == []
        # Renamed back: nothing changed.
        await cow.rename("/e2", "/e")
        assert [c.path async for c in cow.changes(["/e"])] == []
        await lower.untouched()

    run(backend, main)


DIFF = """\
diff --git a/a.txt b/a.txt
--- a/a.txt
+++ b/a.txt
@@ -1 +1,2 @@
 alpha
+omega
\\ No newline at end of file
diff --git a/d/x.txt b/d/x.txt
old mode 100644
new mode 100755
diff --git a/d/y.txt b/d/y2.txt
rename from d/y.txt
rename to d/y2.txt
--- a/d/y.txt
+++ b/d/y2.txt
@@ -1 +1 @@
-y
+y2
diff --git a/img.png b/img.png
Binary files a/img.png and b/img.png differ
diff --git a/ln b/ln
new file mode 120000
--- /dev/null
+++ b/ln
@@ -0,0 +1 @@
+a.txt
\\ No newline at end of file
diff --git a/new.txt b/new.txt
new file mode 100644
--- /dev/null
+++ b/new.txt
@@ -0,0 +1 @@
+new
diff --git a/sub/z.txt b/sub/z.txt
deleted file mode 100644
--- a/sub/z.txt
+++ /dev/null
@@ -1 +0,0 @@
-z
"""


def test_diff_is_git_style_with_content(backend: str) -> None:
    async def main() -> None:
        lower, cow = await seeded(
            {
                "/a.txt": "alpha\n",
                "/img.png": b"\x89PNG\x00old",
                "/d/x.txt": "x\n",
                "/d/y.txt": "y\n",
                "/sub/z.txt": "z\n",
            }
        )
        await cow.write("/a.txt", "alpha\nomega")
        await cow.write("/img.png", b"\x89PNG\x00new")
        await cow.setattr("/d/x.txt", mode=0o755)
        await cow.rename("/d/y.txt", "/d/y2.txt")
        await cow.write("/d/y2.txt", "y2\n")
        await cow.symlink("/ln", "a.txt")
        await cow.write("/new.txt", "new\n")
        await cow.delete("/sub/z.txt")
        assert await cow.diff() == DIFF
        assert (
            await cow.diff(["/new.txt"])
            == DIFF[DIFF.index("diff --git a/new.txt") :].split("diff --git a/sub")[0]
        )
        await lower.untouched()

    run(backend, main)


def test_file_diff_edges(backend: str) -> None:
    assert file_diff("/e", "/e", ("file", 0o644, b""), None) == (
        "diff --git a/e b/e\ndeleted file mode 100644\n"
    )
    assert file_diff("/b", "/b", None, ("file", 0o755, b"\x00\x01")) == (
        "diff --git a/b b/b\nnew file mode 100755\nBinary files /dev/null and b/b differ\n"
    )
    assert file_diff("/t", "/t", ("file", 0o644, b"\xff\xfe"), ("file", 0o644, b"ok\n")) == (
        "diff --git a/t b/t\nBinary files a/t and b/t differ\n"
    )


def test_apply_writes_back_and_resets(backend: str) -> None:
    async def main() -> None:
        target = vfs.temp_fs(dict(SEED))
        cow = cow_fs(target)
        await cow.write("/a.txt", "alpha changed\n")
        await cow.rename("/d", "/d2")
        await cow.delete("/img.png")
        await cow.setattr("/b.txt", mode=0o600)
        await cow.write("/new/n.txt", "n\n")
        expected = await tree_state(cow)
        applied = await cow.apply()
        assert [c.path for c in applied] == [
            "/a.txt",
            "/b.txt",
            "/d2",
            "/d2/sub",
            "/d2/sub/z.txt",
            "/d2/x.txt",
            "/d2/y.txt",
            "/img.png",
            "/new",
            "/new/n.txt",
        ]
        assert await tree_state(target) == expected
        assert await tree_state(cow) == expected
        assert [c async for c in cow.changes()] == []
        assert await upper_paths(cow) == []
        assert not cow.meta.hidden and not cow.meta.origins and not cow.meta.bases

    run(backend, main)


def test_apply_chosen_paths(backend: str) -> None:
    async def main() -> None:
        target = vfs.temp_fs(dict(SEED))
        cow = cow_fs(target)
        await cow.write("/a.txt", "alpha changed\n")
        await cow.write("/d/x.txt", "x changed\n")
        await cow.delete("/d/y.txt")
        await cow.rename("/e", "/e2")
        view = await tree_state(cow)
        applied = await cow.apply(["/d/x.txt", "/e"])
        assert [(c.path, c.kind) for c in applied] == [
            ("/d/x.txt", "modified"),
            ("/e2", "renamed"),
            ("/e2/keep.txt", "renamed"),
        ]
        assert await target.read("/d/x.txt") == "x changed\n"
        assert await target.read("/a.txt") == "alpha\n"
        assert await target.read("/d/y.txt") == "y\n"
        assert await target.read("/e2/keep.txt") == "keep\n"
        assert (await target.stat("/e")).kind == "missing"
        assert await tree_state(cow) == view
        assert [(c.path, c.kind) async for c in cow.changes()] == [
            ("/a.txt", "modified"),
            ("/d/y.txt", "deleted"),
        ]
        await cow.apply()
        assert await tree_state(target) == view
        assert [c async for c in cow.changes()] == []

    run(backend, main)


def test_apply_refuses_conflicts_and_writes_nothing(backend: str) -> None:
    async def main() -> None:
        target = vfs.temp_fs(dict(SEED))
        cow = cow_fs(target)
        await cow.write("/a.txt", "mine\n")
        await cow.delete("/b.txt")
        await cow.write("/d/x.txt", "mine too\n")
        await target.write("/a.txt", "theirs\n")  # the lower changed after the copy-up
        await target.write("/b.txt", "theirs as well\n")
        before = await tree_state(target)
        with pytest.raises(
            CowConflictError,
            match=exactly("conflict: /a.txt changed in the lower tree since it was copied up"),
        ) as caught:
            await cow.apply()
        assert caught.value.errno == errno.ESTALE
        assert caught.value.paths == ("/a.txt", "/b.txt")
        assert isinstance(caught.value, vfs.PathError)
        assert await tree_state(target) == before
        assert await cow.read("/a.txt") == "mine\n"
        # Unrelated paths still apply; a touch that keeps the bytes is no conflict.
        await cow.apply(["/d"])
        assert await target.read("/d/x.txt") == "mine too\n"
        await target.write("/a.txt", "alpha\n")
        await cow.apply(["/a.txt"])
        assert await target.read("/a.txt") == "mine\n"

    run(backend, main)


def test_apply_into_another_target(backend: str) -> None:
    async def main() -> None:
        lower, cow = await seeded()
        await cow.write("/a.txt", "alpha changed\n")
        await cow.delete("/d/y.txt")
        await cow.rename("/e", "/f")
        copy = vfs.temp_fs(dict(SEED))
        await cow.apply(target=copy)
        assert await tree_state(copy) == await tree_state(cow)
        assert [c.path async for c in cow.changes()] == [
            "/a.txt",
            "/d/y.txt",
            "/f",
            "/f/keep.txt",
        ]  # applied elsewhere: this tree keeps its changes
        other = vfs.temp_fs({**SEED, "/a.txt": "someone else's\n"})
        with pytest.raises(
            CowConflictError,
            match=exactly("conflict: /a.txt differs in the target tree from the lower tree"),
        ):
            await cow.apply(target=other)
        extra = vfs.temp_fs({**SEED, "/e/extra.txt": "not in the lower\n"})
        with pytest.raises(
            CowConflictError,
            match=exactly("conflict: /e/extra.txt differs in the target tree from the lower tree"),
        ):
            await cow.apply(target=extra)  # /e would have to go, but holds more than it did
        assert (await extra.stat("/e/keep.txt")).kind == "file"
        clash = vfs.temp_fs({**SEED, "/f/keep.txt": "in the way\n"})
        with pytest.raises(
            CowConflictError,
            match=exactly("conflict: /f/keep.txt already exists in the target tree"),
        ):
            await cow.apply(target=clash)
        await lower.untouched()

    run(backend, main)


# --------------------------------------------------------------------------------------------
# Change notifications


def test_watch_reports_what_the_merged_view_shows(backend: str) -> None:
    async def main() -> None:
        lower, cow = await seeded()
        seen: list[tuple[str, str]] = []
        cow.watch(lambda change: seen.append((change.path, change.kind)))
        # A copy-up moves its directory's ctime alone (told as the directory's metadata, from
        # no one); the content change is the write's.
        await cow.write("/a.txt", "changed")
        assert seen == [("/", "metadata"), ("/a.txt", "content")]
        seen.clear()
        handle = await cow.open("/b.txt", write=True)
        await handle.write(0, b"B")
        await handle.close()
        assert seen == [("/", "metadata"), ("/b.txt", "content")]
        seen.clear()
        await cow.delete("/d/x.txt")  # a whiteout
        assert seen == [("/d/x.txt", "entry")]
        seen.clear()
        await lower.tree.write("/e/keep.txt", "changed below")  # shows through
        await lower.tree.write("/d/x.txt", "hidden below")  # whited out: not shown
        assert seen == [("/e/keep.txt", "content")]
        assert await cow.read("/e/keep.txt") == "changed below"
        seen.clear()
        await cow.rename("/d", "/d2")
        assert ("/d", "entry") in seen and ("/d2", "entry") in seen
        assert not [path for path, _ in seen if path.startswith("/.agentroot")]

    run(backend, main)


# --------------------------------------------------------------------------------------------
# A durable upper


def saved_record(upper: Path) -> CowMeta:
    """The record a durable upper holds: ``meta.json`` and the journal it names replayed."""
    text = (upper / ".agentroot-cow/meta.json").read_text()
    meta = CowMeta.loads(text)
    journal = upper / f".agentroot-cow/meta.journal.{json.loads(text)['journal']}"
    if journal.exists():
        meta.replay(journal.read_text().splitlines())
    return meta


def test_durable_upper_survives_a_restart(backend: str, tmp_path: Path) -> None:
    async def main() -> None:
        host = write_host_tree(tmp_path / "lower", SEED)
        (tmp_path / "upper").mkdir()
        lower = vfs.dir_fs(host, read_only=True)
        cow = cow_fs(lower, vfs.dir_fs(tmp_path / "upper"))
        await cow.delete("/a.txt")
        await cow.write("/d/x.txt", "changed\n")
        await cow.rename("/e", "/e2")
        before = [c async for c in cow.changes()]
        view = await tree_state(cow)
        # A crash mid-copy leaves a staged file and a temporary record behind.
        (tmp_path / "upper/.agentroot-cow/stage/99").write_text("half a copy")
        (tmp_path / "upper/.agentroot-cow/meta.json.tmp").write_text("{half")
        again = cow_fs(lower, vfs.dir_fs(tmp_path / "upper"))
        assert [c async for c in again.changes()] == before
        assert await tree_state(again) == view
        assert os.listdir(tmp_path / "upper/.agentroot-cow/stage") == []
        assert sorted(os.listdir(tmp_path / "upper")) == [".agentroot-cow", "d", "e2"]
        assert (tmp_path / "lower/a.txt").read_text() == "alpha\n"
        assert saved_record(tmp_path / "upper").hidden == {"/a.txt", "/e"}

    run(backend, main)


def test_a_copy_shows_the_lower_inode_number_an_upper_file_none(
    backend: str, tmp_path: Path
) -> None:
    """FileInfo.ino: a lower entry's host number, kept by its copy (across a rename, a link,
    a restart over the durable upper); none for what the upper made, nor for a copy of a file
    the lower had several names of; never the upper's own numbers (an open file's ``stat``
    included)."""

    async def main() -> None:
        host = write_host_tree(tmp_path / "lower", SEED)
        os.link(host / "b.txt", host / "b-too")
        (tmp_path / "upper").mkdir()
        lower = vfs.dir_fs(host, read_only=True)
        cow = cow_fs(lower, vfs.dir_fs(tmp_path / "upper"))
        number = {p: os.lstat(host / p[1:]).st_ino for p in ("/a.txt", "/d", "/d/x.txt", "/b.txt")}
        assert (await cow.lstat("/a.txt")).ino == number["/a.txt"]
        await cow.write("/a.txt", "changed\n")
        handle = await cow.open("/d/x.txt", write=True)  # a copy-up of the file and of /d
        await handle.write(0, b"X")
        assert (await handle.stat()).ino is None  # the handle cannot say: a mount keeps its own
        await handle.close()
        await cow.rename("/d/x.txt", "/moved.txt")
        await cow.link("/a.txt", "/a-again")
        await cow.write("/b.txt", "one name of two\n")
        await cow.write("/new.txt", "new\n")
        await cow.mkdir("/newdir")

        async def check(tree: vfs.PosixFileSystem) -> None:
            assert (await tree.lstat("/a.txt")).ino == number["/a.txt"]
            assert (await tree.lstat("/a-again")).ino == number["/a.txt"]
            assert (await tree.lstat("/d")).ino == number["/d"]
            assert (await tree.lstat("/moved.txt")).ino == number["/d/x.txt"]
            assert (await tree.lstat("/b.txt")).ino is None
            assert (await tree.lstat("/b-too")).ino is None  # two names, two files here
            assert (await tree.lstat("/new.txt")).ino is None
            assert (await tree.lstat("/newdir")).ino is None
            listed = {e.path: i.ino for e, i in await tree.list_info("/")}  # type: ignore[attr-defined]
            assert listed["/a.txt"] == number["/a.txt"] and listed["/new.txt"] is None

        await check(cow)
        await check(cow_fs(lower, vfs.dir_fs(tmp_path / "upper")))  # the record is durable
        await cow.delete("/moved.txt")
        await cow.write("/moved.txt", "another file\n")
        assert (await cow.lstat("/moved.txt")).ino is None

    run(backend, main)


def test_apply_to_a_host_directory(backend: str, tmp_path: Path) -> None:
    async def main() -> None:
        host = write_host_tree(tmp_path / "repo", SEED)
        os.chmod(host / "d", 0o750)
        (tmp_path / "upper").mkdir()
        cow = cow_fs(vfs.dir_fs(host), vfs.dir_fs(tmp_path / "upper"))
        await cow.write("/a.txt", "changed\n")
        await cow.rename("/d", "/renamed")
        await cow.symlink("/ln", "a.txt")
        await cow.setattr("/b.txt", mode=0o755)
        assert (host / "a.txt").read_text() == "alpha\n"
        assert (host / "d").is_dir()
        view = await tree_state(cow)
        await cow.apply()
        assert await tree_state(vfs.dir_fs(host)) == view
        assert os.stat(host / "renamed").st_mode & 0o777 == 0o750
        assert os.readlink(host / "ln") == "a.txt"
        assert os.stat(host / "b.txt").st_mode & 0o777 == 0o755
        assert sorted(os.listdir(tmp_path / "upper")) == [".agentroot-cow"]

    run(backend, main)


def test_stamp_and_meta_round_trip(backend: str) -> None:
    meta = CowMeta()
    meta.hide("/a/b")
    meta.hide("/a")  # covers the whiteout beneath it
    meta.shadow("/a", Stamp("directory", 10, 7, 0o755))
    meta.shadow("/f", Stamp("file", 1, 2, 0o644, "ab"))
    meta.shadow("/f", Stamp("file", 9, 9))  # the first state is the one kept
    meta.shadow("/g", None)
    meta.origins["/n"] = "/f"
    again = CowMeta.loads(meta.dumps())
    assert again.hidden == {"/a"}
    assert again.bases == meta.bases
    assert again.origins == {"/n": "/f"}
    assert again.hides("/a/x/y") and not again.hides("/ab")
    meta.moved("/n", "/m")
    assert meta.origins == {"/m": "/f"}
    meta.copied("/c", vfs.FileInfo("file", nlink=1, ino=77))
    meta.copied("/two-names", vfs.FileInfo("file", nlink=2, ino=78))
    meta.copied("/dir", vfs.FileInfo("directory", nlink=3, ino=79))
    meta.linked("/c", "/c2")
    assert meta.inos == {"/c": 77, "/c2": 77, "/dir": 79}
    assert CowMeta.loads(meta.dumps()).inos == meta.inos
    meta.exchanged("/c", "/dir")
    assert meta.inos == {"/c": 79, "/c2": 77, "/dir": 77}
    meta.moved("/dir", "/c2")
    meta.forget_upper("/c")
    assert meta.inos == {"/c2": 77}
    with pytest.raises(ValueError, match="known version"):
        CowMeta.loads('{"version": 99}')


# --------------------------------------------------------------------------------------------
# A tree that yields to the event loop in every call, so interleavings happen


class Slow:
    """Wraps a POSIX tree; every call checkpoints first (a remote tree's awaits)."""

    def __init__(self, tree: vfs.PosixFileSystem) -> None:
        self._tree = tree

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._tree, name)
        if name in ("list", "glob", "grep", "search"):

            async def stream(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
                await anyio.lowlevel.checkpoint()
                async for item in target(*args, **kwargs):
                    await anyio.lowlevel.checkpoint()
                    yield item

            return stream
        if name == "watch":
            return target

        async def call(*args: Any, **kwargs: Any) -> Any:
            await anyio.lowlevel.checkpoint()
            return await target(*args, **kwargs)

        return call

    def list(self, prefix: str = "/") -> AsyncIterator[vfs.DirEntry]:
        return self.__getattr__("list")(prefix)  # type: ignore[no-any-return]

    async def stat(self, path: str) -> vfs.FileInfo:
        return await self.__getattr__("stat")(path)  # type: ignore[no-any-return]

    def glob(self, pattern: str, dir: str = "/") -> AsyncIterator[vfs.DirEntry]:
        return self.__getattr__("glob")(pattern, dir)  # type: ignore[no-any-return]

    async def read(self, path: str) -> str | bytes:
        return await self.__getattr__("read")(path)  # type: ignore[no-any-return]

    def grep(self, query: vfs.GrepQuery) -> AsyncIterator[vfs.GrepResult]:
        return self.__getattr__("grep")(query)  # type: ignore[no-any-return]

    async def write(self, path: str, contents: str | bytes) -> None:
        await self.__getattr__("write")(path, contents)

    async def delete(self, path: str) -> None:
        await self.__getattr__("delete")(path)

    def search(self, query: vfs.SearchQuery) -> AsyncIterator[vfs.SearchResult]:
        return self.__getattr__("search")(query)  # type: ignore[no-any-return]

    async def lstat(self, path: str) -> vfs.FileInfo:
        return await self.__getattr__("lstat")(path)  # type: ignore[no-any-return]

    async def open(self, path: str, **options: Any) -> vfs.OpenFile:
        return await self.__getattr__("open")(path, **options)  # type: ignore[no-any-return]

    async def mkdir(self, path: str, mode: int = 0o755, **owner: Any) -> None:
        await self.__getattr__("mkdir")(path, mode, **owner)

    async def rmdir(self, path: str) -> None:
        await self.__getattr__("rmdir")(path)

    async def unlink(self, path: str) -> None:
        await self.__getattr__("unlink")(path)

    async def rename(self, src: str, dst: str, **flags: Any) -> None:
        await self.__getattr__("rename")(src, dst, **flags)

    async def setattr(self, path: str, **changes: Any) -> vfs.FileInfo:
        return await self.__getattr__("setattr")(path, **changes)  # type: ignore[no-any-return]

    async def symlink(self, path: str, target: str, **owner: Any) -> None:
        await self.__getattr__("symlink")(path, target, **owner)

    async def readlink(self, path: str) -> str:
        return await self.__getattr__("readlink")(path)  # type: ignore[no-any-return]

    def watch(self, callback: vfs._types.ChangeCallback) -> Callable[[], None]:
        return self._tree.watch(callback)  # type: ignore[attr-defined,no-any-return]


def test_hiding_a_directory_drops_exactly_the_whiteouts_beneath_it(backend: str) -> None:
    """A removed directory's whiteouts beneath it become redundant (found through the record's
    index of paths by ancestor, not a scan); a sibling's whose name merely starts alike stays."""
    meta = CowMeta()
    for path in ("/a/b/c", "/a/b/d/e", "/a/bc", "/a/b", "/x"):
        meta.hide(path, subtree=False)
    meta.hide("/a/b")
    assert sorted(meta.hidden) == ["/a/b", "/a/bc", "/x"]
    meta.hide("/a")
    assert sorted(meta.hidden) == ["/a", "/x"]
    meta.hidden.discard("/a")
    meta.hide("/")
    assert sorted(meta.hidden) == ["/"]


def test_a_directory_made_where_the_upper_had_nothing_shows_what_is_made_in_it(
    backend: str, tmp_path: Path
) -> None:
    """The cow remembers where its upper holds nothing (no upper lookup beneath); making a
    directory there, or copying a lower one up, must end that."""

    async def body() -> None:
        (tmp_path / "lower" / "old").mkdir(parents=True)
        (tmp_path / "lower" / "old" / "f").write_text("lower")
        (tmp_path / "upper").mkdir()
        tree = cow_fs(vfs.dir_fs(tmp_path / "lower"), vfs.dir_fs(tmp_path / "upper"))
        assert not (await tree.lstat("/new/f")).exists
        assert not (await tree.lstat("/new")).exists
        await tree.mkdir("/new")
        await tree.write("/new/f", "made")
        assert await tree.read("/new/f") == "made"
        assert await tree.read("/old/f") == "lower"  # the upper has no /old yet
        await tree.write("/old/g", "copied up")  # copies /old up
        assert await tree.read("/old/g") == "copied up"
        assert sorted([e.path async for e in tree.list("/old")]) == ["/old/f", "/old/g"]

    run(backend, body)
