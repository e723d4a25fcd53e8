"""What can go wrong, as exceptions that carry the command line's exit status.

Theory of operation
-------------------
Every refusal and failure of the protocol is a :class:`StageError` whose class fixes the exit
status ``mcpstage`` returns (``exit_code``), so a script can branch on the number and show the
message, which always starts with a stable word (``refused:``, ``quarantined:``, ``busy:``,
``not found:``, ``usage:``). Nothing here does I/O.

Exit statuses: 0 success, 1 runtime failure, 2 usage, 3 refused (the worktree is unsafe to
stage in), 4 quarantined (an unparsable operator config), 5 busy (a lock stayed held), 6 lease
not found.
"""

from __future__ import annotations

from typing import ClassVar

OK = 0
FAILURE = 1
USAGE = 2
REFUSED = 3
QUARANTINED = 4
BUSY = 5
NOT_FOUND = 6


class StageError(Exception):
    """A failure of the staging protocol; ``str()`` is the message for operators."""

    exit_code: ClassVar[int] = FAILURE


class UsageError(StageError):
    """A request that cannot work: no git worktree there, a malformed key or entry."""

    exit_code: ClassVar[int] = USAGE


class RefusedError(StageError):
    """The worktree is unsafe to stage in (a tracked config, a symlinked ``.cursor``)."""

    exit_code: ClassVar[int] = REFUSED


class QuarantinedError(StageError):
    """The operator's config does not parse: nothing writes it until it is repaired."""

    exit_code: ClassVar[int] = QUARANTINED


class BusyError(StageError):
    """A lock stayed held by a live owner for the whole retry window."""

    exit_code: ClassVar[int] = BUSY


class LeaseNotFoundError(StageError):
    """No lease of that key in the worktree's manifest."""

    exit_code: ClassVar[int] = NOT_FOUND


class CorruptStateError(StageError):
    """The lease manifest exists but cannot be read; an operator must repair or remove it."""
