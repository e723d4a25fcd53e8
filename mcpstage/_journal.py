"""The journal: how a config mutation survives a crash at any instant, and how it is resolved.

Theory of operation
-------------------
Every config write is one :func:`commit`, made under the main lock:

1. the manifest is replaced with ``pending = {kind, raw, seq, leases}``: the exact bytes about
   to be written and the lease set they encode (crash point ``<kind>.pending-written``);
2. the config is replaced with ``raw`` (or removed when ``raw`` is ``None``) by
   ``_atomic.swap``, only if it still holds the confirmed bytes ``raw`` was composed from;
3. the manifest is replaced with ``pending`` promoted: ``confirmed = raw``, ``seq``, ``leases``.

A crash therefore leaves the config at the previous or the intended bytes (each replacement is
one ``rename``), and the manifest says which two those are. :func:`recover` (pure; run first by
every locked operation) compares the current bytes with them:

- equal to ``pending.raw``: the write happened; promote (leases and confirmed move together);
- equal to ``confirmed``: the write never happened; discard ``pending``;
- anything else: bytes fusion did not write, an *operator edit*. It is latched
  (``operator_edit``; ``confirmed`` becomes those bytes) and never restored over: later writes
  take operator content from them, and the final cleanup no longer restores the baseline.

An operator's save that lands while a commit runs (after the operation read the config, before
the rename) is one more case of the last: step 2 reports it instead of writing over it, the
commit recovers against the config as it is now (latching the edit, or quarantining), and
composes again from it, until a write goes through with nothing landing in between. No save
that landed before the rename is lost.

Then the quarantine rule: current bytes that do not parse quarantine the worktree (no config
write until repaired); a quarantine clears when the config is deleted or parses with no
``fusion-custom-tools-*`` server. A commit whose bytes equal the confirmed ones writes only the
manifest.

Every read of the config goes through :func:`look`, which does not believe unparsable bytes at
once: an in-place save (truncate, then write) read in between looks like garbage for an
instant. Unparsable bytes count only once the file has not changed for :data:`SETTLE` seconds
(by its modification time; re-read until then, for at most :data:`SETTLE_LIMIT`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from . import _atomic, _config, _manifest
from ._crash import crash_point
from ._errors import BusyError
from ._manifest import Lease, Pending, Quarantine, State
from ._shape import TEMP_PREFIX, Shape, check_cursor_dir

SETTLE = 1.0  # seconds an unparsable config must stay unchanged before it counts
SETTLE_LIMIT = 5.0
RACES = 50  # saves landing during one commit before it gives up (busy)
UNPARSABLE = "the operator's .cursor/mcp.json does not parse as a JSON object"
ORPHANED = (
    "the operator's .cursor/mcp.json holds fusion-custom-tools-* servers that no lease "
    "manifest records"
)


def look(shape: Shape) -> bytes | None:
    """The config's bytes (``None``: no file), settled (see the module docstring)."""
    deadline = time.monotonic() + SETTLE_LIMIT
    while True:
        try:
            with open(shape.config_path, "rb") as file:
                data = file.read()
                changed = os.fstat(file.fileno()).st_mtime
        except FileNotFoundError:
            return None
        if _config.parse(data) is not None:
            return data
        young = time.time() - changed < SETTLE
        if not young or time.monotonic() >= deadline:
            return data
        crash_point("config.reread")
        time.sleep(0.02)


@dataclass(frozen=True)
class Recovery:
    """The state after recovery and what recovery found."""

    state: State
    outcomes: tuple[str, ...]  # of "promoted", "discarded", "operator-edit", "quarantined",
    # "unquarantined"; empty when nothing changed

    @property
    def changed(self) -> bool:
        return bool(self.outcomes)


def _latch(state: State, current: bytes | None) -> State:
    return replace(state, operator_edit=True, confirmed=current, seq=state.seq + 1, pending=None)


def recover(state: State, current: bytes | None, *, now: float) -> Recovery:
    """Resolve ``state`` against the config's current bytes (see the module docstring)."""
    outcomes: list[str] = []
    pending = state.pending
    if pending is not None:
        if current == pending.raw:
            state = replace(
                state, confirmed=pending.raw, seq=pending.seq, leases=pending.leases, pending=None
            )
            outcomes.append("promoted")
        elif current == state.confirmed:
            state = replace(state, pending=None)
            outcomes.append("discarded")
        else:
            state = _latch(state, current)
            outcomes.append("operator-edit")
    elif current != state.confirmed:
        state = _latch(state, current)
        outcomes.append("operator-edit")
    if state.quarantine is not None:
        if _config.clears_quarantine(current):
            state = replace(state, quarantine=None)
            outcomes.append("unquarantined")
    elif current is not None and _config.parse(current) is None:
        state = replace(state, quarantine=Quarantine(since=now, reason=UNPARSABLE))
        outcomes.append("quarantined")
    return Recovery(state, tuple(outcomes))


Target = Callable[[State], bytes | None]


def commit(
    shape: Shape, state: State, *, kind: str, target: Target, leases: tuple[Lease, ...]
) -> Recovery:
    """Journal, write and promote one config mutation; the promoted state.

    ``target(state)`` composes the bytes from ``state.confirmed`` (the operator's current
    bytes); it is called again whenever a save lands during the write. The returned state is
    quarantined (and the config untouched since) when such a save does not parse; its
    outcomes are what the races latched.
    """
    assert state.pending is None and state.quarantine is None
    leases = tuple(sorted(leases, key=lambda lease: lease.key))
    outcomes: list[str] = []
    for _race in range(RACES):
        raw = target(state)
        if raw == state.confirmed:
            return Recovery(_manifest.save(shape, replace(state, leases=leases)), tuple(outcomes))
        pending = Pending(kind=kind, raw=raw, seq=state.seq + 1, leases=leases)
        journaled = replace(state, pending=pending)
        _manifest.save(shape, journaled, step=f"{kind}.pending-written")
        if _atomic.swap(
            shape.config_path,
            raw,
            expected=state.confirmed,
            temp_prefix=TEMP_PREFIX,
            step=kind,
            mode=0o644,
        ):
            crash_point(f"{kind}.config-replaced")
            promoted = replace(state, confirmed=raw, seq=pending.seq, leases=leases, pending=None)
            state = _manifest.save(shape, promoted, step=f"{kind}.promoted")
            return Recovery(state, tuple(outcomes))
        # A save landed: recover against it exactly as after a crash at this step.
        check_cursor_dir(shape)
        recovery = recover(journaled, look(shape), now=time.time())
        state = _manifest.save(shape, recovery.state)
        outcomes.extend(recovery.outcomes)
        if state.pending is None and state.confirmed == raw and state.leases == leases:
            return Recovery(state, tuple(outcomes))  # the save was our very bytes: promoted
        if state.quarantine is not None:
            return Recovery(state, tuple(outcomes))
    raise BusyError(f"busy: {shape.config_path} kept changing while mcpstage wrote it")
