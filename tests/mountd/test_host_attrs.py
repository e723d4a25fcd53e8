"""A host-directory mount shows every entry with the host's own attributes, times included,
after any sequence of operations through it, whether the kernel asks by stat or by listing.

A listing's files are answered from what the mount learned of them while it can vouch for them
(``mountd._ops``, ``_vouch``) rather than examined again; every change through the mount must
forget what it changes (a write's new times, a link or unlink's link count, a rename's change
time). Hypothesis draws the differential test's operations (descriptors held across steps,
links, renames over files, truncations), and as often writes that keep a file's size and
creations beside it; after the steps it marks, and at the end, every entry is
listed through the mount (a READDIRPLUS whenever the kernel dropped the directory's listing) and
stated, and compared with ``lstat`` of the host file: everything but the access time (reads
through the mount move the host's; the kernel keeps its own), inode numbers included. Not after
every step: a stat makes the mount learn the file afresh, which would hide a change it forgot
until the next listing.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import Roots
from .syscalls import outcome
from .test_differential import MAX_EXAMPLES, PATHS, SEED, Create, Op, Place, Write, operations

pytestmark = [pytest.mark.mount, pytest.mark.timeout(300)]

FIELDS = (
    "st_ino",
    "st_mode",
    "st_nlink",
    "st_uid",
    "st_gid",
    "st_size",
    "st_mtime_ns",
    "st_ctime_ns",
)


def shown(base: Path) -> dict[str, tuple[int, ...]]:
    """Every entry beneath ``base`` with its attributes, listed and stated in ``base``."""
    found: dict[str, tuple[int, ...]] = {}
    pending = [base]
    while pending:
        directory = pending.pop()
        with os.scandir(directory) as entries:
            for entry in entries:
                st = entry.stat(follow_symlinks=False)
                found[os.path.relpath(entry.path, base)] = tuple(getattr(st, f) for f in FIELDS)
                if entry.is_dir(follow_symlinks=False):
                    pending.append(Path(entry.path))
    return found


# Changes that keep a file's size (its times move, nothing else): the ones a listing answering
# from before would hide; drawn as often as all the differential test's operations together,
# with creations that change their directory (so the kernel lists it again).
in_place = st.builds(
    Write, st.sampled_from(("b", "a/a")), st.sampled_from((0, 1)), st.binary(min_size=1, max_size=3)
)
new_names = st.builds(
    Create, st.sampled_from(PATHS), st.just(False), st.just(False), st.just(0o644)
)
steps_drawn = st.one_of(operations, in_place, new_names)


@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=st.lists(st.tuples(steps_drawn, st.integers(0, 3)), min_size=1, max_size=25))
def test_the_mount_shows_the_host_attributes(roots: Roots, steps: list[tuple[Op, int]]) -> None:
    mounted = roots.fresh("dir_rw")
    host = roots.host("dir_rw", mounted)
    place = Place(mounted)
    try:
        for op in SEED:
            op.run(place)
        for i, (op, look) in enumerate(steps):
            outcome(lambda op=op: op.run(place))  # type: ignore[misc]
            if look == 0 or i == len(steps) - 1:
                assert shown(mounted) == shown(host), f"after step {i}: {op}"
    finally:
        place.close_all()


def _overwrite(d: Path) -> None:
    fd = os.open(d / "f", os.O_WRONLY)
    try:
        os.pwrite(fd, b"HE", 0)  # within the file: its size stays, its times move
    finally:
        os.close(fd)


def _truncate(d: Path) -> None:
    os.truncate(d / "f", 2)


def _chmod(d: Path) -> None:
    os.chmod(d / "f", 0o600)


def _link(d: Path) -> None:
    os.link(d / "f", d / "g")


def _unlink_a_second_name(d: Path) -> None:
    os.unlink(d / "second")


def _rename(d: Path) -> None:
    os.rename(d / "f", d / "moved")


def _rename_over_a_second_name(d: Path) -> None:
    os.rename(d / "other", d / "second")


CHANGES = {
    f.__name__.lstrip("_"): f
    for f in (
        _overwrite,
        _truncate,
        _chmod,
        _link,
        _unlink_a_second_name,
        _rename,
        _rename_over_a_second_name,
    )
}


@pytest.mark.parametrize("change", CHANGES)
def test_a_change_through_the_mount_is_not_answered_from_before_it(
    roots: Roots, change: str
) -> None:
    """Each file the mount vouched for (listed and stated), changed through the mount, then its
    directory changed too (so the kernel lists it again): the listing shows the change."""
    mounted = roots.fresh("dir_rw")
    host = roots.host("dir_rw", mounted)
    (mounted / "f").write_bytes(b"hello")
    os.link(mounted / "f", mounted / "second")
    (mounted / "other").write_bytes(b"other")
    assert shown(mounted) == shown(host)
    time.sleep(0.02)  # past the clock's granularity: the change moves the times
    CHANGES[change](mounted)
    (mounted / "poke").touch()  # the directory changed: the kernel lists it again
    assert shown(mounted) == shown(host)
