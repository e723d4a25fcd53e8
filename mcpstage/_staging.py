"""The operations: stage, dispose, heartbeat and reconcile a worktree's leases.

Theory of operation
-------------------
Every operation that writes runs the same frame (:func:`_locked`):

- resolve the git shape; ``stage`` also refuses a tracked ``.cursor/mcp.json`` and a server
  entry JSON cannot hold before it writes anything; every operation refuses a symlinked or
  odd ``.cursor``/``mcp.json``, before taking the main lock and again once it holds it;
- bootstrap (``stage``, or anyone who finds a manifest whose exclusion marker went missing):
  marker, then ``.cursor/``, under the bootstrap lock (``_bootstrap``);
- take the main lock and re-check the marker under it: a peer's final cleanup may have removed
  marker and ``.cursor/`` between our bootstrap and our lock, and then we bootstrap again. The
  marker is removed only under the main lock, so while we hold it every file we write is
  excluded from git;
- recover: resolve a pending journal entry and latch operator edits or a quarantine
  (``_journal.recover``, on a settled read: ``_journal.look``), and persist what it decided;
- mutate through ``_journal.commit`` (which recomposes when an operator's save lands during
  the write); when the last lease goes, the config gets its final bytes and
  ``_cleanup.finish`` removes manifest and marker; release; ``rmdir``.

A first stage writes the manifest with the byte-exact baseline before any config write. A
stage that fails after bootstrapping (a refusal, an I/O error) is undone like a reconciliation
without reaping: with no lease left, the final cleanup runs, so no exclusion block or record is
left behind. A quarantined worktree refuses staging and never has its config written: disposing
there only drops the lease from the manifest, and the manifest and marker stay until a
reconciliation sees the config deleted or repaired.

Fusion servers in a config that no manifest records (the manifest was removed, or an editor
saved a stale buffer after a cleanup) are quarantined too (:func:`_orphaned`), by ``stage`` and
by reconciliation, so their exclusion stays until the operator removes them or the config.

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

from . import _bootstrap, _cleanup, _config, _journal, _locks, _manifest, _owner
from ._errors import (
    BusyError,
    LeaseNotFoundError,
    QuarantinedError,
    RefusedError,
    StageError,
    UsageError,
)
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
        check_cursor_dir(shape)
        if bootstrap:
            _bootstrap.ensure(shape, wait=wait)
        elif not os.path.isdir(shape.cursor_dir):
            return None
        try:
            held = _locks.acquire(_bootstrap.main_lock(shape), wait=wait)
        except FileNotFoundError:
            continue  # .cursor/ went away (a peer's final cleanup): bootstrap again
        try:
            check_cursor_dir(shape)  # swapped for a symlink while we took the lock?
        except RefusedError:
            _locks.release(held, wait=wait)
            raise
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
        held = None
        with contextlib.suppress(RefusedError):
            check_cursor_dir(shape)
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


def _orphaned(shape: Shape, current: bytes | None) -> State:
    """Record fusion servers no manifest knows of as a quarantine: the exclusion stays.

    The bytes count as an operator edit (fusion did not write them as far as anyone knows), so
    the final cleanup keeps whatever the operator makes of them; no baseline is kept, so a
    config the operator deletes stays deleted.
    """
    quarantine = _manifest.Quarantine(since=time.time(), reason=_journal.ORPHANED)
    state = State(None, current, operator_edit=True, quarantine=quarantine)
    return _manifest.save(shape, state)


def _settle(
    frame: _Frame,
    state: State,
    leases: tuple[Lease, ...],
    *,
    kind: str,
    wait: float,
    once: bool = False,
) -> tuple[State | None, tuple[str, ...]]:
    """Make ``leases`` the live set; run the final cleanup when none is left.

    The state left (``None``: cleaned up) and what saves landing meanwhile latched.
    """
    found: list[str] = []
    for _attempt in range(ATTEMPTS):
        if state.quarantine is not None:
            return _manifest.save(frame.shape, replace(state, leases=leases)), tuple(found)
        if leases:
            committed = _journal.commit(
                frame.shape, state, kind=kind, leases=leases, target=_composer(leases)
            )
            found.extend(committed.outcomes)
            state = committed.state
            if state.quarantine is not None:
                continue  # drop the leases in the manifest only
            return state, tuple(found)
        committed = _journal.commit(frame.shape, state, kind=kind, leases=(), target=_final)
        found.extend(committed.outcomes)
        state = committed.state
        if state.quarantine is not None:
            continue
        rmdir = _cleanup.finish(frame.shape, wait=wait, once=once)
        if rmdir is not None:
            frame.rmdir = rmdir
            return (None if not os.path.exists(frame.shape.state_path) else state), tuple(found)
        # Fusion servers came back after the final write (a save of a stale buffer): again.
        recovery = _recover(frame.shape, state, _journal.look(frame.shape))
        found.extend(recovery.outcomes)
        state = recovery.state
    raise BusyError(f"busy: {frame.shape.config_path} kept getting fusion servers back")


def _composer(leases: tuple[Lease, ...]) -> _journal.Target:
    return lambda state: _config.compose(state.confirmed, leases)


def _final(state: State) -> bytes | None:
    return _config.final(state.confirmed, state.baseline, state.operator_edit)


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
    _manifest.check_entry(entry)
    owner = _owner.process() if owner is None else owner
    with _locked(shape, wait=wait, bootstrap=True) as frame:
        assert frame is not None
        try:
            return _stage(frame, entry, key, owner, lease_ttl)
        except BaseException:
            # Leave nothing of a stage that failed: with no lease left, clean up as if disposed.
            with contextlib.suppress(StageError, OSError):
                _tidy(frame, reap=False, wait=wait)
            raise


def _stage(
    frame: _Frame, entry: ServerEntry, key: str, owner: _owner.Process, lease_ttl: float
) -> Outcome:
    shape = frame.shape
    current = _journal.look(shape)
    state = _manifest.load(shape)
    if state is None:
        if _config.holds_fusion(current):
            _orphaned(shape, current)
            raise QuarantinedError(f"quarantined: {_journal.ORPHANED}; nothing staged")
        if current is not None and _config.parse(current) is None:
            raise QuarantinedError(
                f"quarantined: {shape.config_path} does not parse as a JSON object; nothing staged"
            )
        state = _manifest.save(
            shape, State(baseline=current, confirmed=current), step="stage.baseline-written"
        )
    recovery = _recover(shape, state, current)
    state = recovery.state
    if state.quarantine is not None:
        raise QuarantinedError(_refusal(shape, state.quarantine))
    if state.lease(key) is not None:
        raise UsageError(f"usage: {key} is already leased")
    now = time.time()
    lease = Lease(key, entry, owner, created_at=now, heartbeat_at=now, ttl=lease_ttl)
    leases = (*state.leases, lease)
    committed = _journal.commit(shape, state, kind="stage", target=_composer(leases), leases=leases)
    if committed.state.quarantine is not None:
        raise QuarantinedError(_refusal(shape, committed.state.quarantine))
    return Outcome(shape, lease, committed.state, recovery.outcomes + committed.outcomes)


def _refusal(shape: Shape, quarantine: _manifest.Quarantine) -> str:
    if quarantine.reason == _journal.UNPARSABLE:
        what = f"{shape.config_path} does not parse"
    else:
        what = quarantine.reason
    return (
        f"quarantined: {what}; staging refused until it is deleted or valid JSON without "
        "fusion-custom-tools-* servers"
    )


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
        recovery = _recover(shape, state, _journal.look(shape))
        state = recovery.state
        lease = state.lease(key)
        if lease is None:
            raise LeaseNotFoundError(f"not found: no lease {key} in {shape.worktree}")
        leases = tuple(each for each in state.leases if each.key != key)
        left, found = _settle(frame, state, leases, kind="dispose", wait=wait, once=once)
        return Outcome(shape, lease, left, recovery.outcomes + found, cleaned=left is None)


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
        recovery = _recover(shape, state, _journal.look(shape))
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
        check_cursor_dir(shape)
        if not os.path.lexists(shape.cursor_dir):
            removed = _bootstrap.remove_stale_marker(shape, wait=wait)
            if os.path.lexists(shape.cursor_dir):
                continue  # a peer bootstrapped meanwhile
            return Outcome(shape, None, None, cleaned=removed)
        with _locked(shape, wait=wait) as frame:
            if frame is None:
                continue
            return _tidy(frame, reap=reap, wait=wait)
    raise BusyError(f"busy: {shape.worktree} kept changing under reconciliation")


def _tidy(frame: _Frame, *, reap: bool, wait: float) -> Outcome:
    """Reconciliation under the main lock (also what undoes a failed stage, with no reaping)."""
    shape = frame.shape
    state = _manifest.load(shape)
    if state is None:
        # An interrupted bootstrap or cleanup: no lease can exist, finish removing.
        leftovers = _bootstrap.read_marker(shape) is not None
        rmdir = _cleanup.finish(shape, wait=wait)
        if rmdir is None:  # fusion servers without a record: keep the exclusion, say so
            return Outcome(shape, None, _orphaned(shape, _journal.look(shape)), ("quarantined",))
        frame.rmdir = rmdir
        return Outcome(shape, None, None, cleaned=leftovers or frame.rmdir)
    recovery = _recover(shape, state, _journal.look(shape))
    state = recovery.state
    now = time.time()
    dead = tuple(x.key for x in state.leases if reap and lease_is_dead(x, now=now))
    if state.quarantine is not None and not dead:
        return Outcome(shape, None, state, recovery.outcomes)
    if dead or not state.leases:
        leases = tuple(x for x in state.leases if x.key not in dead)
        left, found = _settle(frame, state, leases, kind="reap", wait=wait)
        outcomes = recovery.outcomes + found
        return Outcome(shape, None, left, outcomes, dead, cleaned=left is None)
    return Outcome(shape, None, state, recovery.outcomes)
