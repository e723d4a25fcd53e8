"""Turns: what a turn's tools run on, its ``/tmp`` scratch, and the native-tool spill rewrite.

- :class:`Session` binds each turn of a session to the agent's root (host default, a static
  FileSystem, or a factory re-resolved per turn) and, when its allowlist keeps a web tool,
  composes ``union_fs({"/": authored, "/tmp": temp_fs()})`` per turn, never keeping it
  (``vfs.turns._binding``).
- :class:`Turn` holds that root and adopts spills of native webSearch/webFetch
  (:meth:`Turn.adopt_spill`, ``vfs.turns._turn``); ``toolset.bind(turn)`` gives the file tools
  of the turn, which end with it and move a host spill path in their Read/Grep input to
  ``/tmp`` themselves (``vfs.turns._tools``); :func:`rewrite_tool_input` is that rewrite for a
  harness routing calls itself (``vfs.turns._spill``, pure).
- :class:`TurnRoot` is the same for a live mount: one tree whose ``/tmp`` is swapped per turn
  (``vfs.turns._turn_root``).
"""

from ._binding import HostContext, RootContext, RootFactory, Session, scratch_root
from ._spill import (
    SpillScope,
    is_read_or_grep,
    is_web_tool,
    rewrite_input_path,
    rewrite_result,
    rewrite_tool_input,
    scratch_path,
    spill_references,
)
from ._turn import SpillSnapshot, Turn, TurnEndedError
from ._turn_root import TurnRoot, turn_root

__all__ = [
    "HostContext",
    "RootContext",
    "RootFactory",
    "Session",
    "SpillScope",
    "SpillSnapshot",
    "Turn",
    "TurnEndedError",
    "TurnRoot",
    "is_read_or_grep",
    "is_web_tool",
    "rewrite_input_path",
    "rewrite_result",
    "rewrite_tool_input",
    "scratch_path",
    "scratch_root",
    "spill_references",
    "turn_root",
]
