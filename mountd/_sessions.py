"""Where the default tree keeps what was written through it: a durable upper, outside the tree.

Theory of operation
-------------------
``mountd mount`` and ``mountd run`` serve the current directory under copy-on-write by default.
The changes live in a *session*: a directory of the user's state directory
(``$XDG_STATE_HOME/agentroot/sessions``, else ``~/.local/state/agentroot/sessions``), one per project
directory and per command (``mount`` or ``run``), named by a hash of both:

- ``upper/`` is the copy-on-write tree's upper, a ``dir_fs``: every file written through the mount
  is a host file there at once, and ``cow_fs`` keeps its record (whiteouts, bases, origins) there,
  written and renamed over at each change. So a daemon killed by SIGKILL loses nothing that was
  closed or fsynced through the mount; the page cache holds the rest until the kernel writes it,
  as for any host file.
- ``session.json`` says which project it belongs to and when it was made;
- ``session.lock`` is held (``flock``) by the process serving it, so one session is served by one
  process at a time; the lock goes with the process, however it ends.

:func:`open_session` takes a session for a project: a new one, or the one an earlier process left.
That one is reused as it is when it holds no change; with changes, the caller must say what
happens to them (``resume``: continue; ``fresh``: discard them first), else
:class:`PendingChanges` names them. ``mountd run`` discards its session when the run ends (its
changes were reported, and applied or not as asked): what is left behind is a run that was killed.
``mountd mount`` keeps it (``mountd unmount --discard`` drops it), so the work survives the mount.

A *fork* (``mountd checkpoint fork``) is a session of the same project under a name of its own
(:func:`new_fork`: the project's key and ``-fork-`` and a random suffix), whose record also says
which checkpoint of which mount it started from (:func:`fork_of`); it is served by naming its
directory (:func:`open_session_at`, ``mountd mount --session DIR``), and otherwise is a session
like any other.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import secrets
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from vfs.lowlevel import COW_RESERVED

Kind = Literal["mount", "run"]


class SessionError(Exception):
    """A session cannot be opened as asked (the message says why and what to do)."""


class PendingChanges(SessionError):
    """An earlier session of the project holds changes, and nobody said what to do with them."""


_RECORD_DIR = COW_RESERVED.lstrip("/")  # the cow's own record, journal and checkpoints


def sessions_dir() -> Path:
    state = os.environ.get("XDG_STATE_HOME")
    base = Path(state) if state and os.path.isabs(state) else Path.home() / ".local" / "state"
    return base / "agentroot" / "sessions"


def session_key(project: str, kind: Kind) -> str:
    return hashlib.sha256(f"{kind}\0{project}".encode("utf-8", "surrogateescape")).hexdigest()[:24]


@dataclass
class Session:
    """A session taken by this process: its directory and the lock that keeps it ours."""

    path: Path
    project: str
    kind: Kind
    lock_fd: int

    @property
    def upper(self) -> Path:
        return self.path / "upper"

    def release(self) -> None:
        """Let go of the session (it stays on disk)."""
        if self.lock_fd >= 0:
            os.close(self.lock_fd)
            self.lock_fd = -1

    def holds_changes(self) -> bool:
        """Whether the upper holds any change: a file or link anywhere in it (a deletion is a
        record in the layer's reserved directory), or a directory beside that one."""
        upper = self.upper
        if not upper.is_dir():
            return False
        pending = [str(upper)]
        while pending:  # (no recursion: an agent's tree may be deeper than Python allows)
            directory = pending.pop()
            with os.scandir(directory) as entries:
                for entry in entries:
                    if not entry.is_dir(follow_symlinks=False):
                        return True
                    if directory == str(upper) and entry.name != _RECORD_DIR:
                        return True
                    pending.append(entry.path)
        return False

    def discard(self) -> None:
        """Remove the session and everything in it."""
        remove_tree(self.path)
        self.release()


def remove_tree(path: str | os.PathLike[str]) -> None:
    """Remove ``path`` and everything beneath it, following no symlink and crossing no mount.
    ``rm`` rather than ``shutil.rmtree``, which recurses once per level in Python: an agent's
    tree may be deeper than Python's recursion limit."""
    done = subprocess.run(
        ["rm", "-rf", "--one-file-system", "--", os.fspath(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SessionError(f"cannot remove {os.fspath(path)}: {done.stderr.strip()}")


def open_session(project: str, kind: Kind, *, resume: bool = False, fresh: bool = False) -> Session:
    """Take the session of ``project`` for ``kind``: with the changes an earlier one left
    (``resume``), without them (``fresh``), or refusing to guess (see the module docstring)."""
    project = os.path.realpath(project)
    root = sessions_dir()
    real_root = os.path.realpath(root)
    if real_root == project or real_root.startswith(project.rstrip("/") + "/"):
        raise SessionError(
            f"the sessions directory {root} lies inside {project}, which the tree serves; set "
            "XDG_STATE_HOME to a directory outside it, or give --ephemeral"
        )
    path = root / session_key(project, kind)
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return _take(path, project, kind, resume=resume, fresh=fresh)


def open_session_at(
    path: str | os.PathLike[str], *, resume: bool = False, fresh: bool = False
) -> Session:
    """Take the session directory ``path`` (a fork's, say: ``mountd mount --session``), of the
    project its record names, as :func:`open_session` takes one."""
    session = Path(os.path.abspath(path))
    record = _record_of(session)
    if record is None:
        raise SessionError(f"{session} is not a session directory")
    kind = record.get("kind")
    project = record.get("project")
    if kind not in ("mount", "run") or not isinstance(project, str):
        raise SessionError(f"{session} is not a session directory")
    return _take(session, project, kind, resume=resume, fresh=fresh)


def new_fork(project: str, *, of: str, checkpoint: int, mountpoint: str) -> Session:
    """A new, empty session of ``project`` for a fork of checkpoint ``checkpoint`` of the mount
    at ``of``, to be served at ``mountpoint`` (held by this process until released)."""
    project = os.path.realpath(project)
    root = sessions_dir()
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    while True:
        path = root / f"{session_key(project, 'mount')}-fork-{secrets.token_hex(4)}"
        try:
            path.mkdir(mode=0o700)
            break
        except FileExistsError:
            continue
    fork = {"of": of, "checkpoint": checkpoint, "mountpoint": mountpoint}
    _write_record(path, project, "mount", fork=fork)
    return _take(path, project, "mount")


def _take(
    path: Path, project: str, kind: Kind, *, resume: bool = False, fresh: bool = False
) -> Session:
    """Lock the session directory ``path`` and check what an earlier process left there."""
    lock_fd = os.open(path / "session.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(lock_fd)
        raise SessionError(
            f"{project} is being served by another `mountd {kind}` (its session "
            f"{path} is in use); stop it first, or run with --ephemeral"
        ) from None
    session = Session(path, project, kind, lock_fd)
    try:
        upper = session.upper
        earlier = upper.is_dir() and any(upper.iterdir())
        if earlier and fresh:
            remove_tree(upper)
            earlier = False
        upper.mkdir(exist_ok=True, mode=0o700)
        if earlier and not resume:
            made = _made(path)
            raise PendingChanges(
                f"{project} holds the changes of an earlier `mountd {kind}` (from {made}, kept "
                f"in {upper}): give --resume to continue with them, or --fresh to discard them"
            )
        _write_record(path, project, kind)
    except BaseException:
        session.release()
        raise
    return session


def _made(path: Path) -> str:
    try:
        record = json.loads((path / "session.json").read_text())
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(float(record["created"])))
    except (OSError, ValueError, KeyError, TypeError):
        return "an unknown time"


def _record_of(path: Path) -> dict[str, Any] | None:
    try:
        record = json.loads((path / "session.json").read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _write_record(
    path: Path, project: str, kind: Kind, *, fork: dict[str, Any] | None = None
) -> None:
    record = path / "session.json"
    if record.exists():
        return
    temp = path / ".session.json.tmp"
    fields: dict[str, Any] = {"project": project, "kind": kind, "created": time.time()}
    if fork is not None:
        fields["fork"] = fork
    temp.write_text(json.dumps(fields))
    os.replace(temp, record)


@dataclass(frozen=True)
class Fork:
    """What a fork's session was made from: checkpoint ``checkpoint`` of the mount at ``of``."""

    of: str
    checkpoint: int
    mountpoint: str


def fork_of(path: str | os.PathLike[str]) -> Fork | None:
    """What the session at ``path`` was forked from (``None``: it is no fork)."""
    record = _record_of(Path(path))
    fork = None if record is None else record.get("fork")
    if not isinstance(fork, dict):
        return None
    try:
        return Fork(str(fork["of"]), int(fork["checkpoint"]), str(fork["mountpoint"]))
    except (KeyError, TypeError, ValueError):
        return None


@dataclass(frozen=True)
class SessionInfo:
    """A session on disk, as ``mountd status`` lists it."""

    path: Path
    project: str
    kind: str
    created: float
    in_use: bool
    fork: Fork | None = None


def list_sessions() -> Iterator[SessionInfo]:
    """Every session on disk, in use or left behind."""
    root = sessions_dir()
    if not root.is_dir():
        return
    for path in sorted(root.iterdir()):
        try:
            record = json.loads((path / "session.json").read_text())
        except (OSError, ValueError):
            continue
        yield SessionInfo(
            path,
            str(record.get("project", "?")),
            str(record.get("kind", "?")),
            float(record.get("created", 0.0)),
            _in_use(path),
            fork_of(path),
        )


def _in_use(path: Path) -> bool:
    try:
        fd = os.open(path / "session.lock", os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def discard_path(path: str | os.PathLike[str]) -> None:
    """Remove the session at ``path`` (a directory :func:`list_sessions` or a mount's state
    names), unless a process still serves it."""
    session = Path(path)
    if not (session / "session.json").is_file():
        raise SessionError(f"{session} is not a session directory")
    for _ in range(50):  # a daemon that just exited may still be closing its lock
        if not _in_use(session):
            remove_tree(session)
            return
        time.sleep(0.1)
    raise SessionError(f"the session {session} is still in use")
