"""Bootstrap and its inverse: the exclusion marker and ``.cursor/``, outside the main lock.

Theory of operation
-------------------
The main lock lives in ``.cursor/``, so whatever must exist before it is done here, serialized
by the *bootstrap lock* in the git common directory (shared by all worktrees, like
``info/exclude``):

1. (:func:`ensure`) under the bootstrap lock, the worktree's marker block goes into
   ``info/exclude`` *before* ``.cursor/`` is made, so no session file can exist un-ignored. The
   block records whether ``.cursor/`` was fusion's to make: observed absent before the
   ``mkdir`` (or left by an interrupted cleanup, see below), then corrected by the ``mkdir``'s
   outcome (``EEXIST`` means someone else made it; success means fusion did). Only then does the
   caller take the main lock, and re-checks the marker under it (a peer's final cleanup may
   have removed it in between).
2. (:func:`drop_marker`, called by the final cleanup *inside* the main lock, as its last
   removal) under the bootstrap lock, the block is removed. When ``.cursor/`` was fusion's, a
   *cleanup intent* is first written to the worktree's git directory: after the main lock is
   released, :func:`rmdir_cursor` makes one non-recursive ``rmdir``; a failure (a peer's
   new lock, an operator's file) is benign, and the intent lets a later reconciliation retry.
   A later bootstrap takes the intent over (``.cursor/`` is still fusion's) and deletes it.

Lock order is always main, then bootstrap; bootstrap never waits for the main lock.
"""

from __future__ import annotations

import contextlib
import errno
import os

from . import _atomic, _exclude, _locks
from ._crash import crash_point
from ._shape import (
    EXCLUDE_TEMP_PREFIX,
    FUSION_PREFIX,
    INTENT_TEMP_PREFIX,
    Shape,
    check_cursor_dir,
)


def bootstrap_lock(shape: Shape, *, label: str = "bootstrap") -> _locks.LockSpec:
    """The bootstrap lock (``label`` names its crash points: "unbootstrap" in cleanups)."""
    return _locks.LockSpec(path=shape.bootstrap_lock_path, label=label)


def main_lock(shape: Shape) -> _locks.LockSpec:
    return _locks.LockSpec(path=shape.lock_path, label="main")


def read_marker(shape: Shape) -> _exclude.Marker | None:
    """This worktree's marker block, if ``info/exclude`` has it."""
    return _exclude.find(_atomic.read_bytes(shape.exclude_path), shape.worktree_id)


def _write_exclude(shape: Shape, text: bytes | None) -> None:
    if text is None:
        _atomic.remove_file(shape.exclude_path)
    else:
        _atomic.replace_bytes(shape.exclude_path, text, temp_prefix=EXCLUDE_TEMP_PREFIX, mode=0o644)


def sweep_git_side(shape: Shape) -> None:
    _atomic.sweep(shape.info_dir, (EXCLUDE_TEMP_PREFIX,), max_age=_locks.DEFAULT_TTL)
    _atomic.sweep(shape.git_dir, (INTENT_TEMP_PREFIX,), max_age=_locks.DEFAULT_TTL)
    _locks.sweep(bootstrap_lock(shape))


def ensure(shape: Shape, *, wait: float) -> None:
    """Make sure the marker is in ``info/exclude`` and ``.cursor/`` exists (in that order)."""
    check_cursor_dir(shape)
    if read_marker(shape) is not None and os.path.isdir(shape.cursor_dir):
        return  # the usual case; the caller re-checks the marker under the main lock
    with _locks.held(bootstrap_lock(shape), wait=wait):
        sweep_git_side(shape)
        check_cursor_dir(shape)
        text = _atomic.read_bytes(shape.exclude_path)
        marker = _exclude.find(text, shape.worktree_id)
        intent = os.path.exists(shape.intent_path)
        written = marker is None
        if marker is None:
            predicted = intent or not os.path.lexists(shape.cursor_dir)
            marker = _exclude.Marker(shape.worktree_id, cursor_created=predicted)
            os.makedirs(shape.info_dir, exist_ok=True)
            text = _exclude.add(text, marker)
            _write_exclude(shape, text)
            crash_point("bootstrap.marker-written")
        try:
            os.mkdir(shape.cursor_dir)
            made = True
        except FileExistsError:
            made = False
        if made:
            crash_point("bootstrap.cursor-made")
        check_cursor_dir(shape)
        # The mkdir's outcome is the ownership observation; a new block's guess yields to it.
        owned = made or intent or (marker.cursor_created and not written)
        if owned != marker.cursor_created:
            assert text is not None
            _write_exclude(shape, _exclude.update(text, _replace_flag(marker, owned)))
        if intent:
            _atomic.remove_file(shape.intent_path)


def _replace_flag(marker: _exclude.Marker, owned: bool) -> _exclude.Marker:
    return _exclude.Marker(marker.worktree_id, owned, marker.file_created, marker.eol_added)


def drop_marker(shape: Shape) -> bool:
    """Remove this worktree's block (the caller holds the bootstrap lock, inside the main lock).

    Returns whether ``.cursor/`` is fusion's to remove; when it is, the cleanup intent is
    written first, so the ``rmdir`` after the main lock's release can be retried later.
    """
    text = _atomic.read_bytes(shape.exclude_path)
    marker = _exclude.find(text, shape.worktree_id)
    if marker is None or text is None:
        return os.path.exists(shape.intent_path)
    if marker.cursor_created:
        _atomic.replace_bytes(
            shape.intent_path, b"rmdir .cursor\n", temp_prefix=INTENT_TEMP_PREFIX, mode=0o644
        )
        crash_point("cleanup.intent-written")
    remaining, _gone = _exclude.remove(text, shape.worktree_id)
    _write_exclude(shape, remaining)
    crash_point("cleanup.marker-removed")
    return marker.cursor_created


def remove_stale_marker(shape: Shape, *, wait: float) -> bool:
    """With no ``.cursor/`` at all, drop a leftover block and intent; whether anything went."""
    with _locks.held(bootstrap_lock(shape, label="unbootstrap"), wait=wait):
        sweep_git_side(shape)
        if os.path.lexists(shape.cursor_dir):
            return False  # a peer bootstrapped meanwhile; the main lock decides from here
        changed = _atomic.remove_file(shape.intent_path)
        text = _atomic.read_bytes(shape.exclude_path)
        if text is not None and _exclude.find(text, shape.worktree_id) is not None:
            remaining, _gone = _exclude.remove(text, shape.worktree_id)
            _write_exclude(shape, remaining)
            changed = True
        return changed


def rmdir_cursor(shape: Shape) -> bool:
    """One non-recursive ``rmdir`` of ``.cursor/``; whether it is gone.

    The cleanup intent goes with the directory, or as soon as the directory holds something of
    the operator's (it is theirs now); a peer's lock in the making keeps it for a later retry.
    """
    try:
        os.rmdir(shape.cursor_dir)
    except FileNotFoundError:
        pass
    except OSError as error:
        if error.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.EBUSY, errno.ENOTDIR):
            raise
        with contextlib.suppress(OSError):
            if any(not name.startswith(FUSION_PREFIX) for name in os.listdir(shape.cursor_dir)):
                os.unlink(shape.intent_path)
        return False  # benign: retried by a later reconciliation while the intent stays
    with contextlib.suppress(FileNotFoundError):
        os.unlink(shape.intent_path)
    return True
