"""``dir_fs``: confinement, the mountpoint guard, read-only refusal, POSIX operations, walks.

Every test body runs under trio and asyncio; confinement and guard tests also run with the
``openat2`` resolver and with the segment-by-segment fallback.
"""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from contextlib import aclosing, contextmanager, suppress
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import vfs
from vfs._dir import DirFileSystem
from vfs._disk import guard_mountpoint, have_openat2, release_mountpoint
from vfs._mounts import FRESH_FOR

BACKENDS = ["trio", "asyncio"]
RESOLVERS = [pytest.param(True, id="openat2"), pytest.param(False, id="manual")]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def run(backend: str, fn: Callable[[], Awaitable[None]]) -> None:
    anyio.run(fn, backend=backend)


async def collect(iterator: Any) -> list[Any]:
    async with aclosing(iterator) as items:
        return [item async for item in items]


async def listing(fs: vfs.FileSystem, path: str = "/") -> list[tuple[str, str]]:
    return [(e.path, e.kind) for e in await collect(fs.list(path))]


async def raises(cls: type[BaseException], awaitable: Awaitable[Any]) -> BaseException:
    with pytest.raises(cls) as info:
        await awaitable
    return info.value


def make_tree(root: Path, files: dict[str, str | bytes]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for rel, contents in files.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(contents, str):
            target.write_text(contents)
        else:
            target.write_bytes(contents)
    return root


def snapshot(root: Path) -> dict[str, tuple[int, int, int, bytes | str]]:
    """Everything observable about a host tree: per path, mode, size, mtime_ns, content/target."""
    seen: dict[str, tuple[int, int, int, bytes | str]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            info = os.lstat(path)
            if stat.S_ISLNK(info.st_mode):
                body: bytes | str = os.readlink(path)
            elif stat.S_ISREG(info.st_mode):
                body = Path(path).read_bytes()
            else:
                body = b""
            seen[os.path.relpath(path, root)] = (
                info.st_mode,
                info.st_size,
                info.st_mtime_ns,
                body,
            )
    return seen


@contextmanager
def guarded(path: Path) -> Iterator[None]:
    guard_mountpoint(str(path))
    try:
        yield
    finally:
        release_mountpoint(str(path))


@contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_openat2_is_available_here() -> None:
    assert have_openat2()  # the fast resolver runs on this kernel; the fallback is tested too


# --------------------------------------------------------------------------------------------
# The eight verbs


def test_verbs_speak_tree_paths(backend: str, tmp_path: Path) -> None:
    root = make_tree(
        tmp_path / "root", {"a.txt": "alpha\n", "src/b.py": "beta\n", "p.png": b"\x89PNG\0"}
    )

    async def body() -> None:
        fs = vfs.dir_fs(root)
        assert isinstance(fs, vfs.PosixFileSystem)
        assert isinstance(fs, vfs.Watchable)
        assert await listing(fs) == [("/a.txt", "file"), ("/p.png", "file"), ("/src", "directory")]
        assert await listing(fs, "/a.txt") == []
        assert await listing(fs, "/nope") == []
        assert await fs.read("/a.txt") == "alpha\n"
        assert await fs.read("src/b.py") == "beta\n"
        assert await fs.read("/p.png") == b"\x89PNG\0"
        info = await fs.stat("/a.txt")
        assert (info.kind, info.size) == ("file", 6)
        assert info.mtime_ns == os.stat(root / "a.txt").st_mtime_ns
        assert (await fs.stat("/")).kind == "directory"
        assert (await fs.stat("/missing")).kind == "missing"
        assert (await fs.stat("/a.txt/x")).kind == "missing"
        await fs.write("/new/deep/c.txt", "gamma")
        assert (root / "new/deep/c.txt").read_text() == "gamma"
        await fs.delete("/new/deep/c.txt")
        assert not (root / "new/deep/c.txt").exists()
        await fs.delete("/new/deep")  # an empty directory is deleted
        error = await raises(vfs.DirectoryNotEmptyError, fs.delete("/src"))
        assert str(error) == "directory not empty: /src"
        assert await collect(fs.search(vfs.SearchQuery("alpha"))) == []

    run(backend, body)


def test_error_strings_are_tree_paths(backend: str, tmp_path: Path) -> None:
    root = make_tree(tmp_path / "root", {"f": "x", "d/g": "y"})

    async def body() -> None:
        fs = vfs.dir_fs(root)
        cases: list[tuple[type[BaseException], Callable[[], Awaitable[Any]], str, int]] = [
            (vfs.FileNotFoundError, lambda: fs.read("/a.txt"), "not found: /a.txt", errno.ENOENT),
            (vfs.FileNotFoundError, lambda: fs.read("/f/x"), "not found: /f/x", errno.ENOENT),
            (vfs.FileNotFoundError, lambda: fs.delete("/a.txt"), "not found: /a.txt", errno.ENOENT),
            (vfs.IsADirectoryError, lambda: fs.read("/d"), "is a directory: /d", errno.EISDIR),
            (
                vfs.IsADirectoryError,
                lambda: fs.write("/d", "x"),
                "is a directory: /d",
                errno.EISDIR,
            ),
            (
                vfs.NotADirectoryError,
                lambda: fs.write("/f/x", "x"),
                "not a directory: /f/x",
                errno.ENOTDIR,
            ),
            (vfs.FileExistsError, lambda: fs.mkdir("/d"), "already exists: /d", errno.EEXIST),
            (
                vfs.NotADirectoryError,
                lambda: fs.mkdir("/f/x"),
                "not a directory: /f/x",
                errno.ENOTDIR,
            ),
            (
                vfs.DirectoryNotEmptyError,
                lambda: fs.rmdir("/d"),
                "directory not empty: /d",
                errno.ENOTEMPTY,
            ),
            (vfs.NotADirectoryError, lambda: fs.rmdir("/f"), "not a directory: /f", errno.ENOTDIR),
            (vfs.IsADirectoryError, lambda: fs.unlink("/d"), "is a directory: /d", errno.EISDIR),
            (vfs.FileNotFoundError, lambda: fs.unlink("/nope"), "not found: /nope", errno.ENOENT),
            (vfs.PathError, lambda: fs.readlink("/f"), "invalid argument: /f", errno.EINVAL),
            (vfs.FileNotFoundError, lambda: fs.open("/nope"), "not found: /nope", errno.ENOENT),
            (vfs.IsADirectoryError, lambda: fs.open("/d"), "is a directory: /d", errno.EISDIR),
        ]
        for cls, call, message, code in cases:
            error = await raises(cls, call())
            assert str(error) == message
            assert isinstance(error, vfs.PathError) and error.errno == code
            assert str(tmp_path) not in str(error)

    run(backend, body)


def test_write_failure_is_write_failed(backend: str, tmp_path: Path) -> None:
    root = make_tree(tmp_path / "root", {"sub/f": "x"})

    async def body() -> None:
        fs = vfs.dir_fs(root)
        os.chmod(root / "sub", 0o500)
        try:
            if os.geteuid() == 0:
                # root ignores permissions; a full filesystem is the write failure we can make
                os.symlink("/dev/full", root / "full")
                error = await raises(vfs.WriteFailedError, fs.write("/full", "x"))
                assert str(error) == "write failed: /full"
            else:
                error = await raises(vfs.PermissionDeniedError, fs.write("/sub/g", "x"))
                assert str(error) == "permission denied: /sub/g"
        finally:
            os.chmod(root / "sub", 0o755)

    run(backend, body)


def test_write_is_atomic_and_keeps_mode(backend: str, tmp_path: Path) -> None:
    root = make_tree(tmp_path / "root", {"a.txt": "old", "linked": "shared"})
    os.chmod(root / "a.txt", 0o640)
    os.link(root / "linked", tmp_path / "other-name")
    os.symlink("a.txt", root / "via-link")

    async def body() -> None:
        fs = vfs.dir_fs(root)
        before = os.stat(root / "a.txt").st_ino
        await fs.write("/a.txt", "new")
        after = os.stat(root / "a.txt")
        assert (root / "a.txt").read_text() == "new"
        assert stat.S_IMODE(after.st_mode) == 0o640
        assert after.st_ino != before  # replaced by rename, never torn
        # A hard link is written in place, so the other name sees the new bytes.
        await fs.write("/linked", "changed")
        assert (tmp_path / "other-name").read_text() == "changed"
        # A symlink is written through; the link stays a link.
        await fs.write("/via-link", "through")
        assert (root / "via-link").is_symlink()
        assert (root / "a.txt").read_text() == "through"
        assert sorted(os.listdir(root)) == ["a.txt", "linked", "via-link"]  # no temp left

    run(backend, body)


def test_watch_reports_changes(backend: str, tmp_path: Path) -> None:
    root = make_tree(tmp_path / "root", {"a.txt": "a"})

    async def body() -> None:
        fs = vfs.dir_fs(root)
        seen: list[tuple[str, str]] = []
        unsubscribe = fs.watch(lambda change: seen.append((change.path, change.kind)))
        await fs.write("/a.txt", "b")
        await fs.write("/n/m/x.txt", "c")
        await fs.write("/n/m/y.txt", "c")
        await fs.mkdir("/d")
        await fs.rename("/d", "/e")
        await fs.setattr("/a.txt", mode=0o600)
        handle = await fs.open("/a.txt", write=True)
        await handle.write(0, b"z")
        await handle.close()
        await fs.delete("/a.txt")
        unsubscribe()
        await fs.write("/quiet.txt", "q")
        assert seen == [
            ("/a.txt", "content"),
            ("/n", "entry"),
            ("/n/m/y.txt", "entry"),
            ("/d", "entry"),
            ("/d", "entry"),
            ("/e", "entry"),
            ("/a.txt", "metadata"),
            ("/a.txt", "content"),
            ("/a.txt", "entry"),
        ]

    run(backend, body)


# --------------------------------------------------------------------------------------------
# Confinement


@pytest.mark.parametrize("use_openat2", RESOLVERS)
def test_confinement(backend: str, tmp_path: Path, use_openat2: bool) -> None:
    outside = make_tree(tmp_path / "outside", {"secret.txt": "SECRET", "dir/inner.txt": "SECRET"})
    root = make_tree(
        tmp_path / "root",
        {"inside.txt": "in", "sub/file.txt": "sub", "secret.txt": "decoy"},
    )
    os.symlink(str(outside / "secret.txt"), root / "abs-file")  # absolute: means the tree's path
    os.symlink("../outside/secret.txt", root / "rel-file")  # climbs: stops at the tree root
    os.symlink(str(outside / "dir"), root / "abs-dir")
    os.symlink("../outside/dir", root / "rel-dir")
    os.symlink("../../../..", root / "up")
    os.symlink("/secret.txt", root / "chroot-abs")  # the tree's /secret.txt
    os.symlink("sub/file.txt", root / "good")
    os.symlink("sub", root / "good-dir")
    os.symlink("loop", root / "loop")
    before = snapshot(outside)

    async def body() -> None:
        fs = DirFileSystem(root, use_openat2=use_openat2)
        for path in ["/abs-file", "/rel-file", "/abs-dir/inner.txt", "/rel-dir/inner.txt"]:
            assert (await fs.stat(path)).kind == "missing", path
            error = await raises(vfs.FileNotFoundError, fs.read(path))
            assert str(error) == f"not found: {path}"
        for path in [
            "/../outside/secret.txt",
            "/../../outside/dir/inner.txt",
            "/up/outside/secret.txt",
        ]:
            await raises(vfs.FileNotFoundError, fs.read(path))
        assert await fs.read("/up/secret.txt") == "decoy"  # `..` stops at the root
        assert await fs.read("/../secret.txt") == "decoy"
        assert await fs.read("/chroot-abs") == "decoy"
        assert await fs.read("/good") == "sub"
        assert await fs.read("/good-dir/file.txt") == "sub"
        assert (await fs.stat("/good-dir")).kind == "directory"
        assert await listing(fs, "/good-dir") == [("/good-dir/file.txt", "file")]
        assert await listing(fs, "/abs-dir") == []
        assert await listing(fs, "/rel-dir") == []
        assert (await fs.lstat("/abs-dir")).kind == "symlink"
        assert await fs.readlink("/abs-dir") == str(outside / "dir")
        assert (await fs.stat("/loop")).kind == "missing"
        error = await raises(vfs.PathError, fs.read("/loop"))
        assert (
            error.errno == errno.ELOOP and str(error) == "too many levels of symbolic links: /loop"
        )
        # Walks list symlinks as symlinks and never descend them.
        globbed = [(e.path, e.kind) for e in await collect(fs.glob("**/*"))]
        assert ("/abs-dir", "symlink") in globbed
        assert not [p for p, _ in globbed if p.startswith(("/abs-dir/", "/rel-dir/", "/good-dir/"))]
        hits = await collect(fs.grep(vfs.GrepQuery("SECRET")))
        assert hits == []
        assert await collect(fs.grep(vfs.GrepQuery("SECRET", path="/abs-dir"))) == []
        # Writes through escaping links stay inside (or fail); never touch the outside.
        for path in ["/abs-dir/new.txt", "/rel-dir/new.txt", "/abs-file", "/rel-file"]:
            with suppress(vfs.PathError):
                await fs.write(path, "pwned")
        for path in ["/abs-dir/x", "/rel-dir/x", "/abs-file", "/up/outside"]:
            with suppress(vfs.PathError):
                await fs.mkdir(path)
            with suppress(vfs.PathError):
                await fs.symlink(path, "/")
            with suppress(vfs.PathError):
                await fs.setattr(path, mode=0o777)
        await fs.unlink("/abs-file")  # removes the link, not its target
        await raises(vfs.PathError, fs.rename("/rel-dir/inner.txt", "/stolen.txt"))
        await fs.rename("/rel-dir", "/renamed-link")  # renames the link itself
        assert (root / "renamed-link").is_symlink()
        assert snapshot(outside) == before

    run(backend, body)


@pytest.mark.parametrize("use_openat2", RESOLVERS)
def test_symlink_swapped_in_after_a_check(backend: str, tmp_path: Path, use_openat2: bool) -> None:
    outside = make_tree(tmp_path / "outside", {"f.txt": "SECRET"})
    root = make_tree(tmp_path / "root", {"d/f.txt": "mine"})
    before = snapshot(outside)

    async def body() -> None:
        fs = DirFileSystem(root, use_openat2=use_openat2)
        assert (await fs.stat("/d/f.txt")).kind == "file"
        assert await fs.read("/d/f.txt") == "mine"
        handle = await fs.open("/d/f.txt")
        (root / "d/f.txt").unlink()
        (root / "d").rmdir()
        os.symlink(str(outside), root / "d")  # the directory became a link to the outside
        assert (await fs.stat("/d/f.txt")).kind == "missing"
        await raises(vfs.FileNotFoundError, fs.read("/d/f.txt"))
        with pytest.raises(vfs.PathError):
            await fs.write("/d/f.txt", "pwned")
        with pytest.raises(vfs.PathError):
            await fs.open("/d/f.txt", create=True, truncate=True)
        assert await handle.read(0, 100) == b"mine"  # the open file is the one it opened
        await handle.close()
        # And the other way: a link swapped for a link to a file outside.
        os.symlink(str(outside / "f.txt"), root / "g")
        await raises(vfs.FileNotFoundError, fs.read("/g"))
        assert snapshot(outside) == before

    run(backend, body)


# --------------------------------------------------------------------------------------------
# The cache of parent directories (lookups only)


@pytest.mark.parametrize("use_openat2", RESOLVERS)
def test_cached_directories_follow_changes_made_through_the_tree(
    backend: str, tmp_path: Path, use_openat2: bool
) -> None:
    root = make_tree(tmp_path / "root", {"a/b/f": "f", "x/y/z": "z", "h/f": "old"})

    async def body() -> None:
        fs = DirFileSystem(root, use_openat2=use_openat2)
        assert (await fs.lstat("/a/b/f")).kind == "file"  # /a/b is now cached
        await fs.rename("/a", "/c")
        assert (await fs.lstat("/a/b/f")).kind == "missing"
        assert (await fs.stat("/a/b/f")).kind == "missing"
        assert (await fs.lstat("/c/b/f")).kind == "file"
        await fs.rename("/c", "/a")
        assert (await fs.lstat("/a/b/f")).kind == "file"
        assert (await fs.lstat("/x/y/z")).kind == "file"
        await fs.unlink("/x/y/z")
        await fs.rmdir("/x/y")
        await fs.mkdir("/x/y")
        await fs.symlink("/x/y/z", "elsewhere")
        assert (await fs.lstat("/x/y/z")).kind == "symlink"
        assert await fs.readlink("/x/y/z") == "elsewhere"
        # Removed on the host, then made again through the tree: the new directory is seen.
        assert (await fs.lstat("/h/f")).kind == "file"
        (root / "h" / "f").unlink()
        (root / "h").rmdir()
        await fs.write("/h/g", "new")
        assert (await fs.lstat("/h/g")).kind == "file"
        (root / "h" / "g").unlink()
        (root / "h").rmdir()
        await fs.mkdir("/h")
        await fs.write("/h/k", "new")
        assert (await fs.lstat("/h/k")).kind == "file"

    run(backend, body)


def test_a_directory_moved_out_on_the_host_is_never_read_or_changed_through(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    root = make_tree(tmp_path / "root", {"d/f.txt": "mine", "e/f.txt": "mine"})

    async def body() -> None:
        fs = DirFileSystem(root)
        assert (await fs.lstat("/d/f.txt")).kind == "file"  # /d is now cached
        (root / "d").rename(outside / "d")  # behind the tree's back
        before = snapshot(outside)
        # Contents and every change resolve afresh: nothing reaches the moved directory.
        await raises(vfs.FileNotFoundError, fs.read("/d/f.txt"))
        await raises(vfs.FileNotFoundError, fs.open("/d/f.txt"))
        await raises(vfs.FileNotFoundError, fs.unlink("/d/f.txt"))
        await raises(vfs.FileNotFoundError, fs.setattr("/d/f.txt", mode=0o600))
        await raises(vfs.FileNotFoundError, fs.mkdir("/d/sub"))
        await fs.write("/d/new.txt", "here")  # creates a new /d inside the root
        assert (root / "d" / "new.txt").read_text() == "here"
        assert snapshot(outside) == before
        # Lookups may use a cached directory only until it expires.
        monkeypatch.setattr("vfs._dir._DIR_CACHE_TTL", 0.0)
        assert (await fs.lstat("/e/f.txt")).kind == "file"
        (root / "e").rename(outside / "e")
        assert (await fs.lstat("/e/f.txt")).kind == "missing"
        assert (await fs.stat("/e/f.txt")).kind == "missing"

    run(backend, body)


# --------------------------------------------------------------------------------------------
# The mountpoint guard


@pytest.mark.parametrize("use_openat2", RESOLVERS)
def test_guarded_mountpoint_is_hidden(backend: str, tmp_path: Path, use_openat2: bool) -> None:
    root = make_tree(tmp_path / "root", {"a.txt": "a", "mnt/x.txt": "hidden needle", "m.txt": "m"})
    os.symlink("mnt", root / "alias")
    os.symlink(".", root / "self")
    before = snapshot(root)

    async def body() -> None:
        fs = DirFileSystem(root, use_openat2=use_openat2)
        assert ("/mnt", "directory") in await listing(fs)
        with guarded(root / "mnt"):
            assert await listing(fs) == [
                ("/a.txt", "file"),
                ("/alias", "symlink"),
                ("/m.txt", "file"),
                ("/self", "symlink"),
            ]
            assert ("/self/mnt", "directory") not in await listing(fs, "/self")
            for path in ["/mnt", "/mnt/x.txt", "/alias/x.txt", "/self/mnt/x.txt", "/alias"]:
                assert (await fs.stat(path)).kind == "missing", path
                assert await listing(fs, path) == [], path
            for path in ["/mnt/x.txt", "/alias/x.txt", "/self/mnt/x.txt"]:
                await raises(vfs.FileNotFoundError, fs.read(path))
                await raises(vfs.FileNotFoundError, fs.open(path))
                error = await raises(vfs.PermissionDeniedError, fs.write(path, "w"))
                assert str(error) == f"permission denied: {path}"
                await raises(vfs.PermissionDeniedError, fs.delete(path))
            assert (await fs.lstat("/mnt")).kind == "missing"
            assert (await fs.lstat("/alias")).kind == "symlink"  # the link itself is no secret
            await raises(vfs.PermissionDeniedError, fs.mkdir("/mnt/d"))
            await raises(vfs.PermissionDeniedError, fs.rmdir("/mnt"))
            await raises(vfs.PermissionDeniedError, fs.rename("/mnt", "/elsewhere"))
            await raises(vfs.PermissionDeniedError, fs.rename("/a.txt", "/mnt/a.txt"))
            await raises(vfs.PermissionDeniedError, fs.setattr("/mnt", mode=0o700))
            await raises(vfs.PermissionDeniedError, fs.symlink("/mnt/l", "x"))
            assert [e.path for e in await collect(fs.glob("**/*"))] == [
                "/a.txt",
                "/alias",
                "/m.txt",
                "/self",
            ]
            assert await collect(fs.grep(vfs.GrepQuery("needle"))) == []
            assert await collect(fs.grep(vfs.GrepQuery("needle", path="/mnt"))) == []
            assert await fs.read("/self/a.txt") == "a"  # other paths through links still work
            with pytest.raises(vfs.PermissionDeniedError):
                vfs.dir_fs(root / "mnt")
            with pytest.raises(vfs.PermissionDeniedError):
                vfs.dir_fs(root / "alias")
        assert await fs.read("/alias/x.txt") == "hidden needle"
        assert snapshot(root) == before

    run(backend, body)


def test_guard_nests_and_releases(tmp_path: Path) -> None:
    from vfs._disk import guarded_mountpoints

    (tmp_path / "m").mkdir()
    guard_mountpoint(str(tmp_path / "m"))
    guard_mountpoint(str(tmp_path / "m"))
    release_mountpoint(str(tmp_path / "m"))
    assert [m.path for m in guarded_mountpoints()] == [str(tmp_path / "m")]
    release_mountpoint(str(tmp_path / "m"))
    assert guarded_mountpoints() == ()
    with pytest.raises(vfs.NotADirectoryError):
        (tmp_path / "f").write_text("x")
        guard_mountpoint(str(tmp_path / "f"))


# --------------------------------------------------------------------------------------------
# Mounts below the root (real tmpfs mounts: root only)


@contextmanager
def tmpfs_at(path: Path, files: dict[str, str] | None = None) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(path)], check=True)
    try:
        make_tree(path, files or {})
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)


@contextmanager
def bound_at(source: Path, target: Path) -> Iterator[Path]:
    """``source`` bind-mounted on ``target`` (a file on a file works too)."""
    subprocess.run(["mount", "--bind", str(source), str(target)], check=True)
    try:
        yield target
    finally:
        subprocess.run(["umount", "-l", str(target)], check=True)


async def settle() -> None:
    """Past the mount table's snapshot age: a mount made or removed has been noticed."""
    await anyio.sleep(2 * FRESH_FOR)


@pytest.mark.mount
@pytest.mark.parametrize("use_openat2", RESOLVERS)
def test_mounts_below_the_root_are_hidden_unless_crossing_is_asked(
    backend: str, tmp_path: Path, use_openat2: bool
) -> None:
    root = make_tree(
        tmp_path / "root",
        {"a.txt": "a", "d/m/covered.txt": "covered", "e/.keep": "", "e/bound.txt": "covered"},
    )
    outside = make_tree(tmp_path / "outside", {"file.txt": "needle in a bound file"})
    os.symlink("d/m", root / "alias")
    os.symlink("/d", root / "d-link")  # absolute: the tree's /d
    before = snapshot(root)

    async def body() -> None:
        fs = DirFileSystem(root, use_openat2=use_openat2)
        crossing = DirFileSystem(root, cross_mounts=True, use_openat2=use_openat2)
        with (
            tmpfs_at(root / "d" / "m", {"x.txt": "needle inside", "sub/y.txt": "y"}) as inside,
            tmpfs_at(inside / "sub" / "deeper", {"z.txt": "z"}),
            bound_at(outside / "file.txt", root / "e" / "bound.txt"),
        ):
            await settle()
            assert await listing(fs, "/d") == []
            assert ("/d/m", "directory") not in await listing(fs, "/d-link")
            for path in [
                "/d/m",
                "/d/m/x.txt",
                "/alias/x.txt",
                "/d-link/m/x.txt",
                "/d/m/sub/deeper",
                "/e/bound.txt",
            ]:
                assert (await fs.stat(path)).kind == "missing", path
                assert (await fs.lstat(path)).kind == "missing", path
                assert await listing(fs, path) == [], path
            assert [entry.path for entry, _ in await fs.list_info("/d")] == []
            assert await listing(fs, "/e") == [("/e/.keep", "file")]
            assert [entry.path for entry, _ in await fs.list_info("/e")] == ["/e/.keep"]
            await raises(vfs.FileNotFoundError, fs.read("/e/bound.txt"))
            await raises(vfs.PermissionDeniedError, fs.write("/e/bound.txt", "w"))
            await raises(vfs.FileNotFoundError, fs.read("/d/m/x.txt"))
            await raises(vfs.FileNotFoundError, fs.open("/alias/x.txt"))
            error = await raises(vfs.PermissionDeniedError, fs.write("/d/m/new.txt", "w"))
            assert str(error) == "permission denied: /d/m/new.txt"
            await raises(vfs.PermissionDeniedError, fs.mkdir("/d/m/new"))
            await raises(vfs.PermissionDeniedError, fs.rmdir("/d/m"))
            await raises(vfs.PermissionDeniedError, fs.rename("/d/m", "/elsewhere"))
            await raises(vfs.PermissionDeniedError, fs.rename("/a.txt", "/d/m/a.txt"))
            await raises(vfs.PermissionDeniedError, fs.setattr("/d/m", mode=0o700))
            await raises(vfs.PermissionDeniedError, fs.delete("/d/m/x.txt"))
            assert [e.path for e in await collect(fs.glob("**/*"))] == [
                "/a.txt",
                "/alias",
                "/d",
                "/d-link",
                "/e",
                "/e/.keep",
            ]
            assert await collect(fs.grep(vfs.GrepQuery("needle"))) == []
            assert await collect(fs.grep(vfs.GrepQuery("needle", path="/d/m"))) == []
            assert (await fs.lstat("/alias")).kind == "symlink"  # the link itself is no secret

            # Crossing asked for: the mounts are part of the tree.
            assert await crossing.read("/alias/x.txt") == "needle inside"
            assert await crossing.read("/e/bound.txt") == "needle in a bound file"
            assert await crossing.read("/d/m/sub/deeper/z.txt") == "z"
            assert [hit.path for hit in await collect(crossing.grep(vfs.GrepQuery("needle")))] == [
                "/d/m/x.txt",
                "/e/bound.txt",
            ]
            await crossing.write("/d/m/new.txt", "through the mount")
            assert (inside / "new.txt").read_text() == "through the mount"
        await settle()
        # Unmounted: the covered directory is an ordinary directory of the tree again.
        assert await fs.read("/d/m/covered.txt") == "covered"
        assert snapshot(root) == before

    run(backend, body)


@pytest.mark.mount
@pytest.mark.parametrize("use_openat2", RESOLVERS)
def test_a_mount_made_after_the_tree_is_hidden_too(
    backend: str, tmp_path: Path, use_openat2: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = make_tree(tmp_path / "root", {"a.txt": "a", "m/.keep": "", "n/.keep": "", "g/.keep": ""})

    async def body() -> None:
        fs = DirFileSystem(root, use_openat2=use_openat2)
        assert await fs.read("/a.txt") == "a"  # the tree has looked at the mount table
        with tmpfs_at(root / "m", {"x.txt": "x"}):
            await settle()
            assert (await fs.lstat("/m")).kind == "missing"
            assert [path for path, _ in await listing(fs)] == ["/a.txt", "/g", "/n"]
            await raises(vfs.FileNotFoundError, fs.read("/m/x.txt"))
        await settle()
        assert await fs.read("/m/.keep") == ""

        # Before the table lists a new mount: a tree that hides anything at all (here only a
        # guarded directory) resolves without crossing any mount, so a path through the new
        # mount is refused at once.
        with guarded(root / "g"):
            assert (await fs.stat("/g")).kind == "missing"
            monkeypatch.setattr("vfs._dir.mountpoints", lambda: fs._mounts_snapshot)
            with tmpfs_at(root / "n", {"y.txt": "y"}):
                if use_openat2:  # (the segment walk has only the table to go by)
                    await raises(vfs.FileNotFoundError, fs.read("/n/y.txt"))
                monkeypatch.undo()
                await settle()
                assert [path for path, _ in await listing(fs)] == ["/a.txt", "/m"]
        await settle()
        assert [path for path, _ in await listing(fs)] == ["/a.txt", "/g", "/m", "/n"]

    run(backend, body)


# --------------------------------------------------------------------------------------------
# Read-only


def test_read_only_refuses_every_mutation(backend: str, tmp_path: Path) -> None:
    root = make_tree(tmp_path / "root", {"a.txt": "a", "d/b.txt": "b", "e/.keep": ""})
    os.symlink("a.txt", root / "link")
    before = snapshot(root)

    async def body() -> None:
        fs = vfs.dir_fs(root, read_only=True)
        assert await fs.read("/a.txt") == "a"
        mutations: list[Callable[[], Awaitable[Any]]] = [
            lambda: fs.write("/a.txt", "x"),
            lambda: fs.delete("/a.txt"),
            lambda: fs.open("/a.txt", truncate=True),
            lambda: fs.open("/a.txt", create=True),
            lambda: fs.open("/a.txt", create=True, exclusive=True),
            lambda: fs.mkdir("/a.txt"),
            lambda: fs.rmdir("/a.txt"),
            lambda: fs.unlink("/a.txt"),
            lambda: fs.rename("/a.txt", "/b"),
            lambda: fs.setattr("/a.txt", mode=0o600),
            lambda: fs.setattr("/a.txt", size=0),
            lambda: fs.setattr("/a.txt", mtime_ns=0),
            lambda: fs.symlink("/a.txt", "x"),
        ]
        for call in mutations:
            error = await raises(vfs.ReadOnlyMountError, call())
            assert str(error) == "read-only mount: /a.txt"
            assert error.errno == errno.EROFS
        handle = await fs.open("/a.txt")
        assert await handle.read(0, 10) == b"a"
        error = await raises(vfs.ReadOnlyMountError, handle.write(0, b"x"))
        assert str(error) == "read-only mount: /a.txt"
        await raises(vfs.ReadOnlyMountError, handle.truncate(0))
        await handle.close()
        assert snapshot(root) == before

    run(backend, body)


# --------------------------------------------------------------------------------------------
# POSIX operations


def test_rename_flags(backend: str, tmp_path: Path) -> None:
    root = make_tree(tmp_path / "root", {"a": "A", "b": "B", "d/x": "X"})

    async def body() -> None:
        fs = vfs.dir_fs(root)
        error = await raises(vfs.FileExistsError, fs.rename("/a", "/b", noreplace=True))
        assert str(error) == "already exists: /b"
        assert (root / "a").read_text() == "A" and (root / "b").read_text() == "B"
        await fs.rename("/a", "/b", exchange=True)
        assert (root / "a").read_text() == "B" and (root / "b").read_text() == "A"
        await fs.rename("/a", "/d", exchange=True)  # a file and a directory swap too
        assert (root / "a/x").read_text() == "X" and (root / "d").read_text() == "B"
        await raises(vfs.FileNotFoundError, fs.rename("/b", "/nope", exchange=True))
        await fs.rename("/b", "/c", noreplace=True)
        assert (root / "c").read_text() == "A" and not (root / "b").exists()
        await fs.rename("/c", "/d")  # plain rename replaces
        assert (root / "d").read_text() == "A"
        error = await raises(vfs.PathError, fs.rename("/d", "/e", noreplace=True, exchange=True))
        assert error.errno == errno.EINVAL
        error = await raises(vfs.IsADirectoryError, fs.rename("/d", "/a"))
        assert str(error) == "is a directory: /a"
        (root / "e").mkdir()
        error = await raises(vfs.DirectoryNotEmptyError, fs.rename("/e", "/a"))
        assert str(error) == "directory not empty: /a"
        error = await raises(vfs.FileNotFoundError, fs.rename("/nope", "/x"))
        assert str(error) == "not found: /nope"

    run(backend, body)


def test_setattr_times_are_nanosecond_exact(backend: str, tmp_path: Path) -> None:
    root = make_tree(tmp_path / "root", {"f": "x"})
    os.symlink("f", root / "l")

    async def body() -> None:
        fs = vfs.dir_fs(root)
        stamp = 1_234_567_890_123_456_789
        info = await fs.setattr("/f", atime_ns=stamp - 7, mtime_ns=stamp)
        assert (info.atime_ns, info.mtime_ns) == (stamp - 7, stamp)
        assert os.stat(root / "f").st_mtime_ns == stamp
        info = await fs.setattr("/f", mtime_ns=stamp + 1)  # atime is kept
        assert (info.atime_ns, info.mtime_ns) == (stamp - 7, stamp + 1)
        assert (await fs.stat("/f")).mtime_ns == stamp + 1
        # A symlink's own times change, never its target's.
        info = await fs.setattr("/l", mtime_ns=5_000_000_001)
        assert info.kind == "symlink" and info.mtime_ns == 5_000_000_001
        assert os.stat(root / "f").st_mtime_ns == stamp + 1
        info = await fs.setattr("/f", size=3)
        assert info.size == 3 and (root / "f").read_bytes() == b"x\0\0"

    run(backend, body)


def test_create_mode_is_exact_whatever_the_umask(backend: str, tmp_path: Path) -> None:
    root = make_tree(tmp_path / "root", {})

    async def body() -> None:
        fs = vfs.dir_fs(root)
        with umask(0o077):
            handle = await fs.open("/f", create=True, mode=0o664)
            await handle.close()
            handle = await fs.open("/g", create=True, exclusive=True, mode=0o4755)
            await handle.close()
            await fs.mkdir("/d", 0o775)
            await fs.mkdir("/sticky", 0o1777)
        assert stat.S_IMODE(os.stat(root / "f").st_mode) == 0o664
        assert stat.S_IMODE(os.stat(root / "g").st_mode) == 0o4755
        assert stat.S_IMODE(os.stat(root / "d").st_mode) == 0o775
        assert stat.S_IMODE(os.stat(root / "sticky").st_mode) == 0o1777
        assert (await fs.lstat("/g")).mode == 0o4755
        info = await fs.setattr("/f", mode=0o600)
        assert info.mode == 0o600
        # An existing file keeps its mode when opened with create.
        handle = await fs.open("/f", create=True, mode=0o777)
        await handle.close()
        assert stat.S_IMODE(os.stat(root / "f").st_mode) == 0o600
        await raises(vfs.FileExistsError, fs.open("/f", create=True, exclusive=True))
        if os.geteuid() == 0:
            handle = await fs.open("/owned", create=True, uid=1234, gid=4321)
            await handle.close()
            await fs.mkdir("/owned-dir", uid=1234, gid=4321)
            await fs.symlink("/owned-link", "f", uid=1234, gid=4321)
            for name in ("owned", "owned-dir", "owned-link"):
                info = os.lstat(root / name)
                assert (info.st_uid, info.st_gid) == (1234, 4321), name
            after = await fs.setattr("/owned", uid=0, gid=0)
            assert (after.uid, after.gid) == (0, 0)

    run(backend, body)


def test_lstat_has_every_field(backend: str, tmp_path: Path) -> None:
    root = make_tree(tmp_path / "root", {"f": "hello"})
    os.symlink("f", root / "l")

    async def body() -> None:
        fs = vfs.dir_fs(root)
        real = os.lstat(root / "f")
        info = await fs.lstat("/f")
        assert info == vfs.FileInfo(
            "file",
            size=5,
            mtime=real.st_mtime,
            mode=stat.S_IMODE(real.st_mode),
            mtime_ns=real.st_mtime_ns,
            uid=real.st_uid,
            gid=real.st_gid,
            atime_ns=real.st_atime_ns,
            ctime_ns=real.st_ctime_ns,
            nlink=1,
            file_id=real.st_dev << 64 | real.st_ino,
            blocks=real.st_blocks,
            ino=real.st_ino,
        )
        assert (await fs.lstat("/")).ino == os.lstat(root).st_ino
        handle = await fs.open("/f")
        assert (await handle.stat()).ino == real.st_ino  # an open file says the same
        await handle.close()
        link = await fs.lstat("/l")
        assert (link.kind, link.size) == ("symlink", 1)
        assert (await fs.stat("/l")).kind == "file"
        assert await fs.readlink("/l") == "f"
        assert (await fs.lstat("/")).kind == "directory"
        assert (await fs.lstat("/nope")).kind == "missing"
        assert (await fs.lstat("/f/x")).kind == "missing"

    run(backend, body)


def test_open_file_byte_ranges(backend: str, tmp_path: Path) -> None:
    root = make_tree(tmp_path / "root", {"f": "0123456789"})

    async def body() -> None:
        fs = vfs.dir_fs(root)
        handle = await fs.open("/f", write=True)
        assert isinstance(handle, vfs.OpenFile)
        assert await handle.read(2, 3) == b"234"
        assert await handle.write(12, b"ab") == 2  # past the end: the gap reads as zeros
        assert (root / "f").read_bytes() == b"0123456789\0\0ab"
        await handle.truncate(4)
        await handle.flush()
        await handle.fsync()
        await handle.fsync(datasync=True)
        assert await handle.read(0, 100) == b"0123"
        await fs.unlink("/f")
        assert await handle.read(0, 100) == b"0123"  # still the file it opened
        await handle.close()
        await handle.close()  # idempotent
        error = await raises(vfs.PathError, handle.read(0, 1))
        assert error.errno == errno.EBADF
        await raises(vfs.FileNotFoundError, fs.open("/n/new", create=True))  # no parents made
        handle = await fs.open("/g", create=True, truncate=True)
        await handle.write(0, b"data")
        await handle.close()
        handle = await fs.open("/g", truncate=True)
        assert await handle.read(0, 10) == b""
        await handle.close()

    run(backend, body)


# --------------------------------------------------------------------------------------------
# Walks: exact path order, pruning, early stop


ORDER_FILES = {
    "x/f": "needle 1\nneedle 2\n",
    "x-y": "needle\n",
    "x.z": "needle\n",
    "x0": "needle\n",
    "x/n/deep": "needle\n",
    "a b": "needle\n",
    "bin": b"needle\0binary",
    "img.png": "needle\n",
}


def test_walk_order_and_early_stop(backend: str, tmp_path: Path) -> None:
    root = make_tree(tmp_path / "root", ORDER_FILES)

    async def body() -> None:
        fs = vfs.dir_fs(root)
        globbed = [e.path for e in await collect(fs.glob("**/*"))]
        assert globbed == sorted(globbed)
        assert globbed == [
            "/a b",
            "/bin",
            "/img.png",
            "/x",
            "/x-y",
            "/x.z",
            "/x/f",
            "/x/n",
            "/x/n/deep",
            "/x0",
        ]
        hits = [(h.path, h.line_number) for h in await collect(fs.grep(vfs.GrepQuery("needle")))]
        assert hits == [
            ("/a b", 1),
            ("/x-y", 1),
            ("/x.z", 1),
            ("/x/f", 1),
            ("/x/f", 2),
            ("/x/n/deep", 1),
            ("/x0", 1),
        ]
        first = await collect(fs.grep(vfs.GrepQuery("needle", max_results=4)))
        assert [(h.path, h.line_number) for h in first] == hits[:4]
        assert await collect(fs.grep(vfs.GrepQuery("needle", max_results=0))) == []
        assert [h.path for h in await collect(fs.grep(vfs.GrepQuery("needle", glob="deep")))] == [
            "/x/n/deep"
        ]
        assert [h.path for h in await collect(fs.grep(vfs.GrepQuery("needle", path="/x/f")))] == [
            "/x/f",
            "/x/f",
        ]
        assert [e.path for e in await collect(fs.glob("x/*"))] == ["/x/f", "/x/n"]
        assert [e.path for e in await collect(fs.glob("*", "/x"))] == ["/x/f", "/x/n"]
        assert [e.path for e in await collect(fs.glob("n/*", "/x"))] == ["/x/n/deep"]
        assert await collect(fs.glob("nope/*")) == []
        with pytest.raises(vfs.InvalidGrepPatternError, match=r"^invalid grep pattern: \($"):
            await collect(fs.grep(vfs.GrepQuery("(")))
        fds = open_fds()
        for make in (lambda: fs.grep(vfs.GrepQuery("needle")), lambda: fs.glob("**/*")):
            async with aclosing(make()) as items:
                async for _ in items:
                    break
        assert open_fds() == fds  # an early stop closes every directory it opened

    run(backend, body)


names = st.sampled_from(["a", "a-b", "a.b", "a0", "b", "a b", "é"])


@settings(max_examples=25, deadline=None)
@given(st.lists(st.lists(names, min_size=1, max_size=3), min_size=1, max_size=8))
def test_walk_order_matches_sorted_paths(paths: list[list[str]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        files: set[str] = set()
        for segments in paths:
            rel = "/".join(segments)
            if any(rel == f or rel.startswith(f + "/") or f.startswith(rel + "/") for f in files):
                continue
            files.add(rel)
            make_tree(root, {rel: "hit\n"})

        async def body() -> None:
            fs = vfs.dir_fs(root)
            globbed = [e.path for e in await collect(fs.glob("**/*"))]
            assert globbed == sorted(globbed)
            hits = [h.path for h in await collect(fs.grep(vfs.GrepQuery("hit")))]
            assert hits == sorted("/" + f for f in files)

        run("trio", body)


SELF_MOUNT = """
import os, sys, trio
import mountd, vfs
from vfs._dir import DirFileSystem

root = sys.argv[1]

async def main() -> None:
    for use_openat2 in (True, False):
        fs = DirFileSystem(root, use_openat2=use_openat2)
        async with mountd.mounted(fs, os.path.join(root, "mnt")):
            assert [e.path async for e in fs.list("/")] == ["/alias", "/self", "/src"]
            assert [e.path async for e in fs.glob("**/*")] == ["/alias", "/self", "/src", "/src/a.txt"]
            assert [h.path async for h in fs.grep(vfs.GrepQuery("needle"))] == ["/src/a.txt"]
            for path in ("/mnt", "/mnt/src", "/alias/src/a.txt", "/self/mnt/src/a.txt"):
                assert (await fs.stat(path)).kind == "missing", path
                assert (await fs.lstat(path)).kind == "missing", path
            try:
                await fs.write("/alias/x.txt", "x")
            except vfs.PermissionDeniedError:
                pass
            else:
                raise AssertionError("wrote through its own mount")
            names = await trio.to_thread.run_sync(os.listdir, os.path.join(root, "mnt"))
            assert sorted(names) == ["alias", "self", "src"], names
    print("ok")

trio.run(main)
"""


@pytest.mark.mount
def test_never_reads_through_its_own_mount(tmp_path: Path) -> None:
    """A dir_fs served at a mountpoint inside itself, in the same process: every verb that would
    reach the mountpoint (directly, through a symlink, or through ``self -> .``) answers at once
    instead of deadlocking on a request to its own event loop."""
    import subprocess
    import sys

    root = make_tree(tmp_path / "root", {"src/a.txt": "needle\n"})
    (root / "mnt").mkdir()
    os.symlink("mnt", root / "alias")
    os.symlink(".", root / "self")
    done = subprocess.run(
        [sys.executable, "-c", SELF_MOUNT, str(root)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).parents[2],
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


link_targets = st.lists(
    st.sampled_from(["..", ".", "d", "e", "f.txt", "l0", "l1", "", "/"]), min_size=1, max_size=5
).map("/".join)
tree_paths = st.lists(
    st.sampled_from(["..", "d", "e", "f.txt", "l0", "l1", "l2", "x"]), min_size=1, max_size=5
).map(lambda parts: "/" + "/".join(parts))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["l0", "l1", "l2", "d/l0", "d/e/l1"]), link_targets), max_size=5
    ),
    st.lists(tree_paths, min_size=1, max_size=6),
)
def test_resolvers_agree_and_stay_inside(links: list[tuple[str, str]], paths: list[str]) -> None:
    """Random symlink webs (relative, absolute, climbing, looping): the openat2 resolver and the
    hand-written walk give the same answers, and neither ever reads the outside."""
    with tempfile.TemporaryDirectory() as tmp:
        outside = make_tree(Path(tmp) / "outside", {"f.txt": "SECRET", "d/f.txt": "SECRET"})
        root = make_tree(
            Path(tmp) / "root", {"f.txt": "in", "d/f.txt": "in d", "d/e/f.txt": "in e"}
        )
        os.symlink(str(outside), root / "out")
        os.symlink("../outside", root / "d" / "out")
        for where, target in links:
            if not os.path.lexists(root / where):
                os.symlink(target or ".", root / where)
        before = snapshot(outside)

        async def answer(fs: DirFileSystem, path: str) -> tuple[object, ...]:
            try:
                content: object = await fs.read(path)
            except vfs.PathError as error:
                content = error.errno
            entries = [(e.path, e.kind) for e in await collect(fs.list(path))]
            info = await fs.stat(path)
            link = await fs.lstat(path)
            return (content, entries, info.kind, info.size, link.kind)

        async def body() -> None:
            fast = DirFileSystem(root, use_openat2=True)
            slow = DirFileSystem(root, use_openat2=False)
            for path in [*paths, *(p + "/out/f.txt" for p in paths)]:
                got = await answer(fast, path)
                assert got == await answer(slow, path), path
                assert got[0] != "SECRET", path
            assert snapshot(outside) == before

        run("trio", body)


def test_fsync_stays_on_the_loop_only_for_memory_file_systems(backend: str) -> None:
    from vfs._disk import memory_backed

    types = {
        line.split()[1]: line.split()[2] for line in Path("/proc/mounts").read_text().splitlines()
    }
    fd = os.open("/dev/shm", os.O_RDONLY)
    try:
        assert memory_backed(fd) is (types.get("/dev/shm") == "tmpfs")
    finally:
        os.close(fd)
    fd = os.open("/proc", os.O_RDONLY)
    try:
        assert memory_backed(fd) is False
    finally:
        os.close(fd)

    async def body() -> None:
        with tempfile.TemporaryDirectory(dir="/dev/shm") as shm:
            fs = DirFileSystem(shm)
            handle = await fs.open("/f", write=True, create=True)
            try:
                await handle.write(0, b"data")
                await handle.fsync()
                await handle.fsync(datasync=True)
            finally:
                await handle.close()
            assert await fs.read("/f") == "data"

    run(backend, body)


def test_file_id_names_the_host_file(backend: str, tmp_path: Path) -> None:
    async def body() -> None:
        (tmp_path / "a.txt").write_text("a")
        (tmp_path / "sub").mkdir()
        fs = vfs.dir_fs(str(tmp_path))
        host = os.lstat(tmp_path / "a.txt")
        first = await fs.lstat("/a.txt")
        assert first.file_id == host.st_dev << 64 | host.st_ino
        assert first.linked_id is None  # one name
        assert (await fs.lstat("/sub")).file_id is None  # directories have no identity here
        os.link(tmp_path / "a.txt", tmp_path / "b.txt")
        linked = await fs.lstat("/b.txt")
        assert linked.file_id == linked.linked_id == first.file_id
        (tmp_path / "new.txt").write_text("new")
        os.replace(tmp_path / "new.txt", tmp_path / "a.txt")
        assert (await fs.lstat("/a.txt")).file_id != first.file_id  # another file now

    run(backend, body)


def test_a_listing_reuses_what_its_caller_knows_of_unreplaced_files(
    backend: str, tmp_path: Path
) -> None:
    async def body() -> None:
        for name in ("a", "b", "c"):
            (tmp_path / name).write_text(name)
        (tmp_path / "d").mkdir()
        fs = vfs.dir_fs(str(tmp_path))
        plain = [(entry.path[1:], info) for entry, info in await fs.list_info("/")]
        assert await fs.list_info_reusing("/", {}) == plain
        before = dict(plain)
        # What the caller knows, told apart from what the host says by its size.
        known = {name: replace(info, size=99) for name, info in before.items()}
        known["gone"] = replace(before["a"], size=99)
        os.replace(tmp_path / "b", tmp_path / "c")  # c is b's file now; b is gone
        (tmp_path / "e").write_text("e")
        listed = dict(await fs.list_info_reusing("/", known))
        assert sorted(listed) == ["a", "c", "d", "e"]
        assert listed["a"] is known["a"]  # the same file: answered unexamined
        assert listed["c"].size == 1 and listed["c"].file_id == before["b"].file_id
        assert listed["d"].size == before["d"].size  # no identity: examined
        assert listed["e"].size == 1

    run(backend, body)


def test_an_open_file_says_what_its_file_is_now(backend: str, tmp_path: Path) -> None:
    async def body() -> None:
        fs = vfs.dir_fs(str(tmp_path))
        file = await fs.open("/f", write=True, create=True)
        try:
            await file.write(0, b"hello")
            os.rename(tmp_path / "f", tmp_path / "g")  # the descriptor still has the file
            assert isinstance(file, vfs.StatsOpenFile)
            info = await file.stat()
            host = os.lstat(tmp_path / "g")
            assert (info.size, info.mtime_ns, info.file_id) == (
                5,
                host.st_mtime_ns,
                host.st_dev << 64 | host.st_ino,
            )
        finally:
            await file.close()

    run(backend, body)


@pytest.mark.parametrize("use_openat2", RESOLVERS)
def test_paths_longer_than_path_max_work_segment_by_segment(
    backend: str, tmp_path: Path, use_openat2: bool
) -> None:
    """A mount hands the tree names one directory at a time, so a tree path may run past
    PATH_MAX (4,096) even though no program ever passed one that long (it chdir'd on the way).
    Every operation must work there as anywhere, never with ENAMETOOLONG."""
    segments = [f"{i:03d}" + "d" * 200 for i in range(22)]  # 204 bytes each: 4,510 in all
    deep = "/" + "/".join(segments)
    host = tmp_path / "root"
    host.mkdir()
    here = os.open(host, os.O_PATH)  # built on the host by descriptors, as PATH_MAX requires
    try:
        for name in segments:
            os.mkdir(name, dir_fd=here)
            below = os.open(name, os.O_PATH, dir_fd=here)
            os.close(here)
            here = below
    finally:
        os.close(here)
    tree = DirFileSystem(str(host), use_openat2=use_openat2)

    async def main() -> None:
        assert len(deep) > 4096
        assert (await tree.lstat(deep)).kind == "directory"
        await tree.mkdir(deep + "/sub")
        await tree.write(deep + "/sub/file.txt", "deep")
        assert await tree.read(deep + "/sub/file.txt") == "deep"
        assert [info.kind for _, info in await tree.list_info(deep + "/sub")] == ["file"]
        await tree.rename(deep + "/sub/file.txt", deep + "/moved.txt")
        assert (await tree.lstat(deep + "/moved.txt")).size == 4
        await tree.setattr(deep + "/moved.txt", mode=0o600)
        await tree.unlink(deep + "/moved.txt")
        assert not (await tree.lstat(deep + "/moved.txt")).exists
        await tree.rmdir(deep + "/sub")
        assert not (await tree.lstat(deep + "/sub")).exists

    run(backend, main)
