"""``mountd._attrs.AttrPolicy``: a refresh in place gives what a fresh build gives."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

import vfs
from mountd._attrs import AttrPolicy

POLICY = AttrPolicy(uid=1000, gid=100, entry_timeout=7, attr_timeout=9)
FIELDS = (
    "st_ino",
    "generation",
    "entry_timeout",
    "attr_timeout",
    "st_mode",
    "st_nlink",
    "st_uid",
    "st_gid",
    "st_rdev",
    "st_size",
    "st_blksize",
    "st_blocks",
    "st_atime_ns",
    "st_mtime_ns",
    "st_ctime_ns",
)

times = st.none() | st.integers(0, 2**62)
infos = st.builds(
    vfs.FileInfo,
    kind=st.sampled_from(("file", "directory", "symlink")),
    size=st.integers(0, 2**40),
    mode=st.none() | st.sampled_from((0o644, 0o600, 0o755)),
    mtime_ns=times,
    uid=st.none() | st.sampled_from((0, 1000)),
    gid=st.none() | st.sampled_from((0, 100)),
    atime_ns=times,
    ctime_ns=times,
    nlink=st.none() | st.integers(1, 3),
)


@given(infos, infos)
def test_a_refresh_in_place_equals_a_fresh_build(old: vfs.FileInfo, new: vfs.FileInfo) -> None:
    attrs = POLICY.entry(5, old)
    fresh = POLICY.entry(5, new)
    if POLICY.refresh(attrs, old, new):
        assert {f: getattr(attrs, f) for f in FIELDS} == {f: getattr(fresh, f) for f in FIELDS}
    else:  # only when more than the size and times differ
        assert (old.kind, old.mode, old.nlink, old.uid, old.gid) != (
            new.kind,
            new.mode,
            new.nlink,
            new.uid,
            new.gid,
        )


def test_a_write_is_refreshed_in_place() -> None:
    old = vfs.FileInfo("file", 0, mode=0o644, mtime_ns=10, ctime_ns=10, atime_ns=5)
    new = vfs.FileInfo("file", 1024, mode=0o644, mtime_ns=20, ctime_ns=20, atime_ns=5)
    attrs = POLICY.entry(5, old)
    assert POLICY.refresh(attrs, old, new)
    assert (attrs.st_size, attrs.st_blocks, attrs.st_mtime_ns, attrs.st_ctime_ns) == (
        1024,
        2,
        20,
        20,
    )
