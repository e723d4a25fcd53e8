"""The kernel's cache of directory listings: used, and dropped exactly when a directory changes.

Listings are cached when pyfuse3 names the directory of a readdir without a handle
(``ReaddirToken.ino``, which the pyfuse3 that ``scripts/install`` builds has): opendir answers
ENOSYS, and a directory listed again costs no request at all, until a change through the mount
(the kernel drops the cache itself) or through the tree's API (the mount invalidates the
directory's pages).
"""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from pathlib import Path

import pytest
import trio

import vfs
from mountd import MountOptions, mounted
from mountd._terms import FuseFeatures

pytestmark = [pytest.mark.mount, pytest.mark.timeout(120)]


def test_the_installed_pyfuse3_can_cache_listings() -> None:
    """Fails when scripts/install left a stock pyfuse3 (mountd would list slowly, silently)."""
    assert FuseFeatures.installed().list_by_inode


def _listing(path: Path) -> list[str]:
    return sorted(os.listdir(path))


@pytest.mark.parametrize("cache", [True, False], ids=["cached", "uncached"])
def test_a_listing_is_served_from_the_cache_until_the_directory_changes(
    tmp_path: Path, cache: bool
) -> None:
    mnt = tmp_path / "mnt"
    mnt.mkdir()

    async def main() -> None:
        tree = vfs.temp_fs({f"/d/f{i}": "x" for i in range(300)})
        names = [f"f{i}" for i in range(300)]
        async with mounted(tree, mnt, MountOptions(cache_listings=cache)) as mount:
            d = mnt / "d"

            async def listing() -> list[str]:
                return await trio.to_thread.run_sync(_listing, d)

            assert await listing() == sorted(names)
            before = mount.counters.copy()
            assert await listing() == sorted(names)
            if cache:  # straight from the kernel's cache
                assert mount.counters - before in (Counter(), Counter(getattr=1))
            else:
                assert mount.counters["readdir"] > before["readdir"]
            # Changes through the mount: the kernel drops its own cache.
            await trio.to_thread.run_sync((d / "new").write_bytes, b"n")
            await trio.to_thread.run_sync(os.unlink, d / "f0")
            await trio.to_thread.run_sync(os.rename, d / "f1", d / "g1")
            expected = sorted({*names, "new", "g1"} - {"f0", "f1"})
            assert await listing() == expected
            # Changes through the API: the mount drops it, before the API call returns.
            await tree.write("/d/api", "a")
            assert await listing() == sorted([*expected, "api"])
            await tree.delete("/d/f2")
            assert "f2" not in await listing()
            await tree.write("/d/sub/deep", "nested")  # a new directory inside
            assert "sub" in await listing()
            assert await trio.to_thread.run_sync(_listing, d / "sub") == ["deep"]

    trio.run(main)


def test_a_tree_without_directory_times_is_listed_afresh(
    tmp_path: Path,
) -> None:
    """An eight-verb tree's directories have no modification time: their listings are not
    cached, and an API change is seen at once."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()

    async def main() -> None:
        tree = vfs.host_fs(vfs.InMemoryHostFiles({"/d/a.txt": "a"}, scope="s"), "s")
        async with mounted(tree, mnt) as mount:
            d = mnt / "d"
            assert await trio.to_thread.run_sync(_listing, d) == ["a.txt"]
            mtime = (await trio.to_thread.run_sync(os.stat, d)).st_mtime_ns
            before = mount.counters["readdir"]
            assert await trio.to_thread.run_sync(_listing, d) == ["a.txt"]
            # Not cached: with no time to watch, another writer's change could go unseen.
            assert mount.counters["readdir"] > before
            await tree.write("/d/b.txt", "b")
            assert await trio.to_thread.run_sync(_listing, d) == ["a.txt", "b.txt"]
            assert (await trio.to_thread.run_sync(os.stat, d)).st_mtime_ns == mtime

    trio.run(main)


@pytest.mark.parametrize("where", ["root", "subdirectory"])
def test_a_host_directory_changed_behind_the_mount_is_listed_afresh(
    tmp_path: Path, where: str
) -> None:
    """Another writer of a host directory adds and removes names: once the attribute timeout
    has passed, a listing through the mount shows them, also for the mount's root (which no
    path walk ever looks up again) and for a directory listed through a held descriptor."""
    host = tmp_path / "host"
    (host / "d").mkdir(parents=True)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    inside = host if where == "root" else host / "d"
    (inside / "old").write_text("o")
    options = MountOptions(entry_timeout=0.3, attr_timeout=0.3, negative_timeout=0.3)

    async def main() -> None:
        async with mounted(vfs.dir_fs(str(host)), mnt, options):
            seen = mnt if where == "root" else mnt / "d"
            fd = await trio.to_thread.run_sync(os.open, seen, os.O_RDONLY | os.O_DIRECTORY)
            try:
                assert "old" in await trio.to_thread.run_sync(_listing, seen)
                assert "old" in await trio.to_thread.run_sync(os.listdir, fd)
                (inside / "new").write_text("n")
                (inside / "old").unlink()
                await trio.sleep(0.8)
                for listed in (
                    await trio.to_thread.run_sync(os.listdir, fd),
                    await trio.to_thread.run_sync(_listing, seen),
                ):
                    assert "new" in listed
                    assert "old" not in listed
            finally:
                os.close(fd)

    trio.run(main)


def test_a_directory_without_a_time_in_a_cached_tree_is_listed_afresh(tmp_path: Path) -> None:
    """Once the kernel caches listings, it caches every directory's; one without a modification
    time (an eight-verb tree inside a union) could change unseen, so the mount drops its
    listing as soon as the kernel has it."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()

    async def main() -> None:
        store = vfs.host_fs(vfs.InMemoryHostFiles({"/a.txt": "a"}, scope="s"), "s")
        tree = vfs.union_fs({"/": vfs.temp_fs({"/x": "x"}), "/store": store})
        async with mounted(tree, mnt) as mount:
            assert await trio.to_thread.run_sync(_listing, mnt) == ["store", "x"]
            assert await trio.to_thread.run_sync(_listing, mnt / "store") == ["a.txt"]
            before = mount.counters["readdir"]
            with trio.fail_after(5):
                while mount.counters["readdir"] == before:
                    await trio.sleep(0.05)
                    assert await trio.to_thread.run_sync(_listing, mnt / "store") == ["a.txt"]
            before = mount.counters["readdir"]
            assert await trio.to_thread.run_sync(_listing, mnt) == ["store", "x"]
            assert mount.counters["readdir"] == before  # the root's listing stays cached

    trio.run(main)


def test_listings_racing_changes_never_skip_or_repeat_a_name_that_stayed(tmp_path: Path) -> None:
    """readdir(3): names added or removed while a directory is listed may or may not appear, but
    a name that stays is listed exactly once. Four threads list a directory of 3,000 names while
    a fifth creates and removes other names through the mount and the API does too, so the
    kernel's cache keeps being dropped and listings resume from offsets in newer snapshots."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    stable = {f"s{i:04}" for i in range(3000)}

    def list_repeatedly(d: Path, stop: list[bool], problems: list[str]) -> int:
        rounds = 0
        while not stop[0] or rounds < 3:
            with os.scandir(d) as entries:
                names = [entry.name for entry in entries]
            seen = Counter(names)
            # Only names that stayed: one removed and added again is a new entry, which
            # readdir(3) may return again.
            repeated = sorted(name for name in stable if seen[name] > 1)
            missing = sorted(stable - seen.keys())
            if repeated or missing:
                problems.append(f"repeated {repeated[:5]} missing {missing[:5]}")
            rounds += 1
        return rounds

    def churn(d: Path, stop: list[bool]) -> None:
        for i in range(400):
            (d / f"c{i % 37}").write_bytes(b"c")
            if i % 3 == 0:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(d / f"c{(i * 7) % 37}")
        stop[0] = True

    async def main() -> None:
        tree = vfs.temp_fs({f"/d/{name}": "x" for name in stable})
        async with mounted(tree, mnt):
            d = mnt / "d"
            stop = [False]
            problems: list[str] = []
            async with trio.open_nursery() as nursery:
                for _ in range(4):
                    nursery.start_soon(trio.to_thread.run_sync, list_repeatedly, d, stop, problems)
                nursery.start_soon(trio.to_thread.run_sync, churn, d, stop)
                for i in range(200):
                    await tree.write(f"/d/api{i % 13}", "a")
                    if i % 2:
                        await tree.delete(f"/d/api{i % 13}")
                    await trio.sleep(0.002)
            assert problems == []

    trio.run(main)
