"""The final cleanup: what happens once no lease is left, in the inverse order of bootstrap.

Theory of operation
-------------------
:func:`finish` runs under the main lock, after the config holds its final bytes (the baseline,
or the operator's content without fusion keys; committed through the journal like every write):

1. take the bootstrap lock (one attempt only for the process-exit backstop; without it nothing
   is removed and the manifest, now leaseless, tells a later reconciliation to finish);
   then look at the config: while it holds any ``fusion-custom-tools-*`` server (a save that
   brought one back, or a config whose manifest an operator removed) nothing is removed, and
   the caller records or rewrites it: the exclusion stays while a fusion key is in the config;
2. remove the manifest, then every temporary entry dead writers left in ``.cursor/``;
3. remove the marker block from ``info/exclude``: the *last* removal inside the main lock
   (recording the cleanup intent first when ``.cursor/`` is fusion's);

and the caller then releases the main lock *immediately* and only after that makes one
non-recursive ``rmdir`` of ``.cursor/`` (:func:`release_and_rmdir`). The lock itself is a tree
of empty directories, so in the instant between the marker's removal and the release ``git
status`` still shows nothing. Finishing is idempotent: with no manifest (an interrupted bootstrap
or cleanup) it removes whatever of steps 2-3 remains.
"""

from __future__ import annotations

import os

from . import _atomic, _bootstrap, _config, _locks, _manifest
from ._crash import crash_point
from ._shape import TEMP_PREFIX, Shape


def finish(shape: Shape, *, wait: float, once: bool = False) -> bool | None:
    """Steps 1-3 above (main lock held); whether to try the ``rmdir`` after releasing it.

    ``None``: the config holds a fusion server, so nothing was removed.
    """
    spec = _bootstrap.bootstrap_lock(shape, label="unbootstrap")
    held = _locks.try_acquire(spec) if once else _locks.acquire(spec, wait=wait)
    if held is None:
        return False
    try:
        if _config.holds_fusion(_atomic.read_bytes(shape.config_path)):
            return None
        _manifest.remove(shape)
        crash_point("cleanup.state-removed")
        _atomic.sweep(shape.cursor_dir, (TEMP_PREFIX,), max_age=_locks.DEFAULT_TTL)
        _locks.sweep(_bootstrap.main_lock(shape))
        _bootstrap.sweep_git_side(shape)
        return _bootstrap.drop_marker(shape)
    finally:
        _locks.release(held, wait=wait)


def release_and_rmdir(shape: Shape, held: _locks.Held, *, rmdir: bool, wait: float) -> None:
    """Release the main lock; then, if asked (or an unmarked cleanup intent waits), one ``rmdir``."""
    _locks.release(held, wait=wait)
    if rmdir:
        crash_point("cleanup.released")
    if rmdir or (os.path.exists(shape.intent_path) and _bootstrap.read_marker(shape) is None):
        _bootstrap.rmdir_cursor(shape)
