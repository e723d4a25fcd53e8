"""The control channel of a running mount: turns, status, changes and the copy-on-write review,
as JSON lines on a socket.

Theory of operation
-------------------
A daemon started by the ``mountd`` command listens on a Unix socket next to its state file,
``<state dir>/<key>.sock`` (the state directory is private, mode 0700; the socket is 0600). A
client writes one JSON object per line and reads one JSON object per line back, in order:

=============================================  ==================================================
request                                        answer (``{"ok": false, "error": "..."}`` on error)
=============================================  ==================================================
``{"op": "turn", "action": "begin",``          ``{"ok": true, "turn": {...}}``: a new turn with an
``"cwd": "/harness/cwd"}``                     empty ``/tmp``; ``cwd`` is where native tools spill
``{"op": "turn", "action": "end"}``            ``{"ok": true, "turn": {...}}`` once ``/tmp`` is
                                               empty *and the kernel has forgotten it*
``{"op": "status"}``                           mount, pid, turn, ``tmp`` (names in ``/tmp`` as the
                                               tree sees them), request counters
``{"op": "changes"}``                          ``{"ok": true, "since": t, "changes": [{"path",
                                               "kinds", "via"}]}``: paths changed since the turn
                                               began (or the mount started), through the mount
                                               (``via: mount``) or the tree's API (``api``)
``{"op": "adopt", "tool": "webFetch",``        ``{"ok": true, "result": ..., "adopted": [uuid]}``:
``"result": ...}``                             the active turn's spill rewrite (``Turn.adopt_spill``)
``{"op": "cow", "action": "changes",``         ``{"ok": true, "cows": [...], "changes": [{"path",
``"paths": [...]}`` (``paths`` optional)       "kind", "entry", "from", "mode", "target",
                                               "refused"}], "git_state": [...]}``: what
                                               differs from the lower tree now (see below;
                                               every ``cow`` request takes ``"checkpoint": N``),
                                               and one line per ref moved and for the paths
                                               the index stages (``mountd._git_review``)
``{"op": "cow", "action": "diff",``            ``{"ok": true, "diff": "...", "refused": [...]}``:
``"paths": [...]}`` (``paths`` optional)       the git-style diff of those paths, else of all
                                               that apply would write but ``/.git``
``{"op": "checkpoint", "action": "take",``     ``{"ok": true, "checkpoint": {"number", "turn",
``"label": "L"}`` (``label`` optional)         "label", "time", "summary": {"added",
                                               "modified", "deleted", "bytes"}}}``
``{"op": "checkpoint", "action": "list"}``     ``{"ok": true, "checkpoints": [...]}``
``{"op": "checkpoint", "action": "diff",``     ``{"ok": true, "changes": [...], "diff": "..."}``:
``"a": A, "b": B}`` (``b`` optional: now)      how B differs from A
``{"op": "checkpoint", "action": "rewind",``   ``{"ok": true, "checkpoint": {...}, "before": M}``
``"number": N}``                               once the tree is N *and the kernel has forgotten
                                               what changed* (open descriptors keep their
                                               files); M: the checkpoint recording the state
                                               before (null: a kept one held it already)
``{"op": "checkpoint", "action": "prune",``    ``{"ok": true, "pruned": [N...]}``: all but the
``"keep": K}`` (``keep`` optional)             labelled and the last K (default 50)
``{"op": "checkpoint", "action": "fork",``     ``{"ok": true, "session": DIR, "project": P,
``"number": N, "mountpoint": NEW}``            "checkpoint": {...}, "mount": {...}}``:
                                               checkpoint N written into a new session of the
                                               project, for a second daemon to serve at NEW
                                               (see below) as this one is served (``mount``:
                                               ``cache_timeout``, ``allow_other``, ``warm``)
``{"op": "cow", "action": "apply",``           ``{"ok": true, "applied": [change...], "refused":
``"paths": [...]}`` (``paths`` optional)       [change...], "set_id_cleared": [path...]}``: the
                                               changes written back to the lower tree, those
                                               refused and kept
=============================================  ==================================================

Turns need a turn-aware tree (:class:`vfs.turns.TurnRoot`); on any other tree the turn and adopt
requests answer an error and status/changes still work. :class:`Controller` holds the logic and
is tested without a socket; :func:`serve_control` is the trio listener the daemon runs next to the
mount; :func:`request` is the blocking client the command line uses. Requests run on the event
loop that serves the mount, one connection at a time per task, and never touch the mount itself.

The ``checkpoint`` requests need a tree that keeps checkpoints (:class:`vfs.Checkpoints`: the
default tree's copy-on-write root keeps them in its session, so they outlive the daemon); a turn
end takes one (answered as ``"checkpoint"`` beside ``"turn"``) and keeps the labelled ones and the
last :data:`DEFAULT_KEEP_CHECKPOINTS`; ``status`` answers how many are kept and the last. A rewind
reports what changed as the tree's own changes, so the mount invalidates exactly those names.
A fork needs the default tree (the controller knows its project directory): checkpoint N of its
copy-on-write root is written into a new session of the project (``mountd._sessions.new_fork``,
``vfs.lowlevel.write_fork``), which ``mountd checkpoint fork`` then serves with a daemon of its
own (``mountd mount --session DIR``); the tree of a spec or a factory answers an error.

The ``cow`` requests review the copy-on-write layers of the served tree (``mountd._review``):
``paths`` are the served tree's (absolute; a path above a layer's prefix covers all of it), and so
are the answer's paths. A change is ``{"path", "kind"`` (added, modified, deleted, renamed,
mode_changed), ``"entry"`` (file, directory, symlink), ``"from"`` (a rename's old path, else
null), ``"mode"`` (``{"old": "0644", "new": "0755"}`` when the permission bits differ, else
null), ``"refused"`` (why apply leaves it out, else null; see ``mountd._apply_rules``)``}``; a
refused change in ``diff``'s and ``apply``'s ``refused`` lists is ``{"path", "kind", "entry",
"from", "reason"}``. The diff is in each layer's own coordinates (``a/src/x.py``: what ``git
apply`` in the lower directory takes); by default it holds only what apply would write, outside
``/.git``. Apply writes into the lower tree with the rules ``mountd run --apply`` has
(:func:`mountd._review.apply_unprotected`): inside any ``.git`` only what git writes in a normal
session, never what the served tree's policy does not grant write to, never through a symlink or
across a mount point on the host, never a set-id bit (``set_id_cleared`` names the applied paths
that had one); refused changes are kept and listed (naming only refused paths is an error). A
file open for writing through the mount is not
applied (the error names it, nothing is written): apply drops the layer's copy, which its later
writes, and the kernel's dirty pages, would go to. A conflict (the lower changed since a path was
copied up) writes nothing and answers the error with ``"conflicts": [path...]``. The layer then forgets
what it applied (those paths are no longer changes) and reports the applied paths as ``metadata``
changes, so the mount drops the kernel's cached attributes; names and bytes served are unchanged.
A tree without a copy-on-write layer answers an error. With ``"checkpoint": N`` the requests
review checkpoint N of each layer instead (``mountd._review.at_checkpoint``), by the same rules,
and apply writes it (the layer keeps serving what it served).

The change log is fed by :meth:`vfs.Watchable.watch` on the served tree: it keeps the paths (with
their change kinds and origins) of every notification since the turn began, deduplicated and
capped at :data:`MAX_CHANGES` paths (then ``"truncated": true``).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import socket
import stat
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import trio

from vfs import (
    Change,
    Checkpoint,
    CheckpointNotFoundError,
    Checkpoints,
    CowConflictError,
    FileSystem,
    ReadOnlyMountError,
    TreeChange,
    Watchable,
    is_under,
    normalize_path,
)
from vfs.lowlevel import ROOT, CowRefusedError, select_changes, strip_prefix
from vfs.turns import Turn, TurnRoot

from . import _registry as registry
from ._apply_rules import Refusal
from ._git_review import git_state_lines
from ._options import MountOptions
from ._review import (
    CowAt,
    apply_unprotected,
    at_checkpoint,
    change_entry,
    describe_change,
    find_cows,
    judged,
    outside_git,
    served_policy,
)

MAX_CHANGES = 100_000
log = logging.getLogger("mountd")

DEFAULT_KEEP_CHECKPOINTS = 50  # unlabelled checkpoints a mount keeps (and a prune leaves)
MAX_LINE = 16 * 1024 * 1024
REQUEST_TIMEOUT = 30.0
# sockaddr_un.sun_path holds 108 bytes including the terminating NUL (longer: see _address).
MAX_SOCKET_PATH = 107


class ControlError(Exception):
    """A control request that could not be made or was refused (``str`` says why; ``details``
    go into the error answer beside ``error``)."""

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.details = details


def socket_path(mountpoint: str) -> Path:
    """The control socket of the mount at ``mountpoint`` (a canonical path)."""
    return registry.state_dir() / f"{registry.state_key(mountpoint)}.sock"


class Controller:
    """Answers control requests for one served tree (see the module docstring)."""

    def __init__(
        self,
        fs: FileSystem,
        mountpoint: str,
        *,
        origin: object = None,
        counters: Mapping[str, int] | None = None,
        open_for_writing: Callable[[], list[str]] | None = None,
        project: str | None = None,
    ) -> None:
        self.fs = fs
        # The directory the default tree serves (None: a spec's or a factory's tree): a fork
        # is a new session of it.
        self.project = project
        self.mountpoint = mountpoint
        self.origin = origin  # the Mount: changes made through it carry it as their origin
        self.counters: Mapping[str, int] = {} if counters is None else counters
        # The paths open for writing through the mount (Mount.open_for_writing): apply refuses them.
        self.open_for_writing = open_for_writing
        self._lock = threading.Lock()
        self._changes: dict[str, tuple[set[str], set[str]]] = {}
        self._truncated = False
        self._since = time.time()
        self._unwatch: Callable[[], None] | None = None

    @property
    def turns(self) -> TurnRoot | None:
        return self.fs if isinstance(self.fs, TurnRoot) else None

    def start(self) -> None:
        """Begin recording changes (if the tree reports them)."""
        if isinstance(self.fs, Watchable) and self._unwatch is None:
            self._unwatch = self.fs.watch(self._record)

    def close(self) -> None:
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None

    def _record(self, change: Change) -> None:
        via = "mount" if self.origin is not None and change.origin is self.origin else "api"
        with self._lock:
            entry = self._changes.get(change.path)
            if entry is None:
                if len(self._changes) >= MAX_CHANGES:
                    self._truncated = True
                    return
                entry = self._changes[change.path] = (set(), set())
            entry[0].add(change.kind)
            entry[1].add(via)

    def _reset_changes(self) -> None:
        with self._lock:
            self._changes.clear()
            self._truncated = False
            self._since = time.time()

    async def handle(self, request: object) -> dict[str, Any]:
        """The answer to one request (never raises for a bad request: it answers an error)."""
        try:
            return await self._dispatch(request)
        except ControlError as error:
            return {"ok": False, "error": str(error), **error.details}
        except Exception as error:
            # A request that fails unexpectedly (a tree that raises, no descriptors left) is
            # that request's failure: the mount it controls goes on serving.
            log.exception("control request %.200r failed", request)
            op = request.get("op") if isinstance(request, dict) else None
            return {"ok": False, "error": f"{op} failed: {error}"}

    async def _dispatch(self, request: object) -> dict[str, Any]:
        if not isinstance(request, dict):
            raise ControlError("a request is a JSON object with an 'op'")
        op = request.get("op")
        if op == "turn":
            return await self._turn(request)
        if op == "status":
            return await self._status()
        if op == "changes":
            return self._changes_reply()
        if op == "adopt":
            return await self._adopt(request)
        if op == "cow":
            return await self._cow(request)
        if op == "checkpoint":
            return await self._checkpoint(request)
        raise ControlError(
            f"unknown op {op!r} (expected turn, status, changes, adopt, cow or checkpoint)"
        )

    def _turn_root(self) -> TurnRoot:
        turns = self.turns
        if turns is None:
            raise ControlError(
                f"{self.mountpoint} has no turns: serve it with `mountd mount --turns` "
                "(the default mount has them)"
            )
        return turns

    async def _turn(self, request: dict[str, Any]) -> dict[str, Any]:
        turns = self._turn_root()
        action = request.get("action")
        if action == "begin":
            cwd = request.get("cwd")
            if cwd is not None and (not isinstance(cwd, str) or not os.path.isabs(cwd)):
                raise ControlError(f"cwd must be an absolute path, not {cwd!r}")
            try:
                turn = await turns.begin_turn(cwd=cwd)
            except RuntimeError as error:
                raise ControlError(str(error)) from None
            self._reset_changes()
            return {"ok": True, "turn": _describe(turn)}
        if action == "end":
            try:
                turn = await turns.end_turn()
            except RuntimeError as error:
                raise ControlError(str(error)) from None
            reply = {"ok": True, "turn": _describe(turn)}
            if turn.checkpoint is not None:
                reply["checkpoint"] = describe_checkpoint(turn.checkpoint)
            return reply
        raise ControlError(f"unknown turn action {action!r} (expected begin or end)")

    async def _status(self) -> dict[str, Any]:
        turns = self.turns
        reply: dict[str, Any] = {
            "ok": True,
            "mountpoint": self.mountpoint,
            "pid": os.getpid(),
            "turns": turns is not None,
            "turn": None,
            "turns_begun": 0,
            "counters": dict(self.counters),
        }
        if isinstance(self.fs, Checkpoints):
            kept = await self.fs.checkpoints()
            reply["checkpoints"] = {
                "kept": len(kept),
                "last": describe_checkpoint(kept[-1]) if kept else None,
            }
        if turns is not None:
            reply["turns_begun"] = turns.turns
            if turns.turn is not None:
                reply["turn"] = _describe(turns.turn)
            reply["tmp"] = [entry.path async for entry in turns.list("/tmp")]
        return reply

    def _changes_reply(self) -> dict[str, Any]:
        with self._lock:
            changes = [
                {"path": path, "kinds": sorted(kinds), "via": sorted(via)}
                for path, (kinds, via) in sorted(self._changes.items())
            ]
            truncated = self._truncated
            since = self._since
        turns = self.turns
        turn = turns.turn if turns is not None else None
        return {
            "ok": True,
            "since": since,
            "turn": None if turn is None else turn.number,
            "changes": changes,
            "truncated": truncated,
        }

    async def _adopt(self, request: dict[str, Any]) -> dict[str, Any]:
        turn = self._turn_root().turn
        if turn is None:
            raise ControlError("no turn is active: begin one first")
        tool = request.get("tool")
        if not isinstance(tool, str):
            raise ControlError("adopt needs 'tool' (webSearch or webFetch) and 'result'")
        try:
            result = await turn.adopt_spill(request.get("result"), tool_name=tool)
        except OSError as error:
            raise ControlError(f"adopting the spill failed: {error}") from None
        return {"ok": True, "result": result, "adopted": list(turn.adopted)}

    # -- checkpoints -------------------------------------------------------------------------

    async def _checkpoint(self, request: dict[str, Any]) -> dict[str, Any]:
        tree = self.fs
        if not isinstance(tree, Checkpoints):
            raise ControlError(
                f"{self.mountpoint} keeps no checkpoints: its tree has no copy-on-write or "
                "in-memory root (the default `mountd mount` keeps them)"
            )
        action = request.get("action", "take")
        try:
            if action == "take":
                label = request.get("label")
                if label is not None and (not isinstance(label, str) or not label):
                    raise ControlError(f"a label is a non-empty string, not {label!r}")
                turns = self.turns
                turn = None if turns is None or turns.turn is None else turns.turn.number
                record = await tree.checkpoint(label, turn=turn)
                return {"ok": True, "checkpoint": describe_checkpoint(record)}
            if action == "list":
                kept = await tree.checkpoints()
                return {"ok": True, "checkpoints": [describe_checkpoint(r) for r in kept]}
            if action == "diff":
                a, b = _number(request, "a"), _number(request, "b", optional=True)
                changes = await tree.checkpoint_changes(a, b)
                return {
                    "ok": True,
                    "changes": [_plain_change(change) for change in changes],
                    "diff": await tree.checkpoint_diff(a, b),
                }
            if action == "rewind":
                # (the mount gives keepers to what it replaces: Mount.keeping_files, called
                # by the tree before every rewind)
                earlier = {taken.number for taken in await tree.checkpoints()}
                record = await tree.rewind(_number(request, "number"))
                before = [
                    taken.number
                    for taken in await tree.checkpoints()
                    if taken.number not in earlier and taken.number != record.number
                ]
                return {
                    "ok": True,
                    "checkpoint": describe_checkpoint(record),
                    "before": before[-1] if before else None,
                }
            if action == "fork":
                return await self._fork(request)
            if action == "prune":
                keep = request.get("keep", DEFAULT_KEEP_CHECKPOINTS)
                if not isinstance(keep, int) or isinstance(keep, bool) or keep < 0:
                    raise ControlError(f"keep is a count of checkpoints, not {keep!r}")
                return {"ok": True, "pruned": await tree.prune_checkpoints(keep)}
        except CheckpointNotFoundError as error:
            raise ControlError(str(error)) from None
        raise ControlError(
            f"unknown checkpoint action {action!r} (expected take, list, diff, rewind, fork or "
            "prune)"
        )

    async def _fork(self, request: dict[str, Any]) -> dict[str, Any]:
        """Write checkpoint N into a new session of the project (``vfs.lowlevel.write_fork``),
        for a second daemon to serve at ``mountpoint``."""
        number = _number(request, "number")
        mountpoint = request.get("mountpoint")
        if not isinstance(mountpoint, str) or not os.path.isabs(mountpoint):
            raise ControlError(f"mountpoint must be an absolute path, not {mountpoint!r}")
        roots = [found.cow for found in find_cows(self.fs) if found.prefix == ROOT]
        if self.project is None or not roots:
            raise ControlError(
                f"only the default tree forks from the command line: {self.mountpoint} serves "
                f"a tree of a spec or factory, which has no session to start one from; fork it "
                f"in Python with tree.fork({number})"
            )
        from vfs.lowlevel import write_fork

        from ._sessions import new_fork

        session = await trio.to_thread.run_sync(
            functools.partial(
                new_fork, self.project, of=self.mountpoint, checkpoint=number, mountpoint=mountpoint
            )
        )
        try:
            first = await write_fork(roots[0], number, str(session.upper))
        except CheckpointNotFoundError:
            session.discard()
            raise
        except OSError as error:
            session.discard()
            raise ControlError(f"writing the fork into {session.path} failed: {error}") from None
        except BaseException:
            session.discard()
            raise
        session.release()
        return {
            "ok": True,
            "session": str(session.path),
            "project": self.project,
            "checkpoint": describe_checkpoint(first),
            "mount": self._mount_options(),
        }

    def _mount_options(self) -> dict[str, Any]:
        """How this tree is mounted, as far as a fork serves its own the same way."""
        options: MountOptions | None = getattr(self.origin, "options", None)
        if options is None:
            return {}
        return {
            "cache_timeout": options.entry_timeout,
            "allow_other": options.allow_other,
            "warm": options.warm,
        }

    # -- the copy-on-write review ------------------------------------------------------------

    async def _cow(self, request: dict[str, Any]) -> dict[str, Any]:
        action = request.get("action")
        if action not in COW_ACTIONS:
            raise ControlError(
                f"unknown cow action {action!r} (expected {', '.join(COW_ACTIONS[:-1])} or "
                f"{COW_ACTIONS[-1]})"
            )
        paths = _request_paths(request)
        cows = find_cows(self.fs)
        if not cows:
            raise ControlError(
                f"{self.mountpoint} has no copy-on-write layer: its writes go straight to the "
                "tree, so there is nothing to review (the default `mountd mount` has one, and a "
                'spec gets one with type = "cow")'
            )
        number = _number(request, "checkpoint", optional=True)
        if number is not None:
            try:
                cows = [await at_checkpoint(found, number) for found in cows]
            except CheckpointNotFoundError as error:
                raise ControlError(str(error)) from None
        if action == "changes":
            return await self._cow_changes(cows, paths)
        if action == "diff":
            return await self._cow_diff(cows, paths)
        return await self._cow_apply(cows, paths)

    async def _cow_changes(self, cows: list[CowAt], paths: list[str] | None) -> dict[str, Any]:
        policy = await served_policy(self.fs)
        listed: list[dict[str, Any]] = []
        git_state: list[str] = []
        for found in cows:
            chosen = _within(paths, found.prefix)
            if chosen == []:
                continue
            changes, refused = await judged(found, policy)
            selected = select_changes(changes, chosen)
            for change in selected:
                listed.append(await describe_change(found, change, refused.get(change)))
            applied = [change for change in selected if change not in refused]
            git_state += await git_state_lines(found.shown, applied)
        return {
            "ok": True,
            "cows": [_describe_cow(c) for c in cows],
            "changes": listed,
            "git_state": git_state,
        }

    async def _cow_diff(self, cows: list[CowAt], paths: list[str] | None) -> dict[str, Any]:
        policy = await served_policy(self.fs)
        parts = []
        refusals: list[dict[str, Any]] = []
        for found in cows:
            chosen = _within(paths, found.prefix)
            if chosen == []:
                continue
            changes, refused = await judged(found, policy)
            refusals += [
                _refusal_entry(found, Refusal(c, refused[c]))
                for c in select_changes(changes, chosen)
                if c in refused
            ]
            if chosen is None:  # what apply would write but git's own files, as `run --diff`
                chosen = outside_git(changes, refused)
            if chosen:
                parts.append(await found.shown.diff(chosen))
        return {"ok": True, "diff": "".join(parts), "refused": refusals}

    async def _cow_apply(self, cows: list[CowAt], paths: list[str] | None) -> dict[str, Any]:
        policy = await served_policy(self.fs)
        await self._refuse_open_files(cows, paths)
        applied: list[dict[str, Any]] = []
        kept: list[dict[str, Any]] = []
        cleared: list[str] = []
        for found in cows:
            chosen = _within(paths, found.prefix)
            if chosen == []:
                continue
            try:
                done = await apply_unprotected(found, policy, chosen)
            except CowConflictError as error:
                raise ControlError(
                    f"{_nothing_more(applied)}: {error} ({len(error.paths)} conflicting "
                    f"path{'s' if len(error.paths) != 1 else ''})",
                    conflicts=[found.served(path) for path in error.paths],
                    applied=applied,
                ) from None
            except CowRefusedError as error:
                raise ControlError(
                    f"{_nothing_more(applied)}: {error}",
                    refused=[found.served(path) for path in error.paths],
                    applied=applied,
                ) from None
            except ReadOnlyMountError:
                raise ControlError(
                    f"{_nothing_more(applied)}: the lower tree {found.cow.lower!r} is read-only "
                    "(serve it writable to apply)",
                    applied=applied,
                ) from None
            except OSError as error:
                raise ControlError(
                    f"applying the changes to {found.cow.lower!r} failed: {error}",
                    applied=applied,
                ) from None
            applied += [change_entry(found, change) for change in done.applied]
            kept += [_refusal_entry(found, refusal) for refusal in done.refused]
            cleared += [found.served(path) for path in done.set_id_cleared]
        if paths is not None and kept and not applied:
            raise ControlError(
                "not applied: "
                + "; ".join(f"{entry['path']} is refused: {entry['reason']}" for entry in kept),
                refused=kept,
            )
        return {"ok": True, "applied": applied, "refused": kept, "set_id_cleared": cleared}

    async def _refuse_open_files(self, cows: list[CowAt], paths: list[str] | None) -> None:
        """Refuse to apply a file open for writing through the mount: apply drops the layer's
        copy, so its later writes (and dirty pages the kernel has not sent yet) would be lost."""
        writing = set(self.open_for_writing()) if self.open_for_writing is not None else set()
        if not writing:
            return
        busy = []
        for found in cows:
            chosen = _within(paths, found.prefix)
            if chosen == []:
                continue
            async for change in found.shown.changes(chosen):
                for path in (change.path, change.old_path):
                    if path is not None and found.served(path) in writing:
                        busy.append(found.served(path))
        busy = list(dict.fromkeys(busy))
        if busy:
            raise ControlError(
                f"nothing applied: {', '.join(busy)} "
                f"{'is' if len(busy) == 1 else 'are'} open for writing through the mount; "
                "close it first",
                busy=busy,
            )


COW_ACTIONS = ("changes", "diff", "apply")


def _request_paths(request: dict[str, Any]) -> list[str] | None:
    """The request's ``paths`` (normalized), or ``None`` for all."""
    paths = request.get("paths")
    if paths is None:
        return None
    if not isinstance(paths, list) or not all(
        isinstance(path, str) and path.startswith("/") for path in paths
    ):
        raise ControlError(f"paths must be a list of absolute paths, not {paths!r}")
    try:
        return [normalize_path(path) for path in paths]
    except OSError as error:
        raise ControlError(str(error)) from None


def _within(paths: list[str] | None, prefix: str) -> list[str] | None:
    """``paths`` (the served tree's) in the coordinates of the layer at ``prefix``: ``None``
    for all of it, ``[]`` when none of them reaches it."""
    if paths is None:
        return None
    chosen = []
    for path in paths:
        if is_under(path, prefix):
            chosen.append(strip_prefix(path, prefix))
        elif is_under(prefix, path):
            chosen.append(ROOT)
    return chosen


def _refusal_entry(found: CowAt, refusal: Refusal) -> dict[str, Any]:
    return {**change_entry(found, refusal.change), "reason": refusal.reason}


def _describe_cow(found: CowAt) -> dict[str, Any]:
    return {"prefix": found.prefix, "lower": repr(found.cow.lower)}


def _nothing_more(applied: list[dict[str, Any]]) -> str:
    if not applied:
        return "nothing applied"
    return f"{len(applied)} change(s) applied to another layer, nothing more"


def describe_checkpoint(record: Checkpoint) -> dict[str, Any]:
    summary = record.summary
    return {
        "number": record.number,
        "turn": record.turn,
        "label": record.label,
        "time": record.time,
        "summary": {
            "added": summary.added,
            "modified": summary.modified,
            "deleted": summary.deleted,
            "bytes": summary.bytes,
        },
    }


def _plain_change(change: TreeChange) -> dict[str, Any]:
    return {"path": change.path, "kind": change.kind, "entry": change.entry, "from": None}


def _number(request: dict[str, Any], key: str, *, optional: bool = False) -> Any:
    value = request.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise ControlError(f"{key} is a checkpoint number, not {value!r}")
    return value


def _describe(turn: Turn) -> dict[str, Any]:
    return {
        "number": turn.number,
        "active": turn.active,
        "started": turn.started,
        "cwd": turn.spill_scope.cwd,
    }


# --- the server (trio, next to the mount) -------------------------------------------------------


async def serve_control(
    controller: Controller,
    path: Path,
    *,
    task_status: trio.TaskStatus[Path] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Listen on ``path`` and answer requests until cancelled; remove the socket on the way out.

    Raises ``OSError`` if the socket cannot be made.
    """
    _remove_stale(path)
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    controller.start()
    try:
        with _address(path) as address:
            await sock.bind(address)
        os.chmod(path, 0o600)
        sock.listen(16)
        listener = trio.SocketListener(sock)
        async with listener, trio.open_nursery() as nursery:
            task_status.started(path)
            while True:
                stream = await listener.accept()
                nursery.start_soon(_serve_client, controller, stream)
    finally:
        controller.close()
        sock.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


@contextlib.contextmanager
def _address(path: Path) -> Iterator[bytes]:
    """An address for ``path`` that fits ``sun_path``: the path itself when it is short enough,
    else the name under ``/proc/self/fd/N``, N being its directory held open meanwhile."""
    full = os.fsencode(path)
    if len(full) <= MAX_SOCKET_PATH:
        yield full
        return
    fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield os.fsencode(f"/proc/self/fd/{fd}/{path.name}")
    finally:
        os.close(fd)


def _remove_stale(path: Path) -> None:
    """A socket left by a killed daemon (the mountpoint was checked free before we got here)."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(info.st_mode):
        raise OSError(f"not a socket, refusing to replace it: {path}")
    path.unlink()


async def _serve_client(controller: Controller, stream: trio.SocketStream) -> None:
    async with stream:
        buffer = b""
        while True:
            try:
                data = await stream.receive_some(65536)
            except trio.BrokenResourceError:
                return
            if not data:
                return
            buffer += data
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                if line.strip():
                    try:
                        parsed = json.loads(line)
                    except ValueError as error:
                        reply = {"ok": False, "error": f"not JSON: {error}"}
                    else:
                        reply = await controller.handle(parsed)
                    try:
                        await stream.send_all(_encode(reply))
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        return
            if len(buffer) > MAX_LINE:
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                    await stream.send_all(_encode({"ok": False, "error": "request line too long"}))
                return


def _encode(reply: dict[str, Any]) -> bytes:
    return json.dumps(reply, default=str).encode() + b"\n"


# --- the client (blocking, for the command line) ------------------------------------------------


def request(
    mountpoint: str, payload: dict[str, Any], *, timeout: float = REQUEST_TIMEOUT
) -> dict[str, Any]:
    """Send one request to the mount at ``mountpoint`` (canonical) and return its answer.

    Raises :class:`ControlError` when there is no control channel or it does not answer.
    """
    path = socket_path(mountpoint)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.settimeout(timeout)
        try:
            with _address(path) as address:
                client.connect(address)
        except (FileNotFoundError, ConnectionRefusedError):
            raise ControlError(
                f"no control channel for {mountpoint} (is it served by `mountd mount`? "
                "see `mountd status`)"
            ) from None
        except OSError as error:
            raise ControlError(f"cannot reach the daemon of {mountpoint}: {error}") from None
        try:
            client.sendall(json.dumps(payload).encode() + b"\n")
            with client.makefile("rb") as reader:
                line = reader.readline()  # (a diff may be long; the daemon is the caller's own)
        except TimeoutError:
            raise ControlError(
                f"the daemon of {mountpoint} did not answer within {timeout:g} s"
            ) from None
        except OSError as error:
            raise ControlError(f"talking to the daemon of {mountpoint} failed: {error}") from None
    if not line:
        raise ControlError(f"the daemon of {mountpoint} closed the control channel")
    try:
        reply: dict[str, Any] = json.loads(line)
    except ValueError as error:
        raise ControlError(f"the daemon of {mountpoint} answered garbage: {error}") from None
    return reply
