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

:func:`audited_fs` wraps a tree and records into a log:

- every call that changes the tree, once it returned or raised: ``write``, ``delete``, ``mkdir``,
  ``rmdir``, ``unlink``, ``rename``, ``setattr``, ``symlink``, and ``open`` when it may write
  (``write``/``create``/``truncate``; ``detail`` says which). Bytes written through an open handle
  are not recorded one by one: the ``open`` that allowed them is.
- every other call that a path policy refused (a :class:`vfs._policy.PolicyDeniedError` rising
  from the wrapped tree): reads of paths the policy hides.

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
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from ._capabilities import buffers_writes, list_info_of, make_link, make_node
from ._paths import ROOT, normalize_path
from ._policy import PolicyDeniedError
from ._posix_view import posix_view
from ._types import (
    ChangeCallback,
    DirEntry,
    FileInfo,
    FileSystem,
    GrepQuery,
    GrepResult,
    OpenFile,
    SearchQuery,
    SearchResult,
    Special,
    Watchable,
)

log = logging.getLogger("vfs.audit")

T = TypeVar("T")

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
        data = {key: value for key, value in asdict(self).items() if value is not None}
        data.setdefault("turn", None)
        return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


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
        # A name that is not UTF-8 (a surrogate-escaped byte) is written as its JSON escape
        # (\udcff), which reads back as the same name.
        line = (entry.to_json() + "\n").encode("utf-8", "backslashreplace")
        with self._lock:
            self._entries.append(entry)
            self._count += 1
            if self._fd is not None and not self._failed:
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


class AuditedFileSystem:
    """Forwards every call to a tree and records it (see the module docstring)."""

    __slots__ = ("_tree", "_view", "buffers_writes", "log")

    def __init__(self, tree: FileSystem, log: AuditLog) -> None:
        self._tree = tree
        self._view = posix_view(tree)
        self.log = log
        self.buffers_writes = buffers_writes(self._view)

    def __repr__(self) -> str:
        return f"audited_fs({self._tree!r})"

    @property
    def tree(self) -> FileSystem:
        return self._tree

    async def _changing(
        self,
        op: str,
        path: str,
        call: Awaitable[T],
        *,
        dest: str | None = None,
        detail: str | None = None,
    ) -> T:
        try:
            value = await call
        except Exception as error:
            self.log.record(op, path, result_of(error), dest=dest, detail=detail)
            raise
        self.log.record(op, path, dest=dest, detail=detail)
        return value

    async def _looking(self, op: str, path: str, call: Awaitable[T]) -> T:
        try:
            return await call
        except PolicyDeniedError as error:
            self.log.record(op, error.path or path, "denied")
            raise

    # -- the eight verbs --------------------------------------------------------------------

    def list(self, prefix: str = ROOT) -> AsyncIterator[DirEntry]:
        return self._view.list(prefix)

    async def list_info(self, prefix: str = ROOT) -> builtins.list[tuple[DirEntry, FileInfo]]:
        return await list_info_of(self._view)(prefix)

    async def stat(self, path: str) -> FileInfo:
        return await self._looking("stat", path, self._view.stat(path))

    def glob(self, pattern: str, dir: str = ROOT) -> AsyncIterator[DirEntry]:
        return self._view.glob(pattern, dir)

    async def read(self, path: str) -> str | bytes:
        return await self._looking("read", path, self._view.read(path))

    def grep(self, query: GrepQuery) -> AsyncIterator[GrepResult]:
        return self._view.grep(query)

    async def write(self, path: str, contents: str | bytes) -> None:
        await self._changing("write", normalize_path(path), self._view.write(path, contents))

    async def delete(self, path: str) -> None:
        await self._changing("delete", normalize_path(path), self._view.delete(path))

    def search(self, query: SearchQuery) -> AsyncIterator[SearchResult]:
        return self._view.search(query)

    # -- the POSIX extension ----------------------------------------------------------------

    async def lstat(self, path: str) -> FileInfo:
        return await self._looking("lstat", path, self._view.lstat(path))

    async def open(
        self,
        path: str,
        *,
        write: bool = False,
        create: bool = False,
        exclusive: bool = False,
        truncate: bool = False,
        mode: int = 0o644,
        uid: int | None = None,
        gid: int | None = None,
    ) -> OpenFile:
        path = normalize_path(path)
        call = self._view.open(
            path,
            write=write,
            create=create,
            exclusive=exclusive,
            truncate=truncate,
            mode=mode,
            uid=uid,
            gid=gid,
        )
        if not (write or create or truncate):
            return await self._looking("open", path, call)
        flags = [
            name
            for name, on in (
                ("write", write),
                ("create", create),
                ("exclusive", exclusive),
                ("truncate", truncate),
            )
            if on
        ]
        return await self._changing("open", path, call, detail=",".join(flags))

    async def mkdir(
        self, path: str, mode: int = 0o755, *, uid: int | None = None, gid: int | None = None
    ) -> None:
        await self._changing(
            "mkdir", normalize_path(path), self._view.mkdir(path, mode, uid=uid, gid=gid)
        )

    async def rmdir(self, path: str) -> None:
        await self._changing("rmdir", normalize_path(path), self._view.rmdir(path))

    async def unlink(self, path: str) -> None:
        await self._changing("unlink", normalize_path(path), self._view.unlink(path))

    async def rename(
        self, src: str, dst: str, *, noreplace: bool = False, exchange: bool = False
    ) -> None:
        detail = "exchange" if exchange else "noreplace" if noreplace else None
        await self._changing(
            "rename",
            normalize_path(src),
            self._view.rename(src, dst, noreplace=noreplace, exchange=exchange),
            dest=normalize_path(dst),
            detail=detail,
        )

    async def setattr(
        self,
        path: str,
        *,
        size: int | None = None,
        mode: int | None = None,
        uid: int | None = None,
        gid: int | None = None,
        atime_ns: int | None = None,
        mtime_ns: int | None = None,
    ) -> FileInfo:
        parts = []
        if size is not None:
            parts.append(f"size={size}")
        if mode is not None:
            parts.append(f"mode={mode:o}")
        if uid is not None or gid is not None:
            parts.append(f"owner={uid}:{gid}")
        if atime_ns is not None or mtime_ns is not None:
            parts.append("times")
        return await self._changing(
            "setattr",
            normalize_path(path),
            self._view.setattr(
                path, size=size, mode=mode, uid=uid, gid=gid, atime_ns=atime_ns, mtime_ns=mtime_ns
            ),
            detail=",".join(parts) or None,
        )

    async def symlink(
        self, path: str, target: str, *, uid: int | None = None, gid: int | None = None
    ) -> None:
        await self._changing(
            "symlink",
            normalize_path(path),
            self._view.symlink(path, target, uid=uid, gid=gid),
            detail=target,
        )

    async def mknod(
        self,
        path: str,
        special: Special,
        *,
        mode: int = 0o644,
        rdev: int = 0,
        uid: int | None = None,
        gid: int | None = None,
    ) -> None:
        await self._changing(
            "mknod",
            normalize_path(path),
            make_node(self._view, path, special, mode=mode, rdev=rdev, uid=uid, gid=gid),
            detail=special,
        )

    async def link(self, src: str, dst: str) -> None:
        await self._changing(
            "link", normalize_path(src), make_link(self._view, src, dst), dest=normalize_path(dst)
        )

    async def readlink(self, path: str) -> str:
        return await self._looking("readlink", path, self._view.readlink(path))

    # -- changes ----------------------------------------------------------------------------

    def watch(self, callback: ChangeCallback) -> Callable[[], None]:
        if isinstance(self._view, Watchable):
            return self._view.watch(callback)
        return _nothing


def _nothing() -> None:
    return None
