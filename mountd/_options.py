"""How a tree is mounted: the options a caller chooses (:class:`MountOptions`).

What a mount then does with them, given what this pyfuse3 and the served tree can do, is decided
once, by ``mountd._terms.negotiate``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._attrs import AttrPolicy, OwnerMap
from ._warm import WARM_ENTRIES, WARM_WAIT

SUBTYPE = "mountd"


@dataclass(frozen=True)
class MountOptions:
    """How a tree is mounted.

    ``entry_timeout``/``attr_timeout``/``negative_timeout``: seconds the kernel may answer lookups,
    attributes and "no such name" from its cache. Changes made through the mount or through a
    :class:`vfs.Watchable` tree's API invalidate the cache, so long timeouts are safe; lower them
    for trees that change behind the API's back (a host directory other processes write).
    ``writeback``: let the kernel buffer writes (fewer, larger write requests); off by default,
    see ``docs/decisions/mountd-core.md``. ``debug``: libfuse's request trace on stderr.
    ``fast_reader``: read requests with :mod:`mountd._reader` instead of pyfuse3's own loop
    (turn off to compare, or if a pyfuse3 upgrade misbehaves with it). ``idle_spin``: seconds at
    most that its reader keeps polling for the next request before it sleeps, while requests come
    that close together (a sleeping CPU of a virtual machine takes tens of microseconds to wake;
    0: always sleep). ``read_ahead_kb``: the
    mount's read-ahead window (``None`` keeps libfuse's 128 KiB); needs root, else ignored.
    ``cache_listings``: the kernel keeps directory listings until the tree changes (needs the
    pyfuse3 that ``scripts/install`` builds; ignored with a stock one), like attributes.
    ``keep_written_pages``: what is written through the mount stays in the kernel's page cache
    for later readers (the kernel's own rule drops a file's pages whenever its modification time
    moves; mountd then drops them itself when the file changes elsewhere; needs the same pyfuse3).
    ``files_by_inode``: the kernel sends no OPEN or RELEASE for files that already exist (two
    requests less per ``open(2)``; needs the same pyfuse3, and a tree that buffers no writes in
    its open files). The mount is then not told about opens: an ``O_WRONLY`` open of a file the
    tree will not let be written fails at the first ``write(2)`` (``O_TRUNC`` still at the open).
    ``complete_pages``: with ``files_by_inode``, when a file's times are set (tar, ``cp -a``,
    rsync, ``touch``) the kernel is handed the pages that writes through the mount left
    incomplete, so the next reader sends no request (it costs the setattr a read of those bytes
    and a store; off, a reader fetches them). A page dirtied through a shared writable ``mmap``
    and not yet written back when another process sets the times is overwritten by the tree's
    bytes: turn it off for a tree written that way.
    ``reuse_known_attributes``: a directory listing answers a file with what the mount learned
    of it, unexamined, while only the mount changed it since (with ``attr_timeout > 0``, and a
    tree that can list that way: ``dir_fs``, ``temp_fs``); a host file edited in place by
    another program then shows its change once the kernel's attributes expire or a lookup asks
    again, as with ``stat``. Off, each listing examines every entry afresh.
    ``owners``: show one owner of the tree as another user (see :class:`mountd._attrs.OwnerMap`).
    ``warm``: once the mount is live, list its tree through the mount (``warm_entries`` entries
    at most), so that the kernel holds every entry's attributes before the first program walks
    it (the first ``git status`` then sends a few LOOKUPs instead of one a file); the mount is
    reported live when the listing is done, or after ``warm_wait`` seconds, when it goes on in
    the background (``mountd._warm``). Off by default; the default tree's mounts (``mountd
    mount`` of a directory, ``mountd run``) turn it on. It pays while the entries stay cached:
    ``entry_timeout`` and ``attr_timeout`` must outlast the wait for the first program.
    """

    fsname: str = "agentroot"
    allow_other: bool = False
    read_only: bool = False
    entry_timeout: float = 300.0
    attr_timeout: float = 300.0
    negative_timeout: float = 300.0
    writeback: bool = False
    debug: bool = False
    fast_reader: bool = True
    idle_spin: float = 500e-6
    cache_listings: bool = True
    keep_written_pages: bool = True
    files_by_inode: bool = True
    complete_pages: bool = True
    reuse_known_attributes: bool = True
    read_ahead_kb: int | None = 1024
    owners: OwnerMap | None = None
    warm: bool = False
    warm_wait: float = WARM_WAIT
    warm_entries: int = WARM_ENTRIES
    # Longest an API write waits for the kernel to drop its caches (see mountd._invalidate).
    invalidation_timeout: float = 10.0
    # Longest the shutdown waits for in-flight requests before cancelling them.
    shutdown_timeout: float = 5.0

    def __post_init__(self) -> None:
        if (
            not self.fsname
            or not self.fsname.isascii()
            or any(c in self.fsname for c in ", \t\n\\")
        ):
            raise ValueError(
                f"fsname must be ASCII without commas, spaces or backslashes: {self.fsname!r}"
            )
        if self.writeback and self.attr_timeout <= 0:
            raise ValueError(
                "writeback needs attr_timeout > 0 (else a GETATTR precedes every write)"
            )
        if not 0 <= self.idle_spin <= 0.1:
            raise ValueError(f"idle_spin must be between 0 and 0.1 seconds: {self.idle_spin!r}")
        if not self.warm_wait >= 0 or self.warm_entries < 0:
            raise ValueError(
                f"warm_wait and warm_entries must be 0 or more: {self.warm_wait!r}, "
                f"{self.warm_entries!r}"
            )

    @property
    def lists_first(self) -> bool:
        """Whether the mount lists its tree before it is handed over: asked for, and what the
        listing tells the kernel stays cached (``warm`` with both timeouts above 0)."""
        return self.warm and self.entry_timeout > 0 and self.attr_timeout > 0

    def attr_policy(self, uid: int, gid: int) -> AttrPolicy:
        """How the mount fills attributes, for a daemon running as ``uid``/``gid``."""
        return AttrPolicy(
            uid=uid,
            gid=gid,
            entry_timeout=self.entry_timeout,
            attr_timeout=self.attr_timeout,
            negative_timeout=self.negative_timeout,
            owners=self.owners,
        )

    def fuse_options(self) -> set[str]:
        """The ``-o`` options given to libfuse (only ones known not to break the mount)."""
        options = {
            f"fsname={self.fsname}",
            f"subtype={SUBTYPE}",
            "default_permissions",
            "nosuid",
            "nodev",
        }
        if self.allow_other:
            options.add("allow_other")
        if self.read_only:
            options.add("ro")
        if self.debug:
            options.add("debug")
        return options
