"""Audit trail: every change made through a tree, and every access a policy denied.

Theory of operation
-------------------
An :class:`AuditLog` collects :class:`AuditEntry` values: when, which operation, which path
(``dest`` for a rename's target), the result (``"ok"``, ``"denied"`` for a policy refusal, else the
errno's name such as ``"ENOENT"``) and the turn it happened in. The turn is whatever the caller
says: set :attr:`AuditLog.turn`, or give ``turn_source`` (a function read at each record, e.g. the
active turn of a :class:`vfs.turns.TurnRoot`). Entries are kept in memory (the most recent
``keep``; :meth:`AuditLog.entries`, iteration) and, when a path is given, appended to that file as
JSON lines (one ``write`` per entry, on an ``O_APPEND`` descriptor, so the file is never torn and
several logs may share it).

:func:`audited_fs` wraps a tree and records into a log, from one hook around every verb of
:mod:`vfs._forward`'s table (a verb the table gains is recorded by the rules its row says):

- every call that creates or changes something, once it returned or raised: ``write``,
  ``delete``, ``mkdir``, ``rmdir``, ``unlink``, ``rename``, ``setattr``, ``symlink``, ``mknod``,
  ``link``, and ``open`` when it may write (``write``/``create``/``truncate``; ``detail`` says
  which); and of the checkpoint verbs, ``checkpoint``, ``rewind`` (``detail``: ``to=N``) and
  ``prune_checkpoints``, at ``/``. The entry's ``path`` is the call's first path, ``dest`` its
  second. Bytes written
  through an open handle are not recorded one by one: the ``open`` that allowed them is.
- every other call that a path policy refused (a :class:`vfs._policy.PolicyDeniedError` rising
  from the wrapped tree): reads of paths the policy hides.

The audited tree has the capabilities of the tree it wraps, and no others.

Put it *outside* the policy (``audited_fs(policy_fs(tree, rules), log)``) to see denials.
Recording happens on the calling thread; a failing log file is reported once on the ``vfs.audit``
logger and the entries are still kept in memory (an audit failure never fails the operation).
"""

from __future__ import annotations

import builtins
import collections
import errno as errno_module
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ._forward import ForwardingTree, Verb
from ._paths import ROOT, normalize_path
from ._policy import PolicyDeniedError
from ._posix_view import posix_view
from ._types import FileSystem

log = logging.getLogger("vfs.audit")

DEFAULT_KEEP = 100_000


@dataclass(frozen=True)
class AuditEntry:
    """One recorded operation. ``time`` is seconds since the epoch."""

    time: float
    op: str
    path: str
    result: str
    turn: int | None = None
    dest: str | None = None
    detail: str | None = None

    def to_json(self) -> str:
        """One JSON object (no newline); ``dest`` and ``detail`` only when set."""
        # Built by hand: every change through an audited mount records one (asdict deep-copies).
        data: dict[str, Any] = {
            "time": self.time,
            "op": self.op,
            "path": self.path,
            "result": self.result,
            "turn": self.turn,
        }
        if self.dest is not None:
            data["dest"] = self.dest
        if self.detail is not None:
            data["detail"] = self.detail
        return _encode(data)


_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def result_of(error: BaseException | None) -> str:
    """``"ok"``, ``"denied"`` for a policy refusal, else the errno's name (``"EIO"`` if none)."""
    if error is None:
        return "ok"
    if isinstance(error, PolicyDeniedError):
        return "denied"
    code = getattr(error, "errno", None)
    if isinstance(code, int):
        return errno_module.errorcode.get(code, f"E{code}")
    return "EIO"


class AuditLog:
    """Recorded operations, in memory and optionally in a JSON-lines file (see the module)."""

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        turn: int | None = None,
        turn_source: Callable[[], int | None] | None = None,
        keep: int | None = DEFAULT_KEEP,
    ) -> None:
        self.path = None if path is None else os.fspath(path)
        self.turn = turn
        self.turn_source = turn_source
        self._entries: collections.deque[AuditEntry] = collections.deque(maxlen=keep)
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._failed = False
        self._count = 0
        if self.path is not None:
            self._fd = os.open(
                self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600
            )

    def __repr__(self) -> str:
        return f"AuditLog({self.path!r}, {self._count} entries)"

    def current_turn(self) -> int | None:
        return self.turn_source() if self.turn_source is not None else self.turn

    @property
    def count(self) -> int:
        """How many entries were recorded (including those no longer kept in memory)."""
        return self._count

    def record(
        self,
        op: str,
        path: str,
        result: str = "ok",
        *,
        dest: str | None = None,
        detail: str | None = None,
    ) -> AuditEntry:
        """Add one entry (stamped now, with the current turn) and return it."""
        entry = AuditEntry(time.time(), op, path, result, self.current_turn(), dest, detail)
        line = None
        if self._fd is not None:
            # A name that is not UTF-8 (a surrogate-escaped byte) is written as its JSON escape
            # (\udcff), which reads back as the same name.
            line = (entry.to_json() + "\n").encode("utf-8", "backslashreplace")
        with self._lock:
            self._entries.append(entry)
            self._count += 1
            if self._fd is not None and line is not None and not self._failed:
                try:
                    os.write(self._fd, line)
                except OSError as error:
                    self._failed = True
                    log.error("cannot write the audit log %s: %s", self.path, error)
        return entry

    def entries(self) -> builtins.list[AuditEntry]:
        """The entries kept in memory, oldest first."""
        with self._lock:
            return builtins.list(self._entries)

    def denied(self) -> builtins.list[AuditEntry]:
        return [entry for entry in self.entries() if entry.result == "denied"]

    def __iter__(self) -> Iterator[AuditEntry]:
        return iter(self.entries())

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def __enter__(self) -> AuditLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_audit_file(path: str | os.PathLike[str]) -> builtins.list[AuditEntry]:
    """The entries of a JSON-lines audit file (lines that do not parse are skipped)."""
    found = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            try:
                data: dict[str, Any] = json.loads(line)
                found.append(AuditEntry(**data))
            except (ValueError, TypeError):
                continue
    return found


def audited_fs(tree: FileSystem, log: AuditLog) -> AuditedFileSystem:
    """``tree``, recording its changes and the policy denials rising from it in ``log``."""
    return AuditedFileSystem(tree, log)


class AuditedFileSystem(ForwardingTree):
    """Forwards every call to a tree and records it (see the module docstring)."""

    __slots__ = ("_tree", "log")

    def __init__(self, tree: FileSystem, log: AuditLog) -> None:
        self._tree = tree
        self.log = log
        self._forward_to(posix_view(tree))

    def __repr__(self) -> str:
        return f"audited_fs({self._tree!r})"

    @property
    def tree(self) -> FileSystem:
        return self._tree

    async def _around(self, verb: Verb, args: tuple[Any, ...]) -> Any:
        if not (verb.changing or (verb.writes_with and verb.changes(args))):
            try:
                return await verb.call(self._inner, args)
            except PolicyDeniedError as error:
                self.log.record(verb.name, error.path or verb.path_values(args)[0], "denied")
                raise
        paths = verb.path_values(args)
        path = normalize_path(paths[0]) if paths else ROOT  # (a checkpoint verb: the tree)
        dest = normalize_path(paths[1]) if len(paths) > 1 else None
        explain = _DETAILS.get(verb.name)
        detail = explain(args) if explain is not None else None
        op = _RECORDED_AS.get(verb.name, verb.name)
        try:
            value = await verb.call(self._inner, args)
        except Exception as error:
            self.log.record(op, path, result_of(error), dest=dest, detail=detail)
            raise
        self.log.record(op, path, dest=dest, detail=detail)
        return value


def _open_detail(args: tuple[Any, ...]) -> str:
    _, write, create, exclusive, truncate, *_ = args
    flags = (("write", write), ("create", create), ("exclusive", exclusive), ("truncate", truncate))
    return ",".join(name for name, on in flags if on)


def _setattr_detail(args: tuple[Any, ...]) -> str | None:
    _, size, mode, uid, gid, atime_ns, mtime_ns = args
    parts = []
    if size is not None:
        parts.append(f"size={size}")
    if mode is not None:
        parts.append(f"mode={mode:o}")
    if uid is not None or gid is not None:
        parts.append(f"owner={uid}:{gid}")
    if atime_ns is not None or mtime_ns is not None:
        parts.append("times")
    return ",".join(parts) or None


def _rename_detail(args: tuple[Any, ...]) -> str | None:
    _, _, noreplace, exchange = args
    return "exchange" if exchange else "noreplace" if noreplace else None


# The operation an entry names, for a verb that is another's variant (the rest: the verb's name).
_RECORDED_AS = {"unlink_keeping": "unlink"}

# What an entry's ``detail`` says, by verb (the rest record none).
_DETAILS: dict[str, Callable[[tuple[Any, ...]], str | None]] = {
    "open": _open_detail,
    "setattr": _setattr_detail,
    "rename": _rename_detail,
    "symlink": lambda args: str(args[1]),  # the target
    "mknod": lambda args: str(args[1]),  # what it makes: fifo, socket, char, block
    "checkpoint": lambda args: None if args[0] is None else f"label={args[0]}",
    "rewind": lambda args: f"to={args[0]}",
    "prune_checkpoints": lambda args: f"keep_last={args[0]}",
}
