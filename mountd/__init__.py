"""agentroot ``mountd``: serve any ``vfs`` composition as a real Linux FUSE mount.

The library API: :func:`serve` (run a mount on the current trio loop until cancelled),
:func:`mounted` (the same as an async context manager), :class:`MountOptions` and :class:`Mount`.
One process serves at most one mount (pyfuse3 keeps its session in module globals).

The four are imported on first use (PEP 562), so that importing a submodule first
(``mountd.cli``, the command line) decides how that happens: see ``mountd._collector``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._options import MountOptions
    from ._serve import Mount, mounted, serve

__all__ = ["Mount", "MountOptions", "mounted", "serve"]

_MODULES = {
    "Mount": "._serve",
    "MountOptions": "._options",
    "mounted": "._serve",
    "serve": "._serve",
}


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value
