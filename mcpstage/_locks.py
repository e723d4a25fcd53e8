"""Lock directories whose owners are on disk: pid, hostname, acquisition time, TTL.

Theory of operation
-------------------
A lock is a directory (``.cursor/.fusion-mcp.lock``, or the bootstrap lock in the git common
directory) that exists exactly while someone holds it. It holds one empty directory whose *name*
is the owner record (:class:`LockOwner`: pid, hostname, boot id, start time, acquisition time,
TTL, a random token). Only directories, never files: ``git status`` never shows an empty
directory, so a lock is invisible to git even in the instant after the final cleanup removed
the exclusion marker and before the lock is released.

Acquire: build ``<lock>.new.<tmp>/<owner>`` and ``rename(2)`` it onto the lock path. Renaming a
directory onto a non-empty directory fails (``ENOTEMPTY``/``EEXIST``), so exactly one contender
wins, and the owner record is in place at the instant the lock exists (a crash can leave a
stray ``.new.`` directory, never an ownerless lock).

Contenders retry with jittered backoff for a brief window (``wait``), then give up
(:class:`BusyError`). While waiting they may *reclaim* the lock only when its owner is provably
gone: a process on this host that is dead (see ``_owner``), or an owner of any host whose
critical-section TTL has expired since it acquired (an acquisition time later than now, from a
clock running ahead, counts as the lock directory's modification time). A lock directory
without a readable owner record, or anything else at the lock's name (a file, a symlink), is
judged by its age alone and reclaimed with whatever it holds once older than the TTL;
:func:`inspect` is that one judgement, for ``status`` and for contenders alike. Reclaim and release move the lock directory
aside (``<lock>.old.<tmp>``) and then delete it; both run under an ``flock`` of the lock's parent
directory, so judging an owner and moving its lock away is one step on this kernel (a reclaimer
can never move away a lock that a third process took after the judgement). The ``flock`` guard
is held for a few system calls only and dies with its process.

:func:`try_acquire` is the process-exit backstop's single attempt: no retry, no reclaim.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import math
import os
import random
import secrets
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import quote, unquote

from . import _atomic, _owner
from ._crash import crash_point
from ._errors import BusyError

DEFAULT_TTL = 30.0
DEFAULT_WAIT = 10.0
OWNER_PREFIX = "owner,"


@dataclass(frozen=True)
class LockOwner:
    """Who holds a lock, recorded as the name of the directory inside it."""

    process: _owner.Process
    acquired_at: float  # seconds since the epoch
    ttl: float  # the critical section's bound; past it anyone may reclaim
    token: str

    def encode(self) -> str:
        fields = (
            ("pid", str(self.process.pid)),
            ("start", str(self.process.start)),
            ("at", f"{self.acquired_at:.6f}"),
            ("ttl", f"{self.ttl:g}"),
            ("token", self.token),
            ("boot", self.process.boot_id),
            ("host", quote(self.process.hostname, safe="")),
        )
        return OWNER_PREFIX + ",".join(f"{key}={value}" for key, value in fields)

    @staticmethod
    def decode(name: str) -> LockOwner | None:
        if not name.startswith(OWNER_PREFIX):
            return None
        fields = dict(part.partition("=")[::2] for part in name[len(OWNER_PREFIX) :].split(","))
        try:
            process = _owner.Process(
                pid=int(fields["pid"]),
                hostname=unquote(fields["host"]),
                boot_id=fields.get("boot", ""),
                start=int(fields.get("start", "0")),
            )
            at, ttl = float(fields["at"]), float(fields["ttl"])
        except (KeyError, ValueError):
            return None
        if not (math.isfinite(at) and math.isfinite(ttl) and at >= 0 and ttl >= 0):
            return None  # an unreadable record: the lock is judged as ownerless
        return LockOwner(process, at, ttl, fields["token"])


@dataclass(frozen=True)
class LockSpec:
    """A lock: its directory, its TTL, and the label its crash points carry."""

    path: str
    label: str
    ttl: float = DEFAULT_TTL

    @property
    def parent(self) -> str:
        return os.path.dirname(self.path)

    @property
    def new_prefix(self) -> str:
        return os.path.basename(self.path) + ".new."

    @property
    def old_prefix(self) -> str:
        return os.path.basename(self.path) + ".old."


@dataclass(frozen=True)
class Held:
    """A lock this process holds."""

    spec: LockSpec
    owner: LockOwner


@dataclass(frozen=True)
class LockView:
    """What a lock looks like from outside (``status``, reclaim decisions)."""

    path: str
    state: str  # "free", "held" or "stale"
    owner: LockOwner | None
    age: float | None  # seconds since acquisition (or since the directory changed)
    reason: str  # why it is stale; "" otherwise


def inspect(spec: LockSpec, *, now: float | None = None) -> LockView:
    """The lock's state without touching it (what acquiring would make of it)."""
    now = time.time() if now is None else now
    try:
        found = os.lstat(spec.path)
        names = os.listdir(spec.path) if stat.S_ISDIR(found.st_mode) else None
    except FileNotFoundError:
        return LockView(spec.path, "free", None, None, "")
    except NotADirectoryError:
        names = None  # replaced by a file between the two calls
    changed = found.st_mtime
    if names is None:
        # Something else holds the name (a file, a symlink): it blocks acquisition like an
        # ownerless lock, and goes like one.
        age = now - changed
        if age > spec.ttl:
            return LockView(
                spec.path, "stale", None, age, "not a lock directory, older than its TTL"
            )
        return LockView(spec.path, "held", None, age, "not a lock directory")
    owners = [owner for owner in map(LockOwner.decode, names) if owner is not None]
    if not owners:
        # Never made by this protocol; judged by age alone.
        age = now - changed
        if age > spec.ttl:
            return LockView(spec.path, "stale", None, age, "ownerless lock older than its TTL")
        return LockView(spec.path, "held", None, age, "")
    owner = max(owners, key=lambda each: each.acquired_at)
    # An acquisition time after now (an owner whose clock runs ahead) counts as the time the
    # directory was made, by the filesystem's clock: skew cannot stretch the TTL.
    at = min(owner.acquired_at, changed) if owner.acquired_at > now else owner.acquired_at
    age = now - at
    if _owner.is_alive(owner.process) is False:
        return LockView(spec.path, "stale", owner, age, "owner process is dead")
    if age > owner.ttl:
        return LockView(spec.path, "stale", owner, age, "critical-section TTL expired")
    return LockView(spec.path, "held", owner, age, "")


@contextlib.contextmanager
def _guard(directory: str, deadline: float) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``directory`` (``FileNotFoundError`` if it went away)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise BusyError(f"busy: {directory} stayed guarded by a peer") from None
                time.sleep(0.001)
            except OSError as error:
                if error.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
                    break  # no flock here: the rename protocol alone still decides ownership
                raise
        held, current = os.fstat(fd), os.stat(directory)
        if (held.st_dev, held.st_ino) != (current.st_dev, current.st_ino):
            raise FileNotFoundError(errno.ENOENT, "directory was replaced", directory)
        yield
    finally:
        os.close(fd)


def _attempt(spec: LockSpec) -> Held | None:
    """One acquisition attempt; ``FileNotFoundError`` when the parent directory is gone."""
    if os.path.lexists(spec.path):
        return None
    staging = os.path.join(spec.parent, _atomic.temp_name(spec.new_prefix))
    owner = LockOwner(_owner.process(), time.time(), spec.ttl, secrets.token_hex(8))
    os.mkdir(staging)
    try:
        os.mkdir(os.path.join(staging, owner.encode()))
        crash_point(f"{spec.label}-lock.staged")
        os.rename(staging, spec.path)
    except OSError as error:
        _atomic.remove_tree(staging)
        if error.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
            return None
        raise
    crash_point(f"{spec.label}-lock.acquired")
    return Held(spec, owner)


def _move_aside(spec: LockSpec) -> str:
    trash = os.path.join(spec.parent, _atomic.temp_name(spec.old_prefix))
    os.rename(spec.path, trash)
    return trash


def _reclaim_stale(spec: LockSpec, deadline: float) -> bool:
    """Move a stale lock away (judged and moved under the guard); whether it was."""
    with _guard(spec.parent, deadline):
        view = inspect(spec)
        if view.state != "stale":
            return False
        trash = _move_aside(spec)
    _atomic.remove_tree(trash)
    return True


def acquire(spec: LockSpec, *, wait: float = DEFAULT_WAIT) -> Held:
    """Take the lock, retrying for ``wait`` seconds and reclaiming a provably stale owner.

    Raises ``BusyError`` when a live owner keeps it, ``FileNotFoundError`` when the lock's
    parent directory does not exist (the caller bootstraps again).
    """
    deadline = time.monotonic() + wait
    delay = 0.002
    while True:
        held = _attempt(spec)
        if held is not None:
            return held
        if _reclaim_stale(spec, deadline):
            continue
        if time.monotonic() >= deadline:
            view = inspect(spec)
            who = "an unknown owner"
            if view.owner is not None:
                who = f"pid {view.owner.process.pid} on {view.owner.process.hostname}"
            elif view.reason:
                who = f"something that is {view.reason}"
            raise BusyError(f"busy: {spec.path} is held by {who} (retried {wait:g} s)")
        time.sleep(random.uniform(delay / 2, delay))
        delay = min(delay * 2, 0.05)


def try_acquire(spec: LockSpec) -> Held | None:
    """One attempt, no retry, no reclaim (the process-exit backstop); ``None`` when taken."""
    try:
        return _attempt(spec)
    except FileNotFoundError:
        return None


def still_held(held: Held) -> bool:
    """Whether the lock is still ours (nobody reclaimed it after our TTL)."""
    return os.path.isdir(os.path.join(held.spec.path, held.owner.encode()))


def release(held: Held, *, wait: float = DEFAULT_WAIT) -> bool:
    """Give the lock up; ``False`` if it was no longer ours (then nothing is touched)."""
    spec = held.spec
    try:
        with _guard(spec.parent, time.monotonic() + wait):
            if not still_held(held):
                return False
            trash = _move_aside(spec)
    except FileNotFoundError:
        return False
    crash_point(f"{spec.label}-lock.trashed")
    _atomic.remove_tree(trash)
    return True


def sweep(spec: LockSpec) -> list[str]:
    """Remove lock directories in the making or moved aside by dead processes."""
    return _atomic.sweep(spec.parent, (spec.new_prefix, spec.old_prefix), max_age=spec.ttl)


@contextlib.contextmanager
def held(spec: LockSpec, *, wait: float = DEFAULT_WAIT) -> Iterator[Held]:
    """``with held(spec):`` acquire, and release on the way out."""
    lock = acquire(spec, wait=wait)
    try:
        yield lock
    finally:
        release(lock, wait=wait)
