"""The operations: stage, dispose, heartbeat and reconcile a worktree's leases.

Theory of operation
-------------------
Every operation that writes runs the same frame (:func:`_locked`):

- resolve the git shape; ``stage`` also refuses a tracked ``.cursor/mcp.json`` and a symlinked
  or odd ``.cursor``/``mcp.json`` before it writes anything;
- bootstrap (``stage``, or anyone who finds a manifest whose exclusion marker went missing):
  marker, then ``.cursor/``, under the bootstrap lock (``_bootstrap``);
- take the main lock and re-check the marker under it: a peer's final cleanup may have removed
  marker and ``.cursor/`` between our bootstrap and our lock, and then we bootstrap again. The
  marker is removed only under the main lock, so while we hold it every file we write is
  excluded from git;
- recover: resolve a pending journal entry and latch operator edits or a quarantine
  (``_journal.recover``), and persist what it decided;
- mutate through ``_journal.commit``; when the last lease goes, the config gets its final
  bytes and ``_cleanup.finish`` removes manifest and marker; release; ``rmdir``.

A first stage writes the manifest with the byte-exact baseline before any config write. A
quarantined worktree refuses staging and never has its config written: disposing there only
drops the lease from the manifest, and the manifest and marker stay until a reconciliation sees
the config deleted or repaired.

Reconciliation is the crash-recovery owner: besides recovering, it reaps leases whose owner is
gone (a dead process on this host; past the heartbeat TTL for another host), resumes an
interrupted bootstrap or cleanup (a marker or ``.cursor/`` left without a manifest), and retries
an ``rmdir`` left pending by a cleanup intent.

``once=True`` (the process-exit backstop) makes exactly one attempt at the free main lock: it
never bootstraps, never reclaims a stale lock and never writes when a peer owns the lock.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace

from . import _atomic, _bootstrap, _cleanup, _config, _journal, _locks, _manifest, _owner
from ._errors import BusyError, LeaseNotFoundError, QuarantinedError, RefusedError, UsageError
from ._manifest import Lease, ServerEntry, State
from ._shape import Shape, check_cursor_dir, config_is_tracked, resolve

DEFAULT_LEASE_TTL = 120.0
ATTEMPTS = 20


def new_key() -> str:
    """A fresh ``fusion-custom-tools-<uuid>`` server key."""
    return f"{_manifest.KEY_PREFIX}{uuid.uuid4()}"


@dataclass(frozen=True)
class Outcome:
    """What an operation did: the lease it is about, the state left, what recovery found."""

    shape: Shape
    lease: Lease | None
    state: State | None  # None: no manifest any more (cleaned up) or never
    recovered: tuple[str, ...] = ()
    reaped: tuple[str, ...] = ()
    cleaned: bool = False  # the final cleanup ran
    done: bool = True  # False: the backstop found the lock taken and did nothing


class _Frame:
    """The locked part of an operation: the lock, and whether to rmdir after releasing it."""

    def __init__(self, shape: Shape, held: _locks.Held) -> None:
        self.shape = shape
        self.held = held
        self.rmdir = False


def _take(shape: Shape, *, wait: float, bootstrap: bool) -> _locks.Held | None:
    """The main lock with the marker verified; ``None`` when there is nothing to lock."""
    for _attempt in range(ATTEMPTS):
        if bootstrap:
            _bootstrap.ensure(shape, wait=wait)
        elif not os.path.isdir(shape.cursor_dir):
            return None
        try:
            held = _locks.acquire(_bootstrap.main_lock(shape), wait=wait)
        except FileNotFoundError:
            continue  # .cursor/ went away (a peer's final cleanup): bootstrap again
        if _bootstrap.read_marker(shape) is None and (
            bootstrap or os.path.exists(shape.state_path)
        ):
            _locks.release(held, wait=wait)
            bootstrap = True  # session files without their exclusion: restore it first
            continue
        return held
    raise BusyError(f"busy: {shape.worktree} kept being cleaned up under us")


@contextlib.contextmanager
def _locked(
    shape: Shape, *, wait: float, bootstrap: bool = False, once: bool = False
) -> Iterator[_Frame | None]:
    if once:
        held = _locks.try_acquire(_bootstrap.main_lock(shape))
        if held is not None and _bootstrap.read_marker(shape) is None:
            _locks.release(held, wait=wait)
            held = None  # the backstop never bootstraps
    else:
        held = _take(shape, wait=wait, bootstrap=bootstrap)
    if held is None:
        yield None
        return
    frame = _Frame(shape, held)
    try:
        yield frame
    finally:
        _cleanup.release_and_rmdir(shape, held, rmdir=frame.rmdir, wait=wait)


def _recover(shape: Shape, state: State, current: bytes | None) -> _journal.Recovery:
    recovery = _journal.recover(state, current, now=time.time())
    if recovery.changed:
        _manifest.save(shape, recovery.state)
    return recovery


def _settle(
    frame: _Frame,
    state: State,
    current: bytes | None,
    leases: tuple[Lease, ...],
    *,
    kind: str,
    wait: float,
    once: bool = False,
) -> State | None:
    """Make ``leases`` the live set; run the final cleanup when none is left."""
    if state.quarantine is not None:
        return _manifest.save(frame.shape, replace(state, leases=leases))
    if leases:
        composed = _config.compose(current, leases)
        return _journal.commit(frame.shape, state, kind=kind, raw=composed, leases=leases)
    final = _config.final(current, state.baseline, state.operator_edit)
    state = _journal.commit(frame.shape, state, kind=kind, raw=final, leases=())
    frame.rmdir = _cleanup.finish(frame.shape, wait=wait, once=once)
    return None if not os.path.exists(frame.shape.state_path) else state


def stage(
    worktree: str | os.PathLike[str],
    entry: ServerEntry,
    *,
    key: str | None = None,
    owner: _owner.Process | None = None,
    lease_ttl: float = DEFAULT_LEASE_TTL,
    wait: float = _locks.DEFAULT_WAIT,
) -> Outcome:
    """Stage ``entry`` under a new (or the given) key; the lease in ``Outcome.lease``.

    Raises ``RefusedError`` (tracked config, odd ``.cursor``), ``QuarantinedError`` (the config
    does not parse), ``BusyError``, ``UsageError`` (bad key, key already leased).
    """
    shape = resolve(worktree)
    key = new_key() if key is None else _manifest.check_key(key)
    check_cursor_dir(shape)
    if config_is_tracked(shape):
        raise RefusedError(
            f"refused: {shape.config_path} is tracked by git; fusion never stages into it"
        )
    owner = _owner.process() if owner is None else owner
    with _locked(shape, wait=wait, bootstrap=True) as frame:
        assert frame is not None
        current = _atomic.read_bytes(shape.config_path)
        state = _manifest.load(shape)
        if state is None:
            if current is not None and _config.parse(current) is None:
                frame.rmdir = _cleanup.finish(shape, wait=wait)  # undo our bootstrap
                raise QuarantinedError(
                    f"quarantined: {shape.config_path} does not parse as a JSON object; "
                    "nothing staged"
                )
            state = _manifest.save(
                shape, State(baseline=current, confirmed=current), step="stage.baseline-written"
            )
        recovery = _recover(shape, state, current)
        state = recovery.state
        if state.quarantine is not None:
            raise QuarantinedError(
                f"quarantined: {shape.config_path} does not parse; staging refused until it is "
                "deleted or valid JSON without fusion-custom-tools-* servers"
            )
        if state.lease(key) is not None:
            raise UsageError(f"usage: {key} is already leased")
        now = time.time()
        lease = Lease(key, entry, owner, created_at=now, heartbeat_at=now, ttl=lease_ttl)
        leases = (*state.leases, lease)
        state = _journal.commit(
            shape, state, kind="stage", raw=_config.compose(current, leases), leases=leases
        )
        return Outcome(shape, lease, state, recovery.outcomes)


def dispose(
    worktree: str | os.PathLike[str],
    key: str,
    *,
    wait: float = _locks.DEFAULT_WAIT,
    once: bool = False,
) -> Outcome:
    """Drop lease ``key``; the last lease's dispose runs the final cleanup.

    Under quarantine only the manifest changes (``Outcome.state.quarantine`` is set). With
    ``once`` (the backstop), ``Outcome.done`` is ``False`` when the lock was not free.
    Raises ``LeaseNotFoundError``, ``BusyError``, ``UsageError`` (malformed key).
    """
    shape = resolve(worktree)
    _manifest.check_key(key)
    with _locked(shape, wait=wait, once=once) as frame:
        if frame is None:
            if once:
                return Outcome(shape, None, None, done=False)
            raise LeaseNotFoundError(f"not found: no lease {key} in {shape.worktree}")
        state = _manifest.load(shape)
        if state is None:
            raise LeaseNotFoundError(f"not found: no lease {key} in {shape.worktree}")
        current = _atomic.read_bytes(shape.config_path)
        recovery = _recover(shape, state, current)
        state = recovery.state
        lease = state.lease(key)
        if lease is None:
            raise LeaseNotFoundError(f"not found: no lease {key} in {shape.worktree}")
        leases = tuple(each for each in state.leases if each.key != key)
        left = _settle(frame, state, current, leases, kind="dispose", wait=wait, once=once)
        return Outcome(shape, lease, left, recovery.outcomes, cleaned=left is None)


def heartbeat(
    worktree: str | os.PathLike[str], key: str, *, wait: float = _locks.DEFAULT_WAIT
) -> Outcome:
    """Record that lease ``key``'s owner is alive (its heartbeat time is now)."""
    shape = resolve(worktree)
    _manifest.check_key(key)
    with _locked(shape, wait=wait) as frame:
        state = None if frame is None else _manifest.load(shape)
        if state is None:
            raise LeaseNotFoundError(f"not found: no lease {key} in {shape.worktree}")
        recovery = _recover(shape, state, _atomic.read_bytes(shape.config_path))
        state = recovery.state
        lease = state.lease(key)
        if lease is None:
            raise LeaseNotFoundError(f"not found: no lease {key} in {shape.worktree}")
        lease = replace(lease, heartbeat_at=time.time())
        leases = tuple(lease if each.key == key else each for each in state.leases)
        state = _manifest.save(shape, replace(state, leases=leases))
        return Outcome(shape, lease, state, recovery.outcomes)


def lease_is_dead(lease: Lease, *, now: float) -> bool:
    """Whether the lease's owner is gone: dead on this host, or silent past its TTL elsewhere."""
    alive = _owner.is_alive(lease.owner)
    if alive is None:
        return now - lease.heartbeat_at > lease.ttl
    return not alive


def reconcile(
    worktree: str | os.PathLike[str], *, reap: bool = True, wait: float = _locks.DEFAULT_WAIT
) -> Outcome:
    """Recover, reap dead leases (``reap``), and finish interrupted bootstraps and cleanups."""
    shape = resolve(worktree)
    for _attempt in range(ATTEMPTS):
        if not os.path.lexists(shape.cursor_dir):
            removed = _bootstrap.remove_stale_marker(shape, wait=wait)
            if os.path.lexists(shape.cursor_dir):
                continue  # a peer bootstrapped meanwhile
            return Outcome(shape, None, None, cleaned=removed)
        with _locked(shape, wait=wait) as frame:
            if frame is None:
                continue
            state = _manifest.load(shape)
            if state is None:
                # An interrupted bootstrap or cleanup: no lease can exist, finish removing.
                leftovers = _bootstrap.read_marker(shape) is not None
                frame.rmdir = _cleanup.finish(shape, wait=wait)
                return Outcome(shape, None, None, cleaned=leftovers or frame.rmdir)
            current = _atomic.read_bytes(shape.config_path)
            recovery = _recover(shape, state, current)
            state = recovery.state
            now = time.time()
            dead = tuple(x.key for x in state.leases if reap and lease_is_dead(x, now=now))
            if state.quarantine is not None and not dead:
                return Outcome(shape, None, state, recovery.outcomes)
            if dead or not state.leases:
                leases = tuple(x for x in state.leases if x.key not in dead)
                left = _settle(frame, state, current, leases, kind="reap", wait=wait)
                return Outcome(shape, None, left, recovery.outcomes, dead, cleaned=left is None)
            return Outcome(shape, None, state, recovery.outcomes)
    raise BusyError(f"busy: {shape.worktree} kept changing under reconciliation")
