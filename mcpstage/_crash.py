"""Named steps of the protocol, where tests crash it or play an operator at an exact instant.

Theory of operation
-------------------
Each step boundary of the protocol calls :func:`crash_point` with a name from :data:`POINTS`
(or, for a step that only reads, :data:`READ_POINTS`). Two environment variables act there:

- ``MCPSTAGE_CRASH_AT=<step>``: the process sends itself ``SIGKILL`` at that step: no
  ``finally``, no ``atexit``, no flush, exactly what a power cut or the OOM killer leaves;
- ``MCPSTAGE_RUN_AT=<step>`` with ``MCPSTAGE_RUN=<command>``: the command (split like a shell
  would, run without one) runs to completion each time the step is reached, with
  ``MCPSTAGE_STEP`` naming the step: an operator's editor saving between a read and a rename,
  deterministically.

Unset (always, outside tests) it costs two dictionary lookups. An unknown name is a programming
error, so :data:`POINTS` stays the complete inventory the crash tests iterate over.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess

ENV = "MCPSTAGE_CRASH_AT"
RUN_AT = "MCPSTAGE_RUN_AT"
RUN = "MCPSTAGE_RUN"


def _lock_points(label: str) -> tuple[str, ...]:
    return (f"{label}-lock.staged", f"{label}-lock.acquired", f"{label}-lock.trashed")


def _commit_points(kind: str) -> tuple[str, ...]:
    return (
        f"{kind}.pending-written",
        f"{kind}.config-temp-written",
        f"{kind}.config-checked",
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

# Steps that change nothing durable (a crash there is a crash before the next step).
READ_POINTS: tuple[str, ...] = ("config.reread",)

_KNOWN = frozenset(POINTS + READ_POINTS)


def crash_point(name: str) -> None:
    """Die by ``SIGKILL`` here if ``MCPSTAGE_CRASH_AT`` names this step; run ``MCPSTAGE_RUN``
    first if ``MCPSTAGE_RUN_AT`` does."""
    if name not in _KNOWN:
        raise ValueError(f"unknown crash point {name!r}")
    if os.environ.get(RUN_AT) == name:
        command = shlex.split(os.environ.get(RUN, ""))
        if command:
            subprocess.run(command, env={**os.environ, "MCPSTAGE_STEP": name}, check=False)
    if os.environ.get(ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
