"""The lease manifest ``.cursor/.fusion-mcp-state.json``: the durable record of fusion's side.

Theory of operation
-------------------
The manifest is the only source of fusion content. It holds:

- ``leases``: every live session's key and *complete* server entry ``{command, args, env?}``
  (plus its owner process, creation and heartbeat times, heartbeat TTL), so any process can
  recompose any peer's entry: a peer can dispose without dropping another process's bridge;
- ``baseline``: the byte-exact config (or its absence) before the first stage, persisted before
  fusion's first config write; restored by the final cleanup unless an operator edit latched;
- ``confirmed``/``seq``: the config bytes fusion last confirmed (its own last write, or the
  operator's bytes once latched) and their sequence number;
- ``pending``: the journal of the one mutation in flight, ``{kind, raw, seq, leases}``: the
  intended config bytes and the lease set they encode (promoted together, or discarded together);
- ``operator_edit``: latched once bytes fusion did not write were found;
- ``quarantine``: set while the operator's config does not parse.

Bytes are stored exactly: ``{"utf8": text}`` when they decode as UTF-8, else
``{"base64": ...}``; ``null`` is an absent file. The manifest itself changes only by atomic
replacement (``_atomic.replace_bytes``), so every reader sees one complete version. Values are
frozen dataclasses; ``decode(encode(s)) == s``.

Decoding is strict, because the manifest is the only source of fusion content and an operator
may have edited it: every field must be there with its type (no bool for a number), times
finite and not negative, lease keys ``fusion-custom-tools-<uuid>`` (a lease named like an
operator's server would write over it), entries strings JSON can hold. Anything else is a
``CorruptStateError`` naming the file and the problem, and nothing is written. Lease times later
than now are cut back to the manifest's modification time (see :func:`load`).
"""

from __future__ import annotations

import base64
import json
import math
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from . import _atomic
from ._crash import crash_point
from ._errors import CorruptStateError, UsageError
from ._owner import Process
from ._shape import TEMP_PREFIX, Shape

VERSION = 1
KINDS = ("stage", "dispose", "reap")  # what a pending mutation can be
KEY_PREFIX = "fusion-custom-tools-"
_KEY = re.compile(
    r"^fusion-custom-tools-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
)


def check_key(key: str) -> str:
    """``key`` if it is a ``fusion-custom-tools-<uuid>`` key, else ``UsageError``."""
    if not _KEY.match(key):
        raise UsageError(f"usage: not a fusion-custom-tools-<uuid> key: {key!r}")
    return key


def _entry_problem(command: object, args: object, env: object) -> str | None:
    """What makes these not a server entry JSON can hold, or ``None``."""
    if not isinstance(command, str) or not command:
        return "the server command must be a non-empty string"
    if not isinstance(args, tuple) or not all(isinstance(arg, str) for arg in args):
        return "the server arguments must be strings"
    pairs_ok = isinstance(env, tuple) and all(
        isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(x, str) for x in pair)
        for pair in env
    )
    if env is not None and not pairs_ok:
        return "the server environment must map strings to strings"
    texts = [command, *args, *(text for pair in env or () for text in pair)]  # type: ignore[attr-defined]
    for text in texts:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return f"not valid UTF-8 text (JSON cannot hold it): {text!r}"
    return None


def check_entry(entry: ServerEntry) -> ServerEntry:
    """``entry`` if JSON can hold it, else ``UsageError``."""
    problem = _entry_problem(entry.command, entry.args, entry.env)
    if problem is not None:
        raise UsageError(f"usage: {problem}")
    return entry


@dataclass(frozen=True)
class ServerEntry:
    """A server entry exactly as it goes into ``mcpServers``."""

    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] | None = None  # None: no "env" key at all

    def to_json(self) -> dict[str, Any]:
        value: dict[str, Any] = {"command": self.command, "args": list(self.args)}
        if self.env is not None:
            value["env"] = dict(self.env)
        return value

    @staticmethod
    def from_json(value: Any) -> ServerEntry:
        if not isinstance(value, Mapping):
            raise ValueError("a server entry must be an object")
        args, env = value.get("args", []), value.get("env")
        if not isinstance(args, list) or (env is not None and not isinstance(env, Mapping)):
            raise ValueError("a server entry needs a list of args and an object of env")
        entry = ServerEntry(
            command=value.get("command"),  # type: ignore[arg-type]  # checked just below
            args=tuple(args),
            env=None if env is None else tuple(env.items()),
        )
        problem = _entry_problem(entry.command, entry.args, entry.env)
        if problem is not None:
            raise ValueError(problem)
        return entry


@dataclass(frozen=True)
class Lease:
    """One session's claim on a server key."""

    key: str
    entry: ServerEntry
    owner: Process
    created_at: float
    heartbeat_at: float
    ttl: float  # heartbeat TTL, for owners on other hosts


@dataclass(frozen=True)
class Pending:
    """The mutation in flight: the config bytes it writes and the leases they encode."""

    kind: str
    raw: bytes | None
    seq: int
    leases: tuple[Lease, ...]


@dataclass(frozen=True)
class Quarantine:
    since: float
    reason: str


@dataclass(frozen=True)
class State:
    """The whole manifest."""

    baseline: bytes | None
    confirmed: bytes | None
    seq: int = 0
    leases: tuple[Lease, ...] = ()
    pending: Pending | None = None
    operator_edit: bool = False
    quarantine: Quarantine | None = None

    def lease(self, key: str) -> Lease | None:
        return next((lease for lease in self.leases if lease.key == key), None)


def _raw_to_json(raw: bytes | None) -> Any:
    if raw is None:
        return None
    try:
        return {"utf8": raw.decode("utf-8")}
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(raw).decode("ascii")}


def _raw_from_json(value: Any) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, dict) and isinstance(value.get("utf8"), str):
        return str(value["utf8"]).encode("utf-8")
    if isinstance(value, dict) and isinstance(value.get("base64"), str):
        return base64.b64decode(str(value["base64"]), validate=True)
    raise ValueError(f"not a stored byte string: {value!r}")


def _field(document: Any, name: str, kind: type | tuple[type, ...], what: str) -> Any:
    """``document[name]`` if it is a ``kind`` (never a bool standing in for a number)."""
    if not isinstance(document, dict):
        raise ValueError(f"{what} must be an object")
    if name not in document:
        raise ValueError(f"{what} has no {name!r}")
    value = document[name]
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise ValueError(f"{what}: {name!r} must not be {value!r}")
    if not isinstance(value, kind):
        raise ValueError(f"{what}: {name!r} has the wrong type")
    return value


def _time(document: Any, name: str, what: str) -> float:
    value = float(_field(document, name, (int, float), what))
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{what}: {name!r} is not a time: {value!r}")
    return value


def _process_to_json(process: Process) -> dict[str, Any]:
    return {
        "pid": process.pid,
        "hostname": process.hostname,
        "boot_id": process.boot_id,
        "start": process.start,
    }


def _process_from_json(value: Any) -> Process:
    what = "a lease owner"
    return Process(
        pid=_field(value, "pid", int, what),
        hostname=_field(value, "hostname", str, what),
        boot_id=_field(value, "boot_id", str, what) if "boot_id" in value else "",
        start=_field(value, "start", int, what) if "start" in value else 0,
    )


def _lease_to_json(lease: Lease) -> dict[str, Any]:
    return {
        "entry": lease.entry.to_json(),
        "owner": _process_to_json(lease.owner),
        "created_at": lease.created_at,
        "heartbeat_at": lease.heartbeat_at,
        "ttl": lease.ttl,
    }


def _leases_to_json(leases: tuple[Lease, ...]) -> dict[str, Any]:
    return {lease.key: _lease_to_json(lease) for lease in sorted(leases, key=lambda x: x.key)}


def _leases_from_json(value: Any) -> tuple[Lease, ...]:
    if not isinstance(value, dict):
        raise ValueError("leases must be an object")
    leases = []
    for key, item in sorted(value.items()):
        if not _KEY.match(key):
            raise ValueError(f"not a fusion-custom-tools-<uuid> lease key: {key!r}")
        what = f"lease {key}"
        leases.append(
            Lease(
                key=key,
                entry=ServerEntry.from_json(_field(item, "entry", dict, what)),
                owner=_process_from_json(_field(item, "owner", dict, what)),
                created_at=_time(item, "created_at", what),
                heartbeat_at=_time(item, "heartbeat_at", what),
                ttl=_time(item, "ttl", what),
            )
        )
    return tuple(leases)


def encode(state: State) -> bytes:
    """The manifest's bytes."""
    pending = state.pending
    document = {
        "version": VERSION,
        "baseline": _raw_to_json(state.baseline),
        "confirmed": {"raw": _raw_to_json(state.confirmed), "seq": state.seq},
        "pending": None
        if pending is None
        else {
            "kind": pending.kind,
            "raw": _raw_to_json(pending.raw),
            "seq": pending.seq,
            "leases": _leases_to_json(pending.leases),
        },
        "operator_edit": state.operator_edit,
        "quarantine": None
        if state.quarantine is None
        else {"since": state.quarantine.since, "reason": state.quarantine.reason},
        "leases": _leases_to_json(state.leases),
    }
    return (json.dumps(document, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def decode(data: bytes) -> State:
    """The manifest from its bytes (``ValueError`` when malformed)."""
    try:
        document = json.loads(data)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    if not isinstance(document, dict):
        raise ValueError("the manifest must be a JSON object")
    if document.get("version") != VERSION:
        raise ValueError(f"unknown manifest version {document.get('version')!r}")
    confirmed = _field(document, "confirmed", dict, "the manifest")
    pending = _field(document, "pending", (dict, type(None)), "the manifest")
    quarantine = _field(document, "quarantine", (dict, type(None)), "the manifest")
    if pending is not None and _field(pending, "kind", str, "pending") not in KINDS:
        raise ValueError(f"pending: unknown kind {pending['kind']!r}")
    return State(
        baseline=_raw_from_json(_field(document, "baseline", (dict, type(None)), "the manifest")),
        confirmed=_raw_from_json(_field(confirmed, "raw", (dict, type(None)), "confirmed")),
        seq=_field(confirmed, "seq", int, "confirmed"),
        leases=_leases_from_json(_field(document, "leases", dict, "the manifest")),
        pending=None
        if pending is None
        else Pending(
            kind=pending["kind"],
            raw=_raw_from_json(_field(pending, "raw", (dict, type(None)), "pending")),
            seq=_field(pending, "seq", int, "pending"),
            leases=_leases_from_json(_field(pending, "leases", dict, "pending")),
        ),
        operator_edit=_field(document, "operator_edit", bool, "the manifest"),
        quarantine=None
        if quarantine is None
        else Quarantine(
            since=_time(quarantine, "since", "quarantine"),
            reason=_field(quarantine, "reason", str, "quarantine"),
        ),
    )


def _cut(value: float, written_at: float, now: float) -> float:
    return min(value, written_at) if value > now else value


def _clamped(lease: Lease, written_at: float, now: float) -> Lease:
    """A time after ``now`` counts as when the manifest was written, if that is earlier."""
    return replace(
        lease,
        heartbeat_at=_cut(lease.heartbeat_at, written_at, now),
        created_at=_cut(lease.created_at, written_at, now),
    )


def clamp(state: State, written_at: float, *, now: float) -> State:
    """``state`` with lease times from a clock ahead of ours cut back (see ``load``)."""
    pending = state.pending
    return replace(
        state,
        leases=tuple(_clamped(x, written_at, now) for x in state.leases),
        pending=None
        if pending is None
        else replace(pending, leases=tuple(_clamped(x, written_at, now) for x in pending.leases)),
    )


def load(shape: Shape) -> State | None:
    """The worktree's manifest, or ``None`` when there is none.

    A lease time later than now (a peer whose clock runs ahead) counts as the time the
    manifest was last written, by the filesystem's clock, so a skewed peer cannot keep a lease
    alive longer than its TTL; the next save stores the cut-back time.
    """
    try:
        with open(shape.state_path, "rb") as file:
            data = file.read()
            written_at = os.fstat(file.fileno()).st_mtime
    except FileNotFoundError:
        return None
    try:
        state = decode(data)
    except ValueError as error:
        raise CorruptStateError(
            f"corrupt lease manifest {shape.state_path} ({error}); repair or remove it"
        ) from error
    return clamp(state, written_at, now=time.time())


def save(shape: Shape, state: State, *, step: str | None = None) -> State:
    """Atomically replace the manifest with ``state``; fires crash point ``step`` after."""
    _atomic.replace_bytes(shape.state_path, encode(state), temp_prefix=TEMP_PREFIX, mode=0o644)
    if step is not None:
        crash_point(step)
    return state


def remove(shape: Shape) -> None:
    _atomic.remove_file(shape.state_path)
