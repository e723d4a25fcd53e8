"""Placeholder: being written."""

from __future__ import annotations

from typing import Any


class HostEntry: ...


class HostFile: ...


class HostFilesApi: ...


class InMemoryHostFiles: ...


def host_fs(*args: Any, **kwargs: Any) -> Any:
    raise NotImplementedError("host_fs")
