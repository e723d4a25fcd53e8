"""A read-only picture of a worktree's staging: leases, locks, quarantine, leftovers.

Theory of operation
-------------------
:func:`status` takes no lock and writes nothing, so it is safe to run at any time, next to a
crashed or a running peer. It reads the same files the protocol does (the marker block, the
manifest, both lock directories, the cleanup intent) and judges liveness the way reclaiming and
reaping do, so what it calls stale is what a contender may reclaim and what it calls dead is what
``reconcile`` will reap. :func:`to_json` is the machine-readable form (``mcpstage status --json``).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from . import _atomic, _bootstrap, _config, _locks, _manifest, _staging
from ._exclude import Marker
from ._manifest import Lease, State
from ._shape import Shape, resolve


@dataclass(frozen=True)
class LeaseStatus:
    lease: Lease
    dead: bool


@dataclass(frozen=True)
class Status:
    shape: Shape
    marker: Marker | None
    cursor_exists: bool
    config_exists: bool
    config_parses: bool | None  # None: no config
    state: State | None
    leases: tuple[LeaseStatus, ...]
    main_lock: _locks.LockView
    bootstrap_lock: _locks.LockView
    cleanup_intent: bool

    @property
    def quarantined(self) -> bool:
        return self.state is not None and self.state.quarantine is not None

    @property
    def needs_reconcile(self) -> bool:
        """Leftovers only ``reconcile`` resolves: a crash's or a dead owner's."""
        leftover_bootstrap = self.state is None and (self.marker is not None or self.cleanup_intent)
        return (
            leftover_bootstrap
            or (self.state is not None and self.state.pending is not None)
            or any(each.dead for each in self.leases)
            or (self.state is not None and not self.state.leases and not self.quarantined)
            or "stale" in (self.main_lock.state, self.bootstrap_lock.state)
        )


def status(worktree: str | os.PathLike[str]) -> Status:
    shape = resolve(worktree)
    now = time.time()
    state = _manifest.load(shape)
    config = _atomic.read_bytes(shape.config_path)
    leases = () if state is None else state.leases
    return Status(
        shape=shape,
        marker=_bootstrap.read_marker(shape),
        cursor_exists=os.path.isdir(shape.cursor_dir),
        config_exists=config is not None,
        config_parses=None if config is None else _config.parse(config) is not None,
        state=state,
        leases=tuple(LeaseStatus(x, _staging.lease_is_dead(x, now=now)) for x in leases),
        main_lock=_locks.inspect(_bootstrap.main_lock(shape), now=now),
        bootstrap_lock=_locks.inspect(_bootstrap.bootstrap_lock(shape), now=now),
        cleanup_intent=os.path.exists(shape.intent_path),
    )


def _lock_json(view: _locks.LockView) -> dict[str, Any]:
    owner = view.owner
    return {
        "path": view.path,
        "state": view.state,
        "age": view.age,
        "reason": view.reason or None,
        "owner": None
        if owner is None
        else {
            "pid": owner.process.pid,
            "hostname": owner.process.hostname,
            "acquired_at": owner.acquired_at,
            "ttl": owner.ttl,
        },
    }


def to_json(report: Status) -> dict[str, Any]:
    """The report as plain JSON values."""
    state = report.state
    shape = report.shape
    return {
        "worktree": shape.worktree,
        "git_dir": shape.git_dir,
        "common_dir": shape.common_dir,
        "worktree_id": shape.worktree_id,
        "linked": shape.linked,
        "exclusion": None
        if report.marker is None
        else {"path": shape.exclude_path, "cursor_created": report.marker.cursor_created},
        "cursor_dir": report.cursor_exists,
        "config": {"exists": report.config_exists, "parses": report.config_parses},
        "manifest": state is not None,
        "seq": None if state is None else state.seq,
        "pending": None if state is None or state.pending is None else state.pending.kind,
        "operator_edit": None if state is None else state.operator_edit,
        "quarantine": None
        if state is None or state.quarantine is None
        else {"since": state.quarantine.since, "reason": state.quarantine.reason},
        "leases": [
            {
                "key": each.lease.key,
                "entry": each.lease.entry.to_json(),
                "owner": {"pid": each.lease.owner.pid, "hostname": each.lease.owner.hostname},
                "created_at": each.lease.created_at,
                "heartbeat_at": each.lease.heartbeat_at,
                "dead": each.dead,
            }
            for each in report.leases
        ],
        "locks": {
            "main": _lock_json(report.main_lock),
            "bootstrap": _lock_json(report.bootstrap_lock),
        },
        "cleanup_intent": report.cleanup_intent,
        "needs_reconcile": report.needs_reconcile,
    }
