"""Who a command in ``mountd run`` is: never host root, and the project's owner in the tree.

Theory of operation
-------------------
The command runs in a user namespace of its own, and its uid *on the host* is an unprivileged one
(:class:`SandboxUser`):

- run by an unprivileged user, it is that user (bubblewrap makes the namespace unprivileged);
- run by root through ``sudo``, it is the user who ran ``sudo`` (``SUDO_UID``/``SUDO_GID``);
- run by root otherwise, it is :data:`SANDBOX_UID`, a uid kept for this: mountd switches to it
  before starting bubblewrap, so the sandbox never holds a capability in the host's namespaces
  and the kernel's checks for root (writable ``/proc/sys`` knobs, among others) never pass.

Inside, the command sees the same uid, or 0 with ``--root`` (uid 0 of its own namespace only,
still without capabilities). ``/etc/passwd`` and ``/etc/group`` inside are the host's with a line
for that user when the host has none, so ``whoami`` and friends work.

Because the command is no longer the daemon's user, files the daemon's user owns in the tree would
not be its own. A root mountd therefore shows the *tree's owner* (the owner of its root directory:
the project's) as the command's host uid through the mount, and records what the command creates
as the tree's owner (:class:`mountd._attrs.OwnerMap`): the agent owns the project, as its user
does, and what apply writes back belongs to that user. What recorded the host's owners then
disagrees with what the command sees (:func:`owners_shown_as_another`): git's index, whose stat
comparison ``mountd._environ`` relaxes for it.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Mapping
from dataclasses import dataclass

from ._attrs import OwnerMap

SANDBOX_UID = 65533  # below nobody (65534); not in the ranges distributions and systemd hand out
SANDBOX_NAME = "agent"


@dataclass(frozen=True)
class SandboxUser:
    """The command's ids on the host and inside, and whether mountd must switch to them
    (``switch``: it runs as root) before it starts bubblewrap."""

    host_uid: int
    host_gid: int
    uid: int
    gid: int
    name: str
    switch: bool

    def passwd(self, host: str) -> str:
        """``/etc/passwd`` inside: ``host`` (the host's) plus a line for this user if needed."""
        if any(_field(line, 2) == str(self.uid) for line in host.splitlines()):
            return host
        line = f"{self.name}:x:{self.uid}:{self.gid}:mountd run:/tmp:/bin/sh\n"
        return _with_line(host, line)

    def group(self, host: str) -> str:
        """``/etc/group`` inside: ``host`` plus a line for this user's group if needed."""
        if any(_field(line, 2) == str(self.gid) for line in host.splitlines()):
            return host
        return _with_line(host, f"{self.name}:x:{self.gid}:\n")


def owners_shown_as_another(owners: OwnerMap | None, user: SandboxUser) -> bool:
    """Whether the command sees the tree's owner as another user than the host's files record:
    mapped by ``owners`` to the command's host ids, which its namespace shows as ``user.uid``/
    ``user.gid`` (root's run: a root-owned project seen as uid 65533; with ``--root`` as 0
    again, the same)."""
    return owners is not None and (owners.tree_uid, owners.tree_gid) != (user.uid, user.gid)


def sandbox_user(*, root_inside: bool, environ: Mapping[str, str] | None = None) -> SandboxUser:
    """Who the command runs as (see the module docstring)."""
    environ = os.environ if environ is None else environ
    if os.geteuid() != 0:
        uid, gid, switch = os.getuid(), os.getgid(), False
    else:
        uid, gid = _sudo_ids(environ) or (SANDBOX_UID, SANDBOX_UID)
        switch = True
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        name = SANDBOX_NAME
    if root_inside:
        return SandboxUser(uid, gid, 0, 0, "root", switch)
    return SandboxUser(uid, gid, uid, gid, name, switch)


def _sudo_ids(environ: Mapping[str, str]) -> tuple[int, int] | None:
    try:
        uid, gid = int(environ["SUDO_UID"]), int(environ["SUDO_GID"])
    except (KeyError, ValueError):
        return None
    return (uid, gid) if uid > 0 and gid > 0 else None


def _field(line: str, index: int) -> str | None:
    fields = line.split(":")
    return fields[index] if len(fields) > index else None


def _with_line(text: str, line: str) -> str:
    return (text if not text or text.endswith("\n") else text + "\n") + line
