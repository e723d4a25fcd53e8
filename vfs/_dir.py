"""Placeholder: being written."""

from __future__ import annotations

from typing import Any


def dir_fs(*args: Any, **kwargs: Any) -> Any:
    raise NotImplementedError("dir_fs")
