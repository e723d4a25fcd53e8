"""Listing a new mount's tree through the mount, so that the kernel already holds its entries.

Theory of operation
-------------------
A directory's first listing through the mount is a READDIRPLUS (``mountd._listings``): its reply
hands the kernel the attributes of each entry, which it keeps as if it had looked the name up,
for the mount's entry and attribute timeouts. A program that then walks the tree is answered by
the kernel: ``git status`` lstats every file of its index before it reads any directory, one
LOOKUP each in a fresh mount (about 85 us of daemon CPU), unless the directory was listed.

So a :class:`Warmer` lists the tree once, through the mount (``MountOptions.warm``):

- from a daemon thread of its own, never the event loop's, which serves the listing's requests
  (the one place the daemon reads through its own mount; nothing waits on it but ``serve``);
- with ``os.scandir`` of each directory and no ``stat``: an entry's type comes with the listing;
- each directory opened from its parent's descriptor with ``O_NOFOLLOW``, so the walk never
  follows a symlink, and never leaves the mount;
- at most ``cap`` entries (:data:`WARM_ENTRIES`), so a huge tree costs a bounded start;
- stopped between two directories when the mount goes away (:meth:`Warmer.stop`); a directory
  that cannot be listed (removed meanwhile, refused by a policy) is skipped.

``mountd.serve`` reports the mount live only once the listing is done, or after
``MountOptions.warm_wait`` seconds, when it goes on in the background: a listing racing the
first program gains nothing (git's preload threads outrun one listing thread, and the daemon
serves both), so the mount waits for it. See ``docs/decisions/warm-listing.md``.
"""

from __future__ import annotations

import errno
import logging
import os
import threading

log = logging.getLogger("mountd")

WARM_ENTRIES = 200_000
"""At most this many entries are listed: about 20 us each through the default tree (tldr-pages'
39,000 in 0.7 s), so the cap keeps a huge tree's listing within about :data:`WARM_WAIT`."""

WARM_WAIT = 5.0
"""Seconds at most a mount waits for its listing before it is handed over."""

NO_WARM_HELP = (
    "do not list the tree through the mount before handing it over (the listing lets the "
    f"kernel answer the first `git status` from its cache; it is waited for {WARM_WAIT:g} s at "
    "most, then goes on in the background)"
)

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Warmer:
    """Lists the tree at ``root`` once, in a thread of its own (see the module docstring)."""

    def __init__(self, root: str, *, cap: int = WARM_ENTRIES) -> None:
        self.root = root
        self.cap = cap
        self.listed = 0  # entries listed so far ("." and ".." are not listed)
        self._stopping = threading.Event()
        self._finished = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mountd-warm", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def wait(self, timeout: float) -> bool:
        """Block until the listing is done, ``timeout`` seconds at most; whether it is."""
        return self._finished.wait(timeout)

    @property
    def finished(self) -> bool:
        return self._finished.is_set()

    def stop(self, timeout: float) -> None:
        """Stop the listing after the directory it lists, waiting ``timeout`` seconds at most
        (blocking: a mount calls it from a worker thread while its requests are served)."""
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        try:
            self._list()
        except OSError as error:  # the mount went away under the listing
            log.debug("listing %s ended early: %s", self.root, error)
        except Exception:  # a listing is an optimisation: never let it take the mount down
            log.exception("listing %s failed", self.root)
        finally:
            self._finished.set()

    def _list(self) -> None:
        """Depth first, each directory open while its subdirectories are listed."""
        above: list[tuple[int, list[str]]] = []  # open directories, subdirectories to go

        def enter(fd: int) -> None:
            names: list[str] = []
            above.append((fd, names))  # (closed below, even if listing it fails)
            names.extend(reversed(self._subdirectories(fd)))

        try:
            enter(os.open(self.root, _DIRECTORY))
            while above and self.listed < self.cap and not self._stopping.is_set():
                fd, names = above[-1]
                if not names:
                    os.close(above.pop()[0])
                    continue
                try:
                    child = os.open(names.pop(), _DIRECTORY, dir_fd=fd)
                except OSError as error:  # gone, or no longer a directory, since it was listed
                    _skip(error)
                    continue
                enter(child)
        finally:
            for fd, _ in above:
                os.close(fd)

    def _subdirectories(self, fd: int) -> list[str]:
        """List the directory open at ``fd``, counting its entries; its subdirectories' names."""
        found = []
        try:
            with os.scandir(fd) as entries:
                for entry in entries:
                    if self.listed >= self.cap:
                        break
                    self.listed += 1
                    if entry.is_dir(follow_symlinks=False):  # from the listing's type: no stat
                        found.append(entry.name)
        except OSError as error:
            _skip(error)
        return found


def _skip(error: OSError) -> None:
    """A directory the listing cannot open or read is skipped, unless the mount is gone."""
    if error.errno == errno.ENOTCONN:
        raise error
