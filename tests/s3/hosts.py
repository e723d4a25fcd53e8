"""Mounts of one S3-backed root by several daemons ("hosts"), for the S3 mount tests."""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from mountd import MountOptions
from tests.mountd.mounting import MountProcess, mount_process

from . import trees
from .conftest import Store

# The kernel asks again about as often as the daemon's cache answers on its own.
OPTIONS = MountOptions(entry_timeout=trees.TTL, attr_timeout=trees.TTL, negative_timeout=trees.TTL)


@contextlib.contextmanager
def mounted_hosts(s3: Store, base: Path, prefix: str, count: int) -> Iterator[list[MountProcess]]:
    """``count`` daemons, each serving ``trees.spec_text`` of ``prefix``, at ``base/host<i>``."""
    text = trees.spec_text(s3.server.endpoint, s3.bucket, prefix)
    build = functools.partial(trees.spec_root, text, s3.server.credentials_env())
    with contextlib.ExitStack() as stack:
        hosts = []
        for index in range(count):
            mountpoint = base / f"host{index}"
            mountpoint.mkdir()
            hosts.append(stack.enter_context(mount_process(build, mountpoint, OPTIONS)))
        yield hosts


def eventually(check: Callable[[], bool], timeout: float = 6 * trees.TTL + 2) -> float:
    """Poll ``check`` until it holds; the seconds that took. Fails after ``timeout``."""
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"still not true after {timeout:.1f} s: {check}")
        time.sleep(0.05)
    return time.monotonic() - start


def read_or_none(path: Path) -> str | None:
    try:
        return path.read_text()
    except FileNotFoundError:
        return None
