"""Named crash points, for tests that kill the protocol at every step.

Theory of operation
-------------------
Each step boundary of the protocol calls :func:`crash_point` with a name from :data:`POINTS`.
When the environment variable ``MCPSTAGE_CRASH_AT`` names that step, the process sends itself
``SIGKILL`` there: no ``finally``, no ``atexit``, no flush, exactly what a power cut or the OOM
killer leaves. Unset (always, outside tests) it costs one dictionary lookup. An unknown name is
a programming error, so the list stays the complete inventory the crash tests iterate over.
"""

from __future__ import annotations

import os
import signal

ENV = "MCPSTAGE_CRASH_AT"


def _lock_points(label: str) -> tuple[str, ...]:
    return (f"{label}-lock.staged", f"{label}-lock.acquired", f"{label}-lock.trashed")


def _commit_points(kind: str) -> tuple[str, ...]:
    return (
        f"{kind}.pending-written",
        f"{kind}.config-temp-written",
        f"{kind}.config-replaced",
        f"{kind}.promoted",
    )


# In protocol order: bootstrap, main lock, first-stage baseline, one journaled commit per
# mutation kind, then the final cleanup (its own bootstrap-lock label) and the rmdir after release.
POINTS: tuple[str, ...] = (
    *_lock_points("bootstrap"),
    "bootstrap.marker-written",
    "bootstrap.cursor-made",
    *_lock_points("main"),
    "stage.baseline-written",
    *_commit_points("stage"),
    *_commit_points("dispose"),
    *_commit_points("reap"),
    *_lock_points("unbootstrap"),
    "cleanup.state-removed",
    "cleanup.intent-written",
    "cleanup.marker-removed",
    "cleanup.released",
)

_KNOWN = frozenset(POINTS)


def crash_point(name: str) -> None:
    """Die by ``SIGKILL`` here if ``MCPSTAGE_CRASH_AT`` names this step."""
    if name not in _KNOWN:
        raise ValueError(f"unknown crash point {name!r}")
    if os.environ.get(ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
