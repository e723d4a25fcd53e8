"""Placeholder: being written."""

from __future__ import annotations

from typing import Any


def local_file_system(*args: Any, **kwargs: Any) -> Any:
    raise NotImplementedError("local_file_system")
