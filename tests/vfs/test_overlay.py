"""overlay_fs: read-only layers of one namespace, earlier layers winning."""

from __future__ import annotations

import errno
import socket

import pytest

import vfs

from .eightverb import BACKENDS, EightVerbTree, collect, exactly, paths, run

pytestmark = pytest.mark.parametrize("backend", BACKENDS)


def test_earlier_layer_wins(backend: str) -> None:
    async def main() -> None:
        upper = vfs.temp_fs({"/a.txt": "upper", "/only-up.txt": "u"})
        lower = EightVerbTree({"/a.txt": "lower!", "/only-low.txt": "l", "/d/x": "x"})
        overlay = vfs.overlay_fs([upper, lower])
        assert await overlay.read("/a.txt") == "upper"
        assert await overlay.read("/only-low.txt") == "l"
        assert (await overlay.stat("/a.txt")).size == 5
        assert (await overlay.stat("/d")).kind == "directory"
        assert (await overlay.stat("/nope")).kind == "missing"
        with pytest.raises(vfs.FileNotFoundError, match=exactly("not found: /nope")):
            await overlay.read("/nope")
        assert await collect(overlay.list("/")) == [
            vfs.DirEntry("/a.txt", "file"),
            vfs.DirEntry("/d", "directory"),
            vfs.DirEntry("/only-low.txt", "file"),
            vfs.DirEntry("/only-up.txt", "file"),
        ]
        assert await paths(overlay.glob("**")) == [
            "/a.txt",
            "/d",
            "/d/x",
            "/only-low.txt",
            "/only-up.txt",
        ]
        with pytest.raises(ValueError, match=exactly("overlay_fs needs at least one layer")):
            vfs.overlay_fs([])

    run(backend, main)


def test_a_file_hides_a_later_directory(backend: str) -> None:
    async def main() -> None:
        upper = EightVerbTree({"/d": "a file"})
        lower = EightVerbTree({"/d/x.txt": "hidden", "/e/y.txt": "shown"})
        overlay = vfs.overlay_fs([upper, lower])
        assert await collect(overlay.list("/")) == [
            vfs.DirEntry("/d", "file"),
            vfs.DirEntry("/e", "directory"),
        ]
        assert await collect(overlay.list("/d")) == []
        assert (await overlay.stat("/d")).kind == "file"
        assert await paths(overlay.glob("**")) == ["/d", "/e", "/e/y.txt"]
        assert await paths(overlay.glob("*/*.txt")) == ["/e/y.txt"]

    run(backend, main)


def test_grep_never_reports_a_shadowed_file(backend: str) -> None:
    async def main() -> None:
        upper = EightVerbTree({"/b.txt": "nothing here", "/c.txt": "hello upper"})
        lower = EightVerbTree(
            {"/a.txt": "hello a", "/b.txt": "hello b", "/c.txt": "hello c", "/d.txt": "hello d"}
        )
        overlay = vfs.overlay_fs([upper, lower])
        hits = await collect(overlay.grep(vfs.GrepQuery("hello")))
        assert hits == [
            vfs.GrepResult("/a.txt", 1, "hello a"),
            vfs.GrepResult("/c.txt", 1, "hello upper"),
            vfs.GrepResult("/d.txt", 1, "hello d"),
        ]
        for hit in hits:
            assert hit.line in await overlay.read(hit.path)  # type: ignore[attr-defined, operator]
        capped = await collect(overlay.grep(vfs.GrepQuery("hello", max_results=2)))
        assert capped == hits[:2]
        assert (upper.grep_caps[-1], lower.grep_caps[1]) == (2, 2)  # pushed down to each layer

    run(backend, main)


def test_grep_refills_after_dropping_shadowed_hits(backend: str) -> None:
    async def main() -> None:
        upper = EightVerbTree({f"/s{i}.txt": "other" for i in range(6)})
        lower = EightVerbTree({**{f"/s{i}.txt": "match" for i in range(6)}, "/t.txt": "match"})
        overlay = vfs.overlay_fs([upper, lower])
        hits = await collect(overlay.grep(vfs.GrepQuery("match", max_results=1)))
        assert hits == [vfs.GrepResult("/t.txt", 1, "match")]
        assert lower.grep_caps[0] == 1

    run(backend, main)


def test_search_reports_only_winning_files(backend: str) -> None:
    async def main() -> None:
        upper = EightVerbTree({"/a.txt": "dog"})
        lower = EightVerbTree({"/a.txt": "cat cat cat", "/b.txt": "cat"})
        overlay = vfs.overlay_fs([upper, lower])
        results = await collect(overlay.search(vfs.SearchQuery("cat", max_results=5)))
        assert [(r.path, r.score) for r in results] == [("/b.txt", 1.0)]  # type: ignore[attr-defined]

    run(backend, main)


def test_a_failing_layer_costs_only_its_own_files(backend: str) -> None:
    async def main() -> None:
        upper = EightVerbTree({"/up.txt": "hello up"})
        lower = EightVerbTree({"/low.txt": "hello low"})
        overlay = vfs.overlay_fs([upper, lower])
        lower.failure = ConnectionError("lower is down")
        assert await overlay.read("/up.txt") == "hello up"
        assert (await overlay.stat("/up.txt")).kind == "file"
        assert (await overlay.stat("/low.txt")).kind == "missing"  # upper served: missing
        assert await paths(overlay.list("/")) == ["/up.txt"]
        assert await paths(overlay.glob("**")) == ["/up.txt"]
        hits = await collect(overlay.grep(vfs.GrepQuery("hello")))
        assert hits == [vfs.GrepResult("/up.txt", 1, "hello up")]
        with pytest.raises(ConnectionError, match=exactly("lower is down")):
            await overlay.read("/low.txt")  # the file may be there: no layer could say
        lower.failure = None
        upper.failure = RuntimeError("upper is down")
        assert await overlay.read("/low.txt") == "hello low"
        assert await paths(overlay.glob("**")) == ["/low.txt"]
        hits = await collect(overlay.grep(vfs.GrepQuery("hello")))
        assert hits == [vfs.GrepResult("/low.txt", 1, "hello low")]
        lower.failure = ConnectionError("lower is down")
        assert await collect(overlay.list("/")) == []  # list and glob never raise
        assert await collect(overlay.glob("**")) == []
        with pytest.raises(RuntimeError, match=exactly("upper is down")):
            await overlay.stat("/up.txt")  # no layer served: the first layer's error
        with pytest.raises(RuntimeError, match=exactly("upper is down")):
            await collect(overlay.grep(vfs.GrepQuery("hello")))
        with pytest.raises(RuntimeError, match=exactly("upper is down")):
            await collect(overlay.search(vfs.SearchQuery("hello")))

    run(backend, main)


def test_a_layer_failing_midway(backend: str) -> None:
    async def main() -> None:
        upper = EightVerbTree({"/a.txt": "hit", "/c.txt": "hit"})
        lower = EightVerbTree({"/b.txt": "hit", "/d.txt": "hit"})
        overlay = vfs.overlay_fs([upper, lower])
        stream = overlay.grep(vfs.GrepQuery("hit"))
        first = await anext(stream)
        assert first == vfs.GrepResult("/a.txt", 1, "hit")
        upper.failure = OSError(errno.EIO, "I/O error")
        rest = [hit async for hit in stream]
        assert all(hit.path in ("/b.txt", "/d.txt") for hit in rest)  # type: ignore[attr-defined]

    run(backend, main)


def test_path_errors_are_answers(backend: str) -> None:
    async def main() -> None:
        upper = vfs.temp_fs({"/d/x": "1"})
        lower = EightVerbTree({"/d": "a file below"})
        overlay = vfs.overlay_fs([upper, lower])
        with pytest.raises(vfs.IsADirectoryError, match=exactly("is a directory: /d")):
            await overlay.read("/d")
        stream = overlay.grep(vfs.GrepQuery("("))  # raised at the first iteration, as every tree
        with pytest.raises(vfs.InvalidGrepPatternError, match=exactly("invalid grep pattern: (")):
            await collect(stream)

    run(backend, main)


def test_read_only(backend: str) -> None:
    async def main() -> None:
        upper = vfs.temp_fs({"/a.txt": "upper"})
        lower = EightVerbTree({"/b.txt": "lower"})
        overlay = vfs.overlay_fs([upper, lower])
        for attempt in (
            overlay.write("/a.txt", "x"),
            overlay.delete("/a.txt"),
            overlay.mkdir("/a.txt"),
            overlay.rmdir("/a.txt"),
            overlay.unlink("/a.txt"),
            overlay.rename("/a.txt", "/c.txt"),
            overlay.symlink("/a.txt", "/b.txt"),
            overlay.setattr("/a.txt", mode=0o600),
            overlay.open("/a.txt", create=True),
            overlay.open("/a.txt", truncate=True),
        ):
            with pytest.raises(vfs.ReadOnlyMountError, match=exactly("read-only mount: /a.txt")):
                await attempt
        assert (await overlay.setattr("/b.txt")).kind == "file"  # nothing to change
        handle = await overlay.open("/b.txt")  # served by the winning (lower) layer
        assert await handle.read(0, 3) == b"low"
        with pytest.raises(vfs.ReadOnlyMountError, match=exactly("read-only mount: /b.txt")):
            await handle.write(0, b"x")
        with pytest.raises(vfs.ReadOnlyMountError, match=exactly("read-only mount: /b.txt")):
            await handle.truncate(0)
        await handle.flush()
        await handle.close()
        assert lower.written == []
        with pytest.raises(vfs.FileNotFoundError, match=exactly("not found: /c.txt")):
            await overlay.open("/c.txt")
        assert isinstance(overlay, vfs.PosixFileSystem)

    run(backend, main)


def test_links_from_the_winning_layer(backend: str) -> None:
    async def main() -> None:
        upper = vfs.temp_fs({"/target.txt": "t"})
        await upper.symlink("/link", "target.txt")
        lower = EightVerbTree({"/link": "a plain file below", "/plain": "p"})
        overlay = vfs.overlay_fs([upper, lower])
        assert await overlay.readlink("/link") == "target.txt"
        assert (await overlay.lstat("/link")).kind == "symlink"
        assert (await overlay.stat("/link")).kind == "file"
        with pytest.raises(vfs.PathError) as caught:
            await overlay.readlink("/plain")
        assert caught.value.errno == errno.EINVAL
        with pytest.raises(vfs.FileNotFoundError, match=exactly("not found: /none")):
            await overlay.readlink("/none")

    run(backend, main)


def test_watch_forwards_layer_changes(backend: str) -> None:
    async def main() -> None:
        upper = vfs.temp_fs()
        lower = vfs.temp_fs()
        overlay = vfs.overlay_fs([upper, EightVerbTree(), lower])
        seen: list[tuple[str, str]] = []
        unsubscribe = overlay.watch(lambda change: seen.append((change.path, change.kind)))
        await upper.write("/a", "1")
        await lower.write("/b", "2")
        assert seen == [("/a", "entry"), ("/b", "entry")]
        unsubscribe()
        await lower.write("/c", "3")
        assert len(seen) == 2

    run(backend, main)


def test_overlay_inside_a_union(backend: str) -> None:
    async def main() -> None:
        overlay = vfs.overlay_fs([EightVerbTree({"/a": "1"}), vfs.temp_fs({"/b": "2"})])
        union = vfs.union_fs({"/ro": overlay, "/rw": vfs.temp_fs()})
        assert await paths(union.glob("**")) == ["/ro", "/ro/a", "/ro/b", "/rw"]
        with pytest.raises(vfs.ReadOnlyMountError, match=exactly("read-only mount: /ro/a")):
            await union.write("/ro/a", "x")
        with pytest.raises(vfs.CrossMountError):
            await union.rename("/ro/a", "/rw/a")

    run(backend, main)


def test_open_for_writing_is_refused(backend: str) -> None:
    async def main() -> None:
        overlay = vfs.overlay_fs([EightVerbTree({"/a": "x"})])
        with pytest.raises(vfs.ReadOnlyMountError, match=exactly("read-only mount: /a")):
            await overlay.open("/a", write=True)

    run(backend, main)


def test_directory_link_counts_are_merged(backend: str) -> None:
    async def main() -> None:
        upper = vfs.temp_fs({"/src/a/f": "1"})
        lower = vfs.temp_fs({"/src/b/g": "2", "/src/a/h": "3", "/src/file": "4"})
        overlay = vfs.overlay_fs([upper, lower])
        assert (await upper.stat("/src")).nlink == 3
        assert (await overlay.stat("/src")).nlink == 4  # a and b
        assert (await overlay.lstat("/src")).nlink == 4
        assert (await overlay.stat("/src/b")).nlink == 2

    run(backend, main)


def _unreachable_store() -> vfs.S3HostFiles:
    """Our own S3 layer pointed at a port nobody listens on: every request is refused."""
    import boto3
    from botocore.config import Config

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    session = boto3.session.Session(
        aws_access_key_id="key", aws_secret_access_key="secret", region_name="us-east-1"
    )
    client = session.client(
        "s3",
        endpoint_url=f"http://127.0.0.1:{port}",
        config=Config(
            retries={"total_max_attempts": 1}, connect_timeout=2, s3={"addressing_style": "path"}
        ),
    )
    return vfs.S3HostFiles("agentroot", client=client, metadata_ttl=0)


@pytest.mark.parametrize("store_first", [True, False])
def test_a_downed_s3_layer_costs_only_its_own_files(backend: str, store_first: bool) -> None:
    """``S3HostFiles`` reports a store it cannot reach as ``PathError(EIO)``: that is the layer
    failing, not an answer, so the overlay serves the other layer's files; it fails only when no
    layer served."""
    store = _unreachable_store()
    down = vfs.host_fs(store, "scope")
    local = vfs.temp_fs({"/a.txt": "hello\n", "/d/b.txt": "hello b\n"})
    overlay = vfs.overlay_fs([down, local] if store_first else [local, down])

    async def main() -> None:
        with pytest.raises(vfs.PathError) as caught:
            await down.stat("/a.txt")
        assert caught.value.errno == errno.EIO
        assert (await overlay.stat("/a.txt")).kind == "file"
        assert (await overlay.stat("/nope")).kind == "missing"
        assert (await overlay.lstat("/d")).kind == "directory"
        assert await overlay.read("/a.txt") == "hello\n"
        assert await paths(overlay.list("/")) == ["/a.txt", "/d"]
        assert await paths(overlay.glob("**/*.txt")) == ["/a.txt", "/d/b.txt"]
        hits = await collect(overlay.grep(vfs.GrepQuery("hello")))
        assert hits == [
            vfs.GrepResult("/a.txt", 1, "hello"),
            vfs.GrepResult("/d/b.txt", 1, "hello b"),
        ]
        assert await collect(overlay.search(vfs.SearchQuery("hello"))) == []
        handle = await overlay.open("/d/b.txt")
        assert await handle.read(0, 100) == b"hello b\n"
        await handle.close()
        alone = vfs.overlay_fs([down])
        with pytest.raises(vfs.PathError) as caught:
            await alone.stat("/a.txt")  # no layer served: the layer's own error
        assert caught.value.errno == errno.EIO
        with pytest.raises(vfs.PathError):
            await collect(alone.grep(vfs.GrepQuery("hello")))

    try:
        run(backend, main)
    finally:
        store.close()
