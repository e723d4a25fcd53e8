"""FileInfo and DirEntry stay frozen dataclasses, however their __init__ fills them (vfs._types)."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

import vfs

_OPTIONAL_INT = st.none() | st.integers(min_value=0, max_value=2**63)

infos = st.builds(
    vfs.FileInfo,
    kind=st.sampled_from(["file", "directory", "symlink", "missing"]),
    size=st.integers(min_value=0, max_value=2**40),
    mode=st.none() | st.integers(min_value=0, max_value=0o7777),
    mtime_ns=_OPTIONAL_INT,
    uid=_OPTIONAL_INT,
    gid=_OPTIONAL_INT,
    atime_ns=_OPTIONAL_INT,
    ctime_ns=_OPTIONAL_INT,
    nlink=_OPTIONAL_INT,
)


@given(infos)
def test_positional_keyword_and_replace_build_the_same_value(info: vfs.FileInfo) -> None:
    values = [getattr(info, field.name) for field in dataclasses.fields(vfs.FileInfo)]
    positional = vfs.FileInfo(*values)
    assert positional == info
    assert hash(positional) == hash(info)
    assert dataclasses.replace(info) == info
    assert type(positional) is vfs.FileInfo
    assert repr(positional) == repr(info)


@given(infos)
def test_copies_and_pickles_are_equal_frozen_file_infos(info: vfs.FileInfo) -> None:
    for other in (copy.copy(info), copy.deepcopy(info), pickle.loads(pickle.dumps(info))):
        assert other == info
        assert type(other) is vfs.FileInfo


def test_a_file_info_stays_frozen() -> None:
    info = vfs.FileInfo("file", 3, mtime_ns=5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.size = 4  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del info.kind  # type: ignore[misc]
    assert info.size == 3


def test_mtime_and_mtime_ns_are_derived_from_each_other() -> None:
    assert vfs.FileInfo("file", mtime=1.5).mtime_ns == 1_500_000_000
    assert vfs.FileInfo("file", mtime_ns=2_500_000_000).mtime == 2.5
    both = vfs.FileInfo("file", mtime=7.0, mtime_ns=3)
    assert (both.mtime, both.mtime_ns) == (7.0, 3)


def test_a_subclass_with_its_own_slots_is_filled_too() -> None:
    class Tagged(vfs.FileInfo):
        __slots__ = ("tag",)

    info = Tagged("directory", 4, mtime_ns=9, nlink=2)
    assert type(info) is Tagged
    assert (info.kind, info.size, info.mtime_ns, info.nlink) == ("directory", 4, 9, 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.size = 5  # type: ignore[misc]


@given(st.text(min_size=1), st.sampled_from(["file", "directory", "symlink", "missing"]))
def test_a_dir_entry_is_a_frozen_value(path: str, kind: vfs.Kind) -> None:
    entry = vfs.DirEntry(path, kind)
    same = vfs.DirEntry(path=path, kind=kind)
    assert entry == same
    assert hash(entry) == hash(same)
    assert (entry.path, entry.kind) == (path, kind)
    assert pickle.loads(pickle.dumps(entry)) == entry
    assert dataclasses.replace(entry, kind="file") == vfs.DirEntry(path, "file")
    with pytest.raises(dataclasses.FrozenInstanceError):
        entry.path = "/elsewhere"  # type: ignore[misc]
