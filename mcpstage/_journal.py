"""The journal: how a config mutation survives a crash at any instant, and how it is resolved.

Theory of operation
-------------------
Every config write is one :func:`commit`, made under the main lock:

1. the manifest is replaced with ``pending = {kind, raw, seq, leases}``: the exact bytes about
   to be written and the lease set they encode (crash point ``<kind>.pending-written``);
2. the config is atomically replaced with ``raw`` (or unlinked when ``raw`` is ``None``);
3. the manifest is replaced with ``pending`` promoted: ``confirmed = raw``, ``seq``, ``leases``.

A crash therefore leaves the config at the previous or the intended bytes (each replacement is
one ``rename``), and the manifest says which two those are. :func:`recover` (pure; run first by
every locked operation) compares the current bytes with them:

- equal to ``pending.raw``: the write happened; promote (leases and confirmed move together);
- equal to ``confirmed``: the write never happened; discard ``pending``;
- anything else: bytes fusion did not write, an *operator edit*. It is latched
  (``operator_edit``; ``confirmed`` becomes those bytes) and never restored over: later writes
  take operator content from them, and the final cleanup no longer restores the baseline.

Then the quarantine rule: current bytes that do not parse quarantine the worktree (no config
write until repaired); a quarantine clears when the config is deleted or parses with no
``fusion-custom-tools-*`` server. A commit whose bytes equal the confirmed ones writes only the
manifest.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from . import _atomic, _config, _manifest
from ._crash import crash_point
from ._manifest import Lease, Pending, Quarantine, State
from ._shape import TEMP_PREFIX, Shape


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
        reason = "the operator's .cursor/mcp.json does not parse as a JSON object"
        state = replace(state, quarantine=Quarantine(since=now, reason=reason))
        outcomes.append("quarantined")
    return Recovery(state, tuple(outcomes))


def commit(
    shape: Shape, state: State, *, kind: str, raw: bytes | None, leases: tuple[Lease, ...]
) -> State:
    """Journal, write and promote one config mutation; the promoted state."""
    assert state.pending is None and state.quarantine is None
    leases = tuple(sorted(leases, key=lambda lease: lease.key))
    if raw == state.confirmed:
        return _manifest.save(shape, replace(state, leases=leases))
    pending = Pending(kind=kind, raw=raw, seq=state.seq + 1, leases=leases)
    _manifest.save(shape, replace(state, pending=pending), step=f"{kind}.pending-written")
    if raw is None:
        crash_point(f"{kind}.config-temp-written")  # the same step: just before the change
        _atomic.remove_file(shape.config_path)
    else:
        _atomic.replace_bytes(
            shape.config_path, raw, temp_prefix=TEMP_PREFIX, step=kind, mode=0o644
        )
    crash_point(f"{kind}.config-replaced")
    promoted = replace(state, confirmed=raw, seq=pending.seq, leases=leases, pending=None)
    return _manifest.save(shape, promoted, step=f"{kind}.promoted")
