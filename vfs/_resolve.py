"""How a path resolves through a tree's symlinks: one resolver, which every tree drives.

Theory of operation
-------------------
:func:`resolution` is sans-I/O, as h11's state machine is: a generator that asks questions and
is told the answers, never touching a tree itself. It yields :class:`Lstat` ("what is at this
real path, not following it?", answered with its :data:`Kind`) and :class:`Readlink` ("what does
this link point at?", answered with the target) and returns a :class:`Resolved`. A tree answers
from its own storage (:func:`drive` for an async tree, :func:`drive_sync` for one that answers
at once), so every tree, the policy that judges a path and apply's protection walk the same
rules and reach the same place:

- the path is absolute and normalized (the API's ``..`` is textual, see :mod:`vfs._paths`);
  its components resolve left to right from the tree's root;
- a symlink met before the last component is followed; the last one only with ``follow``. An
  absolute target starts again from the tree's root (the tree is the process's ``/``, as under a
  chroot or a mount used as a sandbox's root); a relative one from the link's directory;
- in a target, ``.`` stays and ``..`` goes to the parent of the *real* directory reached so far:
  after ``/y -> /secret/inner``, ``/y/..`` is ``/secret``, never ``/`` (which is what textual
  normalization of ``y/..`` would give, and how a policy on ``/secret`` was once walked around);
  at the root, ``..`` stays there;
- more than :data:`SYMLOOP_MAX` links in one resolution is ``ELOOP``; a component before the last
  that is missing is ``ENOENT``, one that is not a directory ``ENOTDIR``; the last may be missing
  (``Resolved.kind == "missing"``: where a create would put it). A trailing link's target that
  ends in ``/`` or ``..`` resolves to a directory, as the kernel's does.
- a failure is an answer too, not an exception: ``Resolved.error`` is its errno and
  ``Resolved.path`` the real path where resolution stopped with the rest of the path after it,
  which is what a policy must judge (so a refusal never tells what lies behind a ``none``
  path); :meth:`Resolved.check` raises the error a tree reports.

Paths are built from real names one at a time, so a resolved path may be longer than
``PATH_MAX``: a tree that hands it to a system call in one piece must walk it instead.
"""

from __future__ import annotations

import errno
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import cast

from ._errors import FileNotFoundError, NotADirectoryError, PathError
from ._paths import ROOT, join_path, parent_path
from ._types import Kind

SYMLOOP_MAX = 40  # Linux's limit on symlinks followed in one resolution


@dataclass(frozen=True, slots=True)
class Lstat:
    """Question: the kind of the entry at the real path ``path`` (not following it)."""

    path: str


@dataclass(frozen=True, slots=True)
class Readlink:
    """Question: the target of the symlink at the real path ``path``."""

    path: str


Question = Lstat | Readlink


@dataclass(frozen=True, slots=True)
class Resolved:
    """Where a path leads: the real ``path`` of its last entry (or where it would be made), its
    ``kind`` there (``missing`` if nothing is), and whether any symlink was followed; or, with
    ``error`` (an errno), where resolution stopped (see the module docstring)."""

    path: str
    kind: Kind
    through_links: bool
    error: int = 0

    def check(self, path: str) -> Resolved:
        """``self``, or raise its error about ``path`` (the path as the caller named it)."""
        if self.error == errno.ENOENT:
            raise FileNotFoundError(path)
        if self.error == errno.ENOTDIR:
            raise NotADirectoryError(path)
        if self.error:
            raise PathError(path, errno=self.error)
        return self


Resolution = Generator[Question, str, Resolved]  # answers: a Kind, or a target


def resolution(path: str, *, follow: bool) -> Resolution:
    """Resolve the normalized ``path`` (see the module docstring)."""
    if path == ROOT:
        return Resolved(ROOT, "directory", False)
    pending = path[1:].split("/")
    pending.reverse()
    real = ROOT  # the real directory reached so far
    hops = 0
    while pending:
        name = pending.pop()
        if name in ("", "."):
            continue
        if name == "..":
            real = parent_path(real)
            continue
        here = join_path(real, name)
        kind = cast(Kind, (yield Lstat(here)))
        last = not any(part not in ("", ".") for part in pending)
        if kind == "symlink" and (follow or not last):
            hops += 1
            if hops > SYMLOOP_MAX:
                return _stopped(here, pending, errno.ELOOP)
            target = yield Readlink(here)
            if not target:
                return _stopped(here, pending, errno.ENOENT)
            if target.startswith("/"):
                real = ROOT
            segments = target.split("/")
            segments.reverse()
            pending.extend(segments)
            continue
        if last:
            if pending and kind not in ("directory", "missing"):  # "file/" or "file/."
                return _stopped(here, [], errno.ENOTDIR)
            return Resolved(here, kind, hops > 0)
        if kind == "missing":
            return _stopped(here, pending, errno.ENOENT)
        if kind != "directory":
            return _stopped(here, pending, errno.ENOTDIR)
        real = here
    # The path ended with ".." or "." after a link: it names a real directory, already walked.
    return Resolved(real, "directory", hops > 0)


def _stopped(here: str, pending: list[str], code: int) -> Resolved:
    """A failure at ``here``, with the rest of the path (``pending``, reversed) after it."""
    path = here
    for name in reversed(pending):
        if name not in ("", ".", ".."):
            path = join_path(path, name)
    return Resolved(path, "missing", True, code)


def drive_sync(
    steps: Resolution, lstat: Callable[[str], Kind], readlink: Callable[[str], str]
) -> Resolved:
    """Run ``steps`` with answers that come at once."""
    answer: str | None = None
    try:
        while True:
            question = steps.send(answer) if answer is not None else next(steps)
            answer = (
                lstat(question.path) if isinstance(question, Lstat) else readlink(question.path)
            )
    except StopIteration as done:
        result: Resolved = done.value
        return result


async def drive(
    steps: Resolution,
    lstat: Callable[[str], Awaitable[Kind]],
    readlink: Callable[[str], Awaitable[str]],
) -> Resolved:
    """Run ``steps`` with answers that are awaited."""
    answer: str | None = None
    try:
        while True:
            question = steps.send(answer) if answer is not None else next(steps)
            if isinstance(question, Lstat):
                answer = await lstat(question.path)
            else:
                answer = await readlink(question.path)
    except StopIteration as done:
        result: Resolved = done.value
        return result
