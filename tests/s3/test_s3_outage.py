"""The object store killed mid-write (SIGKILL of weed), then brought back on the same data.

Writers get an error, the previous version stays intact, a mounted daemon keeps serving what it
had cached, and everything works again once the store is back. The session's store is restarted
before the test ends (and by the ``s3`` fixture of the next test, should this one fail).
"""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

import vfs
from vfs._s3 import S3HostFiles

from . import trees
from .conftest import Store
from .hosts import eventually, mounted_hosts, read_or_none

VERSION_1 = "durable version 1\n"


@pytest.mark.mount
def test_the_store_dies_mid_write_and_comes_back(s3: Store, tmp_path: Path) -> None:
    prefix = s3.scope("outage")
    s3.client.put_object(Bucket=s3.bucket, Key=f"{prefix}/doc.txt", Body=VERSION_1.encode())
    s3.client.put_object(Bucket=s3.bucket, Key=f"{prefix}/sub/other.txt", Body=b"other\n")

    # The API writer uploads 11 MiB in three parts; the store is killed once the first is in.
    client = s3.server.client()
    killed: list[str] = []

    def kill_the_store(**_: Any) -> None:
        if not killed:
            killed.append("after the first part")
            s3.server.kill()

    client.meta.events.register("after-call.s3.UploadPart", kill_the_store)
    files = S3HostFiles(
        s3.bucket, client=client, multipart_threshold=5 << 20, part_size=5 << 20, metadata_ttl=0
    )
    api = vfs.host_fs(files, prefix)
    big = "y" * (11 << 20)

    with mounted_hosts(s3, tmp_path, prefix, 1) as (host,):
        root = host.path
        # What the daemon has seen, it can serve later.
        assert (root / "doc.txt").read_text() == VERSION_1
        assert sorted(os.listdir(root)) == ["doc.txt", "scratch", "sub"]
        assert os.listdir(root / "sub") == ["other.txt"]

        async def write_big() -> None:
            assert await api.read("/doc.txt") == VERSION_1
            with pytest.raises(vfs.WriteFailedError) as caught:
                await api.write("/doc.txt", big)
            assert str(caught.value) == "write failed: /doc.txt"
            assert caught.value.errno == errno.EIO

        anyio.run(write_big, backend="trio")
        assert killed and not s3.server.running

        time.sleep(trees.TTL + 0.1)  # past validity: the daemon asks the dead store now
        # A writer through the mount gets an error (at close, where the write-back happens).
        fd = os.open(root / "doc.txt", os.O_WRONLY)
        os.write(fd, b"version 2 through the mount\n")
        with pytest.raises(OSError) as caught:
            os.close(fd)
        assert caught.value.errno == errno.EIO
        # Reads of what the daemon had cached go on; local scratch is untouched by the outage.
        assert (root / "doc.txt").read_text() == VERSION_1
        assert sorted(os.listdir(root)) == ["doc.txt", "scratch", "sub"]
        assert (root / "sub" / "other.txt").exists()
        (root / "scratch" / "notes.txt").write_text("still here")
        assert (root / "scratch" / "notes.txt").read_text() == "still here"
        # What it never saw, it cannot make up.
        with pytest.raises(OSError) as caught:
            (root / "never-seen.txt").read_text()
        assert caught.value.errno == errno.EIO

        s3.server.start()  # the same data directory and ports
        stored = s3.client.get_object(Bucket=s3.bucket, Key=f"{prefix}/doc.txt")["Body"].read()
        assert stored == VERSION_1.encode()  # neither failed write landed, nothing torn
        uploads = s3.client.list_multipart_uploads(Bucket=s3.bucket, Prefix=prefix)
        assert len(uploads.get("Uploads", [])) <= 1  # the aborted upload (its abort failed)

        # The daemon recovers: it writes through, and sees other writers again.
        (root / "doc.txt").write_text("version 2 through the mount\n")
        stored = s3.client.get_object(Bucket=s3.bucket, Key=f"{prefix}/doc.txt")["Body"].read()
        assert stored == b"version 2 through the mount\n"

        async def write_after() -> None:
            assert await api.read("/doc.txt") == "version 2 through the mount\n"
            await api.write("/doc.txt", "version 3 from the API\n")

        anyio.run(write_after, backend="trio")
        eventually(lambda: read_or_none(root / "doc.txt") == "version 3 from the API\n")
        assert (root / "never-seen.txt").exists() is False
