"""agentroot ``mountd``: serve any ``vfs`` composition as a real Linux FUSE mount.

The library API: :func:`serve` (run a mount on the current trio loop until cancelled),
:func:`mounted` (the same as an async context manager), :class:`MountOptions` and :class:`Mount`.
One process serves at most one mount (pyfuse3 keeps its session in module globals).
"""

from ._options import MountOptions
from ._serve import Mount, mounted, serve

__all__ = ["Mount", "MountOptions", "mounted", "serve"]
