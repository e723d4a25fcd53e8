"""The SeaweedFS store the S3 tests run against: one per session, started on first use.

Theory of operation
-------------------
``weed`` is the session's :class:`tests.s3.weed.WeedServer` (4 to 8 s to start fresh). A test
that kills it (the outage test) restarts it before it ends; the function-scoped ``s3`` fixture
restarts it too if an earlier test left it dead, so one failure does not cascade. When weed
cannot start (or is not installed), every test that needs it fails with the reason and the
server's log: nothing skips.

``s3`` is a :class:`Store`: the server, one shared boto3 client (making a client costs ~50 ms)
and the bucket. Each test takes a fresh scope (key prefix) of its own with ``store.scope()``.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from .weed import WeedServer, weed_server

BUCKET = "agentroot-test"


@dataclass
class Store:
    server: WeedServer
    client: Any
    bucket: str = BUCKET
    _counter: Iterator[int] = field(default_factory=itertools.count)

    def scope(self, name: str = "t") -> str:
        """A key prefix nobody else in this session uses."""
        return f"{name}-{next(self._counter)}-{uuid.uuid4().hex[:8]}"

    def files(self, **options: Any) -> Any:
        """An :class:`vfs.S3HostFiles` over the bucket sharing the session's client."""
        from vfs._s3 import S3HostFiles

        return S3HostFiles(self.bucket, client=self.client, **options)


@pytest.fixture(scope="session")
def weed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WeedServer]:
    with weed_server(tmp_path_factory.mktemp("weed")) as server:
        client = server.client()
        client.create_bucket(Bucket=BUCKET)
        yield server


@pytest.fixture(scope="session")
def _session_store(weed: WeedServer) -> Store:
    return Store(weed, weed.client())


@pytest.fixture
def s3(_session_store: Store) -> Store:
    """The session's store, running (restarted if an earlier test left it dead)."""
    if not _session_store.server.running:
        _session_store.server.start()
    return _session_store
