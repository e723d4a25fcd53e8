"""Placeholder: being written."""

from __future__ import annotations

from typing import Any


def posix_view(*args: Any, **kwargs: Any) -> Any:
    raise NotImplementedError("posix_view")
