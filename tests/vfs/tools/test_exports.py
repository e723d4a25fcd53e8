"""The ``vfs.tools`` front door: ``__all__`` is exactly the public surface."""

from __future__ import annotations

import types

import pytest

import vfs.tools
from vfs.tools import ArgumentError, synthesize_tools

from ..eightverb import exactly


def test_every_exported_name_resolves() -> None:
    assert vfs.tools.__all__ == sorted(vfs.tools.__all__, key=lambda n: (not n.isupper(), n))
    assert len(set(vfs.tools.__all__)) == len(vfs.tools.__all__)
    for name in vfs.tools.__all__:
        assert getattr(vfs.tools, name, None) is not None, name


def test_nothing_public_leaks() -> None:
    public = {
        name
        for name, value in vars(vfs.tools).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public == set(vfs.tools.__all__)


def test_parse_arguments_gives_canonical_names() -> None:
    read = synthesize_tools(vfs.temp_fs(), ["Read"])["Read"]
    assert read.parse_arguments({"target_file": "a", "explanation": "x", "limit": 2.0}) == {
        "path": "a",
        "limit": 2,
    }
    with pytest.raises(ArgumentError, match=exactly("Read: unknown argument: lines")):
        read.parse_arguments({"path": "a", "lines": 1})
