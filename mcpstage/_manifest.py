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
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import _atomic
from ._crash import crash_point
from ._errors import CorruptStateError, UsageError
from ._owner import Process
from ._shape import TEMP_PREFIX, Shape

VERSION = 1
KEY_PREFIX = "fusion-custom-tools-"
_KEY = re.compile(
    r"^fusion-custom-tools-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
)


def check_key(key: str) -> str:
    """``key`` if it is a ``fusion-custom-tools-<uuid>`` key, else ``UsageError``."""
    if not _KEY.match(key):
        raise UsageError(f"usage: not a fusion-custom-tools-<uuid> key: {key!r}")
    return key


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
        if not isinstance(value, Mapping) or not isinstance(value.get("command"), str):
            raise ValueError("a server entry needs a string command")
        args = value.get("args", [])
        if not isinstance(args, list) or not all(isinstance(arg, str) for arg in args):
            raise ValueError("args must be a list of strings")
        env = value.get("env")
        if env is not None and (
            not isinstance(env, Mapping)
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())
        ):
            raise ValueError("env must map strings to strings")
        return ServerEntry(
            command=value["command"],
            args=tuple(args),
            env=None if env is None else tuple(env.items()),
        )


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


def _process_to_json(process: Process) -> dict[str, Any]:
    return {
        "pid": process.pid,
        "hostname": process.hostname,
        "boot_id": process.boot_id,
        "start": process.start,
    }


def _process_from_json(value: Any) -> Process:
    return Process(
        pid=int(value["pid"]),
        hostname=str(value["hostname"]),
        boot_id=str(value.get("boot_id", "")),
        start=int(value.get("start", 0)),
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
    return tuple(
        Lease(
            key=key,
            entry=ServerEntry.from_json(item["entry"]),
            owner=_process_from_json(item["owner"]),
            created_at=float(item["created_at"]),
            heartbeat_at=float(item["heartbeat_at"]),
            ttl=float(item["ttl"]),
        )
        for key, item in sorted(value.items())
    )


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
    """The manifest from its bytes (``ValueError``/``KeyError``/``TypeError`` when malformed)."""
    document = json.loads(data)
    if document.get("version") != VERSION:
        raise ValueError(f"unknown manifest version {document.get('version')!r}")
    pending = document["pending"]
    quarantine = document["quarantine"]
    return State(
        baseline=_raw_from_json(document["baseline"]),
        confirmed=_raw_from_json(document["confirmed"]["raw"]),
        seq=int(document["confirmed"]["seq"]),
        leases=_leases_from_json(document["leases"]),
        pending=None
        if pending is None
        else Pending(
            kind=str(pending["kind"]),
            raw=_raw_from_json(pending["raw"]),
            seq=int(pending["seq"]),
            leases=_leases_from_json(pending["leases"]),
        ),
        operator_edit=bool(document["operator_edit"]),
        quarantine=None
        if quarantine is None
        else Quarantine(since=float(quarantine["since"]), reason=str(quarantine["reason"])),
    )


def load(shape: Shape) -> State | None:
    """The worktree's manifest, or ``None`` when there is none."""
    data = _atomic.read_bytes(shape.state_path)
    if data is None:
        return None
    try:
        return decode(data)
    except (ValueError, KeyError, TypeError) as error:
        raise CorruptStateError(
            f"corrupt lease manifest {shape.state_path} ({error}); repair or remove it"
        ) from error


def save(shape: Shape, state: State, *, step: str | None = None) -> State:
    """Atomically replace the manifest with ``state``; fires crash point ``step`` after."""
    _atomic.replace_bytes(shape.state_path, encode(state), temp_prefix=TEMP_PREFIX, mode=0o644)
    if step is not None:
        crash_point(step)
    return state


def remove(shape: Shape) -> None:
    _atomic.remove_file(shape.state_path)
