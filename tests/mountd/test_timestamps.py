"""Timestamps through a mount come from one clock and never run backwards, as on tmpfs.

With the writeback cache the kernel stamps writes and ``touch`` (``utime(path, None)``) itself,
from its coarse clock; a tree that stamps a new file from a finer clock then sees ``touch`` move
the mtime *backwards* by up to a tick (it did, 200 times of 200, on a ``temp_fs`` mount). Every
writable kind runs the same two checks as the tmpfs reference, in the same test:

- ``touch`` after setting the times into the past lands at or after the creation time, every time;
- a sequence of operations (create, write, utime now, rename, chmod, a second file, utime now
  of the first), one clock tick apart, moves mtime and ctime exactly where tmpfs moves them, and
  neither ever runs backwards (but for the explicit utime into the past).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from .conftest import Root

TICK = 0.01  # longer than the kernel's coarse clock step (4 ms at HZ=250)


def touches_backwards(directory: Path, rounds: int = 100) -> int:
    """How many of ``rounds`` fresh files ``touch`` gave an mtime before their creation's."""
    backwards = 0
    for n in range(rounds):
        path = directory / f"touched-{n}"
        path.write_bytes(b"x")
        created = os.stat(path).st_mtime_ns
        past = created - 10_000_000_000
        os.utime(path, ns=(past, past))
        os.utime(path, None)  # what touch does
        backwards += os.stat(path).st_mtime_ns < created
    return backwards


def _create(d: Path) -> None:
    (d / "a").write_bytes(b"one")


def _write(d: Path) -> None:
    with open(d / "a", "ab") as out:
        out.write(b" two")


def _utime_past(d: Path) -> None:
    os.utime(d / "a", ns=(1_000_000_000, 1_000_000_000))


def _utime_now(d: Path) -> None:
    os.utime(d / "a", None)


def _rename(d: Path) -> None:
    os.rename(d / "a", d / "b")
    os.rename(d / "b", d / "a")


def _chmod(d: Path) -> None:
    os.chmod(d / "a", 0o600)


def _second_file(d: Path) -> None:
    (d / "c").write_bytes(b"c")


STEPS: list[tuple[str, Callable[[Path], None]]] = [
    ("create", _create),
    ("write", _write),
    ("utime now", _utime_now),
    ("rename", _rename),
    ("chmod", _chmod),
    ("utime past", _utime_past),
    ("utime now again", _utime_now),
    ("second file", _second_file),
    ("write again", _write),
]


def timeline(directory: Path) -> list[tuple[str, int, int]]:
    """``(step, mtime, ctime)`` of file ``a`` after each step, one tick apart."""
    seen = []
    for name, step in STEPS:
        time.sleep(TICK)
        step(directory)
        st = os.stat(directory / "a")
        seen.append((name, st.st_mtime_ns, st.st_ctime_ns))
    return seen


def _moves(seen: list[tuple[str, int, int]]) -> list[tuple[str, str, str]]:
    """Per step, how mtime and ctime moved from the step before (``+``, ``=``, ``-``)."""

    def sign(after: int, before: int) -> str:
        return "+" if after > before else "=" if after == before else "-"

    return [
        (name, sign(m, seen[i - 1][1]), sign(c, seen[i - 1][2]))
        for i, (name, m, c) in enumerate(seen)
        if i
    ]


def test_touch_never_moves_mtime_backwards(rw_root: Root, scratch_dir: Path) -> None:
    assert touches_backwards(scratch_dir) == 0  # the reference, in the same run
    assert touches_backwards(rw_root.path) == 0


def test_timestamps_move_as_on_tmpfs(rw_root: Root, scratch_dir: Path) -> None:
    reference = timeline(scratch_dir)
    mounted = timeline(rw_root.path)
    assert _moves(mounted) == _moves(reference)
    for seen in (reference, mounted):
        creation = seen[0][1]
        ctimes = [ctime for _, _, ctime in seen]
        assert ctimes == sorted(ctimes), seen  # ctime never runs backwards
        for name, mtime, _ in seen:
            if name != "utime past":
                assert mtime >= creation, (name, seen)
    # Across files too: the second file is not older than the first file's last change before it.
    second = os.stat(rw_root.path / "c").st_mtime_ns
    assert second >= dict((name, m) for name, m, _ in mounted)["utime now again"]
