"""mcpstage: stage per-session MCP servers into a git worktree's ``.cursor/mcp.json`` safely.

The protocol of ``shared/seeds/cursor-cli-contract.md`` ("MCP staging and cleanup", "Worktree
safety protocol"), on real host paths with plain ``os`` calls, so it behaves the same on a local
disk, a tmpfs and a ``mountd`` mount. One idea per module:

- ``_shape``: the git shape (plain repo, linked worktree, common ``info/exclude``) and paths;
- ``_owner``: process identity and liveness; ``_locks``: lock directories with owner records;
- ``_atomic``: whole-file replacement and debris; ``_exclude``: the marker block (pure);
- ``_bootstrap``: marker and ``.cursor/`` outside the main lock, and their removal;
- ``_manifest``: the lease manifest; ``_config``: merging operator and fusion content (pure);
- ``_journal``: pending/replace/promote and crash recovery; ``_cleanup``: the final cleanup;
- ``_staging``: stage, dispose, heartbeat, reconcile; ``_session``: heartbeats and the exit
  backstop; ``_status``: the read-only report; ``_crash``: crash points for tests;
- ``cli``: the ``mcpstage`` command line.
"""

from ._errors import (
    BusyError,
    CorruptStateError,
    LeaseNotFoundError,
    QuarantinedError,
    RefusedError,
    StageError,
    UsageError,
)
from ._manifest import Lease, ServerEntry, State
from ._session import Session
from ._shape import Shape, resolve
from ._staging import Outcome, dispose, heartbeat, new_key, reconcile, stage
from ._status import Status, status

__all__ = [
    "BusyError",
    "CorruptStateError",
    "Lease",
    "LeaseNotFoundError",
    "Outcome",
    "QuarantinedError",
    "RefusedError",
    "ServerEntry",
    "Session",
    "Shape",
    "StageError",
    "State",
    "Status",
    "UsageError",
    "dispose",
    "heartbeat",
    "new_key",
    "reconcile",
    "resolve",
    "stage",
    "status",
]
