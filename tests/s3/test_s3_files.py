"""``S3HostFiles`` against SeaweedFS: compare-and-swap, errors, multipart, caching, changes seen.

"Another writer" is boto3 talking to the store directly (another host, as far as the tree under
test can tell). Requests are counted with botocore's event hooks on a client of the test's own.
"""

from __future__ import annotations

import errno
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

import vfs
from vfs._s3 import S3HostFiles, _is_name

from .conftest import Store

BACKENDS = ["trio", "asyncio"]


class Requests:
    """Counts the S3 operations a client makes, by name and HTTP status."""

    def __init__(self, client: Any) -> None:
        self.seen: Counter[tuple[str, int]] = Counter()
        client.meta.events.register("after-call.s3", self._record)

    def _record(self, http_response: Any, model: Any, **_: Any) -> None:
        self.seen[(model.name, http_response.status_code)] += 1

    def count(self, operation: str | None = None, status: int | None = None) -> int:
        return sum(
            n
            for (op, code), n in self.seen.items()
            if (operation is None or op == operation) and (status is None or code == status)
        )

    def reset(self) -> None:
        self.seen.clear()


def run(backend: str, fn: Callable[[], Awaitable[None]]) -> None:
    anyio.run(fn, backend=backend)


def put(s3: Store, scope: str, path: str, data: bytes) -> str:
    return str(s3.client.put_object(Bucket=s3.bucket, Key=scope + path, Body=data)["ETag"])


def get(s3: Store, scope: str, path: str) -> bytes:
    body: bytes = s3.client.get_object(Bucket=s3.bucket, Key=scope + path)["Body"].read()
    return body


# --- compare-and-swap and errors ---------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_lost_race_is_estale_and_never_overwrites(s3: Store, backend: str) -> None:
    scope = s3.scope()
    put(s3, scope, "/a.txt", b"one")
    tree = vfs.host_fs(s3.files(), scope)

    async def body() -> None:
        assert await tree.read("/a.txt") == "one"
        put(s3, scope, "/a.txt", b"theirs")  # another host wins
        with pytest.raises(vfs.WriteFailedError) as caught:
            await tree.write("/a.txt", "mine")
        assert str(caught.value) == "write failed: /a.txt"
        assert caught.value.errno == errno.ESTALE
        assert get(s3, scope, "/a.txt") == b"theirs"
        # Until a read observes their version, every write fails the same way.
        with pytest.raises(vfs.WriteFailedError):
            await tree.write("/a.txt", "mine")
        assert await tree.read("/a.txt") == "theirs"
        await tree.write("/a.txt", "mine")
        assert get(s3, scope, "/a.txt") == b"mine"
        # Delete is a compare-and-swap too.
        put(s3, scope, "/a.txt", b"again theirs")
        with pytest.raises(vfs.WriteFailedError) as caught:
            await tree.delete("/a.txt")
        assert caught.value.errno == errno.ESTALE
        assert get(s3, scope, "/a.txt") == b"again theirs"

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_name_believed_new_is_created_never_replaced(s3: Store, backend: str) -> None:
    """A write of a name the cache says is missing is create-only: when another host made the
    file meanwhile, the write fails (ESTALE) instead of replacing bytes nobody here has seen."""
    scope = s3.scope()
    put(s3, scope, "/d/old.txt", b"old")
    tree = vfs.host_fs(s3.files(metadata_ttl=30.0), scope)

    async def body() -> None:
        assert [e.path async for e in tree.list("/d")] == ["/d/old.txt"]
        assert (await tree.stat("/d/new.txt")).kind == "missing"  # from the listing
        put(s3, scope, "/d/new.txt", b"theirs")
        with pytest.raises(vfs.WriteFailedError) as caught:
            await tree.write("/d/new.txt", "mine")
        assert caught.value.errno == errno.ESTALE
        assert get(s3, scope, "/d/new.txt") == b"theirs"
        # The failure made the cache ask again: the file is seen, read, then replaced knowingly.
        assert await tree.read("/d/new.txt") == "theirs"
        await tree.write("/d/new.txt", "mine")
        assert get(s3, scope, "/d/new.txt") == b"mine"

    run(backend, body)


def test_preconditions_of_the_files_api(s3: Store) -> None:
    scope = s3.scope()
    files = s3.files()
    etag = put(s3, scope, "/a.txt", b"one")

    async def body() -> None:
        with pytest.raises(vfs.WriteFailedError) as caught:
            await files.write(scope, "/a.txt", b"x", if_none_match=True)
        assert caught.value.errno == errno.EEXIST
        with pytest.raises(vfs.WriteFailedError) as caught:
            await files.write(scope, "/a.txt", b"x", if_match='"not-the-etag"')
        assert caught.value.errno == errno.ESTALE
        with pytest.raises(vfs.WriteFailedError) as caught:
            await files.write(scope, "/gone.txt", b"x", if_match=etag)
        assert caught.value.errno == errno.ESTALE
        assert (await files.stat(scope, "/gone.txt")) is None
        new = await files.write(scope, "/a.txt", b"two", if_match=etag)
        assert new != etag
        assert (await files.read(scope, "/a.txt")).content == b"two"
        created = await files.write(scope, "/b.txt", b"b", if_none_match=True)
        assert (await files.stat(scope, "/b.txt")) == vfs.HostEntry(
            "b.txt",
            "file",
            1,
            (await files.stat(scope, "/b.txt")).mtime_ns,
            created,  # type: ignore[union-attr]
        )
        with pytest.raises(vfs.WriteFailedError):
            await files.delete(scope, "/a.txt", if_match=etag)
        await files.delete(scope, "/a.txt", if_match=new)
        assert (await files.stat(scope, "/a.txt")) is None
        with pytest.raises(vfs.FileNotFoundError):
            await files.delete(scope, "/a.txt", if_match=new)
        with pytest.raises(vfs.FileNotFoundError):
            await files.delete(scope, "/a.txt")

    run("trio", body)


def test_directories_and_files_do_not_mix(s3: Store) -> None:
    scope = s3.scope()
    put(s3, scope, "/d/inner.txt", b"x")
    put(s3, scope, "/f.txt", b"x")
    files = s3.files()

    async def body() -> None:
        with pytest.raises(vfs.IsADirectoryError):
            await files.write(scope, "/d", b"x")
        with pytest.raises(vfs.NotADirectoryError):
            await files.write(scope, "/f.txt/below", b"x")
        with pytest.raises(vfs.NotADirectoryError):
            await files.write(scope, "/f.txt/deeper/below", b"x")
        with pytest.raises(vfs.IsADirectoryError):
            await files.read(scope, "/d")
        with pytest.raises(vfs.DirectoryNotEmptyError):
            await files.delete(scope, "/d")
        with pytest.raises(vfs.FileNotFoundError):
            await files.read(scope, "/f.txt/below")

    run("trio", body)


def test_deleting_the_last_file_removes_its_directories(s3: Store) -> None:
    """SeaweedFS keeps emptied directories; S3HostFiles prunes them (directories are derived)."""
    scope = s3.scope()
    put(s3, scope, "/keep.txt", b"k")
    tree = vfs.host_fs(s3.files(), scope)

    async def body() -> None:
        await tree.write("/d/e/f.txt", "f")
        await tree.write("/d/other.txt", "o")
        await tree.delete("/d/e/f.txt")
        assert [e.path async for e in tree.list("/d")] == ["/d/other.txt"]
        await tree.delete("/d/other.txt")
        assert [e.path async for e in tree.list("/")] == ["/keep.txt"]
        assert (await tree.stat("/d")).kind == "missing"
        # A fresh instance (nothing cached) sees the same.
        fresh = vfs.host_fs(s3.files(), scope)
        assert [e.path async for e in fresh.list("/")] == ["/keep.txt"]
        assert (await fresh.stat("/d/e")).kind == "missing"

    run("trio", body)


def test_key_segments_that_no_path_can_name_are_left_out() -> None:
    # SeaweedFS itself refuses such keys (and folds "a//b" into "a/b"); other stores hold them.
    assert _is_name("ok.txt")
    assert _is_name("y" * 255)
    for bad in ["", ".", "..", "a/b", "nul\0", "y" * 256, "é" * 128]:
        assert not _is_name(bad), bad


def test_an_object_wins_over_a_prefix(s3: Store) -> None:
    scope = s3.scope()
    put(s3, scope, "/x", b"file x")
    put(s3, scope, "/x/under", b"u")
    put(s3, scope, "/odd/ok.txt", b"o")
    files = s3.files()

    async def body() -> None:
        assert [(e.name, e.kind) for e in await files.list(scope, "/")] == [
            ("odd", "directory"),
            ("x", "file"),
        ]
        assert (await files.stat(scope, "/x")).kind == "file"  # type: ignore[union-attr]
        assert (await files.read(scope, "/x")).content == b"file x"
        assert [e.name for e in await files.list(scope, "/odd")] == ["ok.txt"]

    run("trio", body)


def test_scopes_are_key_prefixes(s3: Store) -> None:
    scope = s3.scope()
    files = s3.files()

    async def body() -> None:
        await files.write(scope + "/", "/a.txt", b"a")
        assert (await files.read("/" + scope, "/a.txt")).content == b"a"
        assert get(s3, scope, "/a.txt") == b"a"
        await files.write(f"{scope}/inner", "/b.txt", b"b")
        assert [(e.name, e.kind) for e in await files.list(scope, "/")] == [
            ("a.txt", "file"),
            ("inner", "directory"),
        ]

    run("trio", body)


# --- large files ---------------------------------------------------------------------------------


def test_large_files_use_multipart_with_compare_and_swap(s3: Store) -> None:
    scope = s3.scope()
    client = s3.server.client()
    requests = Requests(client)
    files = S3HostFiles(s3.bucket, client=client, multipart_threshold=5 << 20, part_size=5 << 20)
    big = bytes(range(256)) * (11 << 12)  # 11 MiB: three parts
    other = b"o" * len(big)

    async def body() -> None:
        etag = await files.write(scope, "/big.bin", big, if_none_match=True)
        assert etag.endswith('-3"')
        assert requests.count("UploadPart", 200) == 3
        assert requests.count("CompleteMultipartUpload", 200) == 1
        assert get(s3, scope, "/big.bin") == big
        with pytest.raises(vfs.WriteFailedError) as caught:
            await files.write(scope, "/big.bin", other, if_none_match=True)
        assert caught.value.errno == errno.EEXIST
        with pytest.raises(vfs.WriteFailedError) as caught:
            await files.write(scope, "/big.bin", other, if_match='"stale"')
        assert caught.value.errno == errno.ESTALE
        assert get(s3, scope, "/big.bin") == big  # the failed uploads never showed
        assert requests.count("AbortMultipartUpload") == 2
        uploads = s3.client.list_multipart_uploads(Bucket=s3.bucket, Prefix=scope)
        assert not uploads.get("Uploads")
        await files.write(scope, "/big.bin", other, if_match=etag)
        assert (await files.read(scope, "/big.bin")).content == other

    run("trio", body)


# --- caching -------------------------------------------------------------------------------------


def test_cached_answers_within_validity_and_conditional_gets_after(s3: Store) -> None:
    scope = s3.scope()
    for name in ("a.txt", "b.txt"):
        put(s3, scope, "/dir/" + name, name.encode())
    client = s3.server.client()
    requests = Requests(client)
    files = S3HostFiles(s3.bucket, client=client, metadata_ttl=0.5)

    async def body() -> None:
        # A listing answers the children's stat and a negative lookup without a request.
        assert [e.name for e in await files.list(scope, "/dir")] == ["a.txt", "b.txt"]
        assert requests.count() == 1
        assert (await files.stat(scope, "/dir/a.txt")).size == 5  # type: ignore[union-attr]
        assert await files.stat(scope, "/dir/nope") is None
        assert requests.count() == 1
        # Read twice: one GET; read your own write: no request at all.
        assert (await files.read(scope, "/dir/a.txt")).content == b"a.txt"
        assert (await files.read(scope, "/dir/a.txt")).content == b"a.txt"
        assert requests.count("GetObject") == 1
        await files.write(scope, "/dir/c.txt", b"c")
        requests.reset()
        assert (await files.read(scope, "/dir/c.txt")).content == b"c"
        assert [e.name for e in await files.list(scope, "/dir")] == ["a.txt", "b.txt", "c.txt"]
        assert requests.count() == 0
        # Past validity: a conditional GET, answered 304, serves the kept bytes.
        await anyio.sleep(0.6)
        assert (await files.read(scope, "/dir/a.txt")).content == b"a.txt"
        assert requests.count("GetObject", 304) == 1
        # Changed by another writer: the GET brings the new bytes.
        await anyio.sleep(0.6)
        put(s3, scope, "/dir/a.txt", b"changed")
        assert (await files.read(scope, "/dir/a.txt")).content == b"changed"
        assert requests.count("GetObject", 200) == 1

    run("trio", body)


def test_zero_validity_asks_the_store_every_time(s3: Store) -> None:
    scope = s3.scope()
    put(s3, scope, "/a.txt", b"a")
    client = s3.server.client()
    requests = Requests(client)
    files = S3HostFiles(s3.bucket, client=client, metadata_ttl=0.0)

    async def body() -> None:
        for _ in range(3):
            assert (await files.stat(scope, "/a.txt")) is not None
            assert (await files.read(scope, "/a.txt")).content == b"a"
        assert requests.count("ListObjectsV2") == 3
        assert requests.count("GetObject", 304) == 2

    run("trio", body)


# --- changes seen --------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_other_writers_changes_are_reported_through_host_fs(s3: Store, backend: str) -> None:
    scope = s3.scope()
    put(s3, scope, "/a.txt", b"one")
    put(s3, scope, "/b.txt", b"one")
    files = s3.files(metadata_ttl=0.2)
    tree = vfs.host_fs(files, scope)
    seen: list[vfs.Change] = []
    stop = tree.watch(seen.append)

    async def body() -> None:
        assert await tree.read("/a.txt") == "one"
        assert await tree.read("/b.txt") == "one"
        await tree.write("/b.txt", "ours")  # our own change: reported by host_fs itself
        assert [(c.path, c.kind, c.origin) for c in seen] == [("/b.txt", "content", None)]
        seen.clear()
        put(s3, scope, "/a.txt", b"two")
        await anyio.sleep(0.3)
        assert (await tree.stat("/a.txt")).size == 3  # revalidation sees the new etag
        assert [(c.path, c.kind) for c in seen] == [("/a.txt", "content")]
        assert seen[0].origin is files
        seen.clear()
        put(s3, scope, "/a.txt", b"three")  # found by a listing this time
        await anyio.sleep(0.3)
        assert [e.path async for e in tree.list("/")] == ["/a.txt", "/b.txt"]
        assert [c.path for c in seen] == ["/a.txt"]
        seen.clear()
        stop()
        put(s3, scope, "/a.txt", b"four")
        await anyio.sleep(0.3)
        assert await tree.read("/a.txt") == "four"
        assert seen == []

    run(backend, body)


# --- an unreachable store ------------------------------------------------------------------------


def test_an_unreachable_store_is_eio(s3: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    from .weed import free_ports

    (port,) = free_ports(1)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "y")
    files = S3HostFiles(
        s3.bucket, endpoint_url=f"http://127.0.0.1:{port}", region="us-east-1", connect_timeout=1.0
    )
    tree = vfs.host_fs(files, "scope")

    async def body() -> None:
        for call in (tree.read, tree.stat):
            with pytest.raises(vfs.PathError) as caught:
                await call("/a.txt")
            assert str(caught.value) == "input/output error: /a.txt"
        for change in (tree.delete, lambda path: tree.write(path, "x")):
            with pytest.raises(vfs.WriteFailedError) as caught:
                await change("/a.txt")
            assert str(caught.value) == "write failed: /a.txt"
            assert caught.value.errno == errno.EIO
        with pytest.raises(vfs.PathError) as caught:
            [e async for e in tree.list("/")]
        assert str(caught.value) == "input/output error: /"

    run("trio", body)
    files.close()
