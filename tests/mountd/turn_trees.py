"""Trees for the turn mount tests, served with ``mountd mount --factory tests.mountd.turn_trees:...``."""

from __future__ import annotations

import vfs
from vfs.turns import TurnRoot, turn_root


def notes() -> TurnRoot:
    """An authored in-memory root whose own ``/tmp`` the turn scratch shadows."""
    return turn_root(vfs.temp_fs({"/notes.md": "hello\n", "/tmp/authored.txt": "shadowed\n"}))
