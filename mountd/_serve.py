"""Serving a tree at a mountpoint: the library API the command line and harnesses call.

Theory of operation
-------------------
:func:`serve` mounts a :class:`vfs.FileSystem` with pyfuse3 and serves it on the calling trio
loop until cancelled (or until someone unmounts it from outside), then unmounts, whatever
happened. In order:

1. Claim the process's one pyfuse3 session. pyfuse3 keeps its session in module globals, so a
   second mount in the same process would silently orphan the first; it raises ``RuntimeError``.
2. Clear a stale mount of ours at the same path (a daemon killed with SIGKILL leaves one that
   answers ``ENOTCONN``), refuse a live one, and check the mountpoint is a directory.
3. Register the mountpoint with the host-directory guard, so that a ``dir_fs`` serving a
   directory that contains the mountpoint never reads through its own mount (a deadlock).
4. ``pyfuse3.init`` (``fsname``, ``subtype=mountd`` so mountinfo shows ``fuse.mountd``, ``nosuid``,
   ``nodev``, ``default_permissions``; ``allow_other`` and ``ro`` only when asked), start
   ``pyfuse3.main`` in a shielded scope, and wait until the mount answers (``statvfs`` and a new
   ``st_dev`` seen from a worker thread) before reporting :class:`Mount` through ``task_status``.
5. Subscribe to the tree's changes (if it is :class:`vfs.Watchable`) to keep the kernel coherent.
6. With ``MountOptions.warm``, list the tree through the mount (:class:`mountd._warm.Warmer`,
   from a thread of its own) and report the mount only once that is done, or after
   ``warm_wait`` seconds (the listing then goes on in the background).
7. On the way out: stop the listing, unsubscribe, let in-flight invalidations finish while
   requests are still served, ``pyfuse3.terminate()`` so in-flight requests complete (the main
   loop is cancelled only if it does not stop in time), close files a process still held open,
   then ``pyfuse3.close(unmount=True)``.

:func:`mounted` wraps this as an async context manager for harnesses inside their own trio program.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import queue
import sys
import threading
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from contextlib import asynccontextmanager

import pyfuse3
import trio

if sys.version_info < (3, 11):
    from exceptiongroup import BaseExceptionGroup

import vfs
from vfs import Change, Checkpoints, FileSystem, PosixFileSystem, Watchable
from vfs.lowlevel import ChangeCallback, guard_mountpoint, release_mountpoint, split_path

from . import _registry
from ._invalidate import InvalidateInode, Invalidator, send_to_kernel
from ._ops import Operations
from ._options import MountOptions
from ._reader import Reader
from ._reader import installed as reader_installed
from ._terms import FuseFeatures, TreeFeatures, negotiate
from ._warm import Warmer
from ._writers import inodes_open_for_writing

log = logging.getLogger("mountd")


class Mount:
    """A live mount: where it is, how it was made, and how many requests of each kind it served.

    ``counters`` maps FUSE operation names (``lookup``, ``getattr``, ``read``, ...) to the number
    of requests served, plus ``InvalidateEntry``/``InvalidateInode`` for kernel notifications
    sent because the tree changed through its API.
    """

    def __init__(self, mountpoint: str, options: MountOptions, tree: PosixFileSystem) -> None:
        self.mountpoint = mountpoint
        self.options = options
        self.tree = tree
        self.counters: Counter[str] = Counter()
        self._ops: Operations | None = None
        self.warmer: Warmer | None = None  # its listing of the tree (``MountOptions.warm``)
        self._loop_thread = threading.get_ident()  # (made on the thread that serves it)
        # The mountpoint as /proc/self/mountinfo lists it, found before mounting: resolving
        # it later would look through the mount.
        self._listed_as = _registry.canonical(mountpoint)

    @property
    def known_inodes(self) -> int:
        """How many inodes the mount currently tracks (the root included)."""
        return 0 if self._ops is None else len(self._ops.inodes)

    @property
    def open_handles(self) -> int:
        return 0 if self._ops is None else len(self._ops.handles)

    def open_for_writing(self) -> list[str]:
        """The tree paths of the files open for writing through the mount, sorted (a file whose
        name is gone is left out). ``mountd apply`` refuses to apply them. Served by inode, the
        kernel does not tell the mount about opens: this scans ``/proc`` (``mountd._writers``;
        touches no mount, so the event loop may call it)."""
        if self._ops is None:
            return []
        table = self._ops.inodes
        nodes = [handle.node for handle in self._ops.handles.open_files() if handle.writable]
        terms = self._ops.terms
        if terms.files_by_inode:  # opens are not told to the mount: ask the kernel
            entry = _registry.mount_at(self._listed_as)
            held = set() if entry is None else inodes_open_for_writing(entry.device)
            if held and terms.shows_tree_inos:  # the kernel knows an inode by what stat shows
                nodes += [node for node in table if node.shown in held]
            elif held:
                nodes += [node for node in map(table.find, held) if node is not None]
        paths = {table.path(node) for node in nodes}
        return sorted(path for path in paths if path is not None)

    @contextlib.asynccontextmanager
    async def keeping_files(self, paths: Iterable[str]) -> AsyncIterator[None]:
        """Around a change the tree makes behind the mount's back that replaces or removes the
        files at ``paths`` (a rewind): the files the kernel knows there get keepers first
        (``mountd._keepers``), so a descriptor held across the change keeps its old file, as
        after a rename over it through the mount. The tree calls it before every rewind
        (``Checkpoints.on_rewind``); a rewind asked for on another thread than the one serving
        the mount gets none (the inode table is that thread's)."""
        ops = self._ops if threading.get_ident() == self._loop_thread else None
        async with contextlib.AsyncExitStack() as stack:
            if ops is not None:
                for path in sorted(set(paths)):
                    node = ops.inodes.root
                    parts = split_path(path)
                    for name in parts[:-1]:
                        found = node.children.get(name)
                        if found is None:
                            break
                        node = found
                    else:
                        if parts:
                            keeping = ops.keepers.keeping(
                                node, parts[-1], path, keeper=True, attributes=True
                            )
                            await stack.enter_async_context(keeping)
            yield

    def __repr__(self) -> str:
        return f"Mount({self.mountpoint!r})"


class _ProcessSession:
    """The process's single pyfuse3 session (pyfuse3 keeps it in module globals)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.mountpoint: str | None = None

    @contextlib.contextmanager
    def claim(self, mountpoint: str) -> Iterator[None]:
        if not self._lock.acquire(blocking=False):
            raise RuntimeError(
                f"this process already serves a mount at {self.mountpoint}; pyfuse3 allows one "
                f"mount per process, so serve {mountpoint} from another process"
            )
        self.mountpoint = mountpoint
        try:
            yield
        finally:
            self.mountpoint = None
            self._lock.release()


# Process-wide because pyfuse3's own session is process-wide.
_SESSION = _ProcessSession()


async def serve(
    fs: FileSystem,
    mountpoint: str | os.PathLike[str],
    options: MountOptions = MountOptions(),
    *,
    task_status: trio.TaskStatus[Mount] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Mount ``fs`` at ``mountpoint`` and serve it until cancelled; always unmount on the way out.

    Reports the :class:`Mount` through ``task_status`` once the mount answers requests, so
    ``mount = await nursery.start(serve, fs, path)`` returns with the mount usable. Returns
    normally if the mount is removed from outside (``fusermount3 -u``). Raises ``RuntimeError``
    when this process already serves a mount or the mountpoint holds a live mount, and
    ``OSError`` when the mountpoint is not a directory.
    """
    target = os.path.abspath(os.fspath(mountpoint))  # noqa: ASYNC240 (no I/O: string work)
    with _SESSION.claim(target):
        await trio.to_thread.run_sync(_prepare_mountpoint, target)
        parent_dev = os.stat(target).st_dev
        tree = vfs.posix_view(fs)
        mount = Mount(target, options, tree)
        notifier = _CacheNotifier()
        ops = Operations(
            tree,
            terms=negotiate(options, FuseFeatures.installed(), TreeFeatures.of(tree)),
            attrs=options.attr_policy(os.getuid(), os.getgid()),
            origin=mount,
            counters=mount.counters,
            kernel=notifier,
        )
        mount._ops = ops
        release_guard = _guard_mountpoint(target)
        try:
            _init_session(ops, target, options)
            try:
                with _unwrap_single():
                    await _serve_session(ops, fs, mount, parent_dev, notifier, task_status)
            finally:
                pyfuse3.close(unmount=True)
        finally:
            release_guard()
            notifier.close(options.shutdown_timeout)  # closed already, unless the mount failed


@asynccontextmanager
async def mounted(
    fs: FileSystem, mountpoint: str | os.PathLike[str], options: MountOptions = MountOptions()
) -> AsyncIterator[Mount]:
    """Mount ``fs`` for the duration of an ``async with`` block (trio only).

    Touch the mount from worker threads (``trio.to_thread.run_sync``) or other processes, never
    with blocking calls on the event loop thread: that thread serves the requests.
    """
    with _unwrap_single():
        async with trio.open_nursery() as nursery:
            mount: Mount = await nursery.start(serve, fs, mountpoint, options)
            try:
                yield mount
            finally:
                nursery.cancel_scope.cancel()


@contextlib.contextmanager
def _unwrap_single() -> Iterator[None]:
    """Re-raise a lone exception out of a nursery's exception group as itself, so that callers
    of :func:`serve` and :func:`mounted` (and the body of ``async with mounted``) catch
    ``RuntimeError`` or ``OSError`` as they would from a plain call."""
    try:
        yield
    except BaseExceptionGroup as group:
        error: BaseException = group
        while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
            error = error.exceptions[0]
        if error is group:
            raise
        raise error from None


def _init_session(ops: Operations, target: str, options: MountOptions) -> None:
    try:
        pyfuse3.init(ops, target, options.fuse_options())
    except RuntimeError as error:
        if "fuse_session_mount" in str(error):
            pyfuse3.close(unmount=False)  # the session exists; free it
        raise RuntimeError(f"could not mount {target}: {error}") from error


class _CacheNotifier:
    """The mount's :class:`mountd._pages.KernelCache`: tells the kernel to drop what it caches
    of an inode, or to take pages, off the request path, from a thread of its own: the kernel
    may hold a notification until a request on that inode is answered, by the event loop. It
    is given to ``Operations`` at construction and closed by ``serve``. One thread fed by a
    queue rather than a trio worker per notification: a drop costs about 1.5 us, a trip through
    trio's threads about 150 us of CPU, which made drops queue up for longer than the work they
    were for. In order: a notification queued before another is sent before it."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[int | _Awaited | None] = queue.SimpleQueue()
        self._token = trio.lowlevel.current_trio_token()
        self._thread = threading.Thread(target=self._run, name="mountd-page-cache", daemon=True)
        self._thread.start()
        self._closed = False

    def drop(self, ino: int) -> None:
        self._queue.put(ino)

    async def drop_and_wait(self, ino: int) -> None:
        """Returns once the kernel dropped what it caches of ``ino`` (or refused to)."""
        await self._wait_for(_Awaited(ino, None))

    async def store(self, ino: int, stores: list[tuple[int, bytes]]) -> None:
        """Returns once the kernel holds each ``(offset, data)`` of ``ino`` (or refused it)."""
        await self._wait_for(_Awaited(ino, stores))

    async def _wait_for(self, item: _Awaited) -> None:
        """Queue ``item`` and return once the thread sent it.

        Waited for blocking the event loop, briefly: a notification takes microseconds, and a
        trip back through trio costs two thread wake-ups more, dear on these machines (a
        setattr of every untarred file). The kernel holds a notification on a page a reader
        keeps locked until the event loop answers that reader's READ, so after
        :data:`BLOCKING_WAIT` the loop waits through trio instead."""
        self._queue.put(item)
        if item.finished.acquire(True, BLOCKING_WAIT):
            return
        done = trio.Event()
        with item.lock:
            if item.sent:
                return
            item.done = done
        await done.wait()

    def close(self, timeout: float) -> None:
        """Stop after the notifications queued so far (blocking: call from a worker thread,
        unless nothing was ever queued). Closing again does nothing."""
        if not self._closed:
            self._closed = True
            self._queue.put(None)
            self._thread.join(timeout)

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            if isinstance(item, int):
                _send_drop(item)
            else:
                self._send_awaited(item)

    def _send_awaited(self, item: _Awaited) -> None:
        if item.stores is None:
            _send_drop(item.ino)
        else:
            try:
                for offset, data in item.stores:
                    pyfuse3.notify_store(item.ino, offset, data)
            except OSError as error:  # as for a drop
                log.debug("storing pages of inode %d failed: %s", item.ino, error)
            except Exception:  # never leave the waiter waiting, nor lose the thread
                log.exception("storing pages of inode %d failed", item.ino)
        with item.lock:
            item.sent = True
            done = item.done
        item.finished.release()
        if done is not None:
            with contextlib.suppress(trio.RunFinishedError):
                self._token.run_sync_soon(done.set)


BLOCKING_WAIT = 0.005
"""Seconds the event loop waits blocking for an awaited notification, then through trio."""


class _Awaited:
    """A notification the event loop waits for (a store, or a drop when ``stores`` is None),
    and how its waiter learns it was sent."""

    __slots__ = ("done", "finished", "ino", "lock", "sent", "stores")

    def __init__(self, ino: int, stores: list[tuple[int, bytes]] | None) -> None:
        self.ino = ino
        self.stores = stores
        # Held until the notification is sent: a bare lock is the cheapest thing to block on
        # (a threading.Event is a condition variable, twice the cost on these machines).
        self.finished = threading.Lock()
        self.finished.acquire()
        # For a waiter that gave up blocking: ``sent`` and ``done`` under ``lock``.
        self.lock = threading.Lock()
        self.sent = False
        self.done: trio.Event | None = None


def _send_drop(ino: int) -> None:
    try:
        send_to_kernel(InvalidateInode(ino))
    except OSError as error:  # the kernel forgot it already, or the mount is going
        log.debug("dropping the cache of inode %d failed: %s", ino, error)
    except Exception:  # logged; the notification thread must live on (stores wait on it)
        log.exception("dropping the cache of inode %d failed", ino)


async def _serve_session(
    ops: Operations,
    fs: FileSystem,
    mount: Mount,
    parent_dev: int,
    notifier: _CacheNotifier,
    task_status: trio.TaskStatus[Mount],
) -> None:
    options = mount.options
    main_done = trio.Event()
    # Shielded so that cancelling serve() lets in-flight requests finish (see the docstring).
    main_scope = trio.CancelScope(shield=True)

    reader: Reader | None = None

    async def run_main() -> None:
        nonlocal reader
        try:
            with main_scope:
                async with trio.open_nursery() as workers:
                    with reader_installed(
                        workers, enabled=options.fast_reader, spin=options.idle_spin
                    ) as reader:
                        if reader is None:
                            await pyfuse3.main()
                        else:
                            await pyfuse3.main(max_tasks=1)  # the reader starts the others
                            reader.close()  # spares still parked: the session is over
        finally:
            main_done.set()

    unsubscribe: Callable[[], None] | None = None
    stop_keeping: Callable[[], None] | None = None
    invalidator: Invalidator | None = None
    warmer: Warmer | None = None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(run_main)
        try:
            await _wait_until_live(mount.mountpoint, parent_dev, main_done)
            if options.read_ahead_kb is not None:
                await trio.to_thread.run_sync(
                    _set_read_ahead, mount.mountpoint, options.read_ahead_kb
                )
            watchable = mount.tree if isinstance(mount.tree, Watchable) else fs
            if isinstance(watchable, Watchable):
                invalidator = Invalidator(
                    ops.inodes,
                    mount,
                    writeback=options.writeback,
                    timeout=options.invalidation_timeout,
                    counters=mount.counters,
                    emptied=ops.pages.emptied,
                )
                unsubscribe = watchable.watch(_counting(ops, invalidator))
            rewinds = mount.tree if isinstance(mount.tree, Checkpoints) else fs
            if isinstance(rewinds, Checkpoints):  # (however a rewind is asked for)
                stop_keeping = rewinds.on_rewind(mount.keeping_files)
            if options.lists_first:
                warmer = mount.warmer = Warmer(mount.mountpoint, cap=options.warm_entries)
                warmer.start()
                await trio.to_thread.run_sync(
                    warmer.wait, options.warm_wait, abandon_on_cancel=True
                )
            task_status.started(mount)
            await main_done.wait()
            log.info("%s was unmounted from outside", mount.mountpoint)
        finally:
            with trio.CancelScope(shield=True):
                if warmer is not None:  # (its last request is served meanwhile)
                    await trio.to_thread.run_sync(warmer.stop, options.shutdown_timeout)
                await trio.to_thread.run_sync(notifier.close, options.shutdown_timeout)
                if unsubscribe is not None:
                    unsubscribe()
                if stop_keeping is not None:
                    stop_keeping()
                if invalidator is not None:
                    await trio.to_thread.run_sync(invalidator.close, options.shutdown_timeout)
                if not main_done.is_set():
                    if reader is not None:
                        reader.terminate()
                    else:
                        pyfuse3.terminate()
                    with trio.move_on_after(options.shutdown_timeout):
                        await main_done.wait()
                    if not main_done.is_set():
                        log.warning("requests still running at shutdown; cancelling them")
                        main_scope.cancel()
                        await main_done.wait()
                with trio.move_on_after(options.shutdown_timeout):
                    await ops.close_all()


def _counting(ops: Operations, invalidator: Invalidator) -> ChangeCallback:
    """The invalidator, after telling the request handlers that the tree changed."""

    def on_change(change: Change) -> Awaitable[None] | None:
        ops.tree_changed(change)
        return invalidator(change)

    return on_change


async def _wait_until_live(target: str, parent_dev: int, main_done: trio.Event) -> None:
    """Return once the kernel routes requests for ``target`` to us; raise if the session died."""
    live = False

    def probe() -> None:
        os.statvfs(target)  # never answered from a cache
        if os.stat(target).st_dev == parent_dev:
            raise RuntimeError(f"{target} did not become a mount")

    async with trio.open_nursery() as nursery:

        async def check() -> None:
            nonlocal live
            await trio.to_thread.run_sync(probe, abandon_on_cancel=True)
            live = True
            nursery.cancel_scope.cancel()

        async def watch_main() -> None:
            await main_done.wait()
            nursery.cancel_scope.cancel()

        nursery.start_soon(check)
        nursery.start_soon(watch_main)
    if not live:
        raise RuntimeError(f"the FUSE session for {target} ended before the mount came up")


def _set_read_ahead(target: str, kb: int) -> None:
    """Let the kernel read ahead ``kb`` KiB in files of the mount at ``target`` (root only).

    libfuse caps the mount's read-ahead at 128 KiB, one read request at a time; a larger window
    keeps several requests in flight, so a sequential reader never waits for the daemon.
    """
    dev = os.stat(target).st_dev
    knob = f"/sys/class/bdi/{os.major(dev)}:{os.minor(dev)}/read_ahead_kb"
    try:
        with open(knob, "w") as f:
            f.write(str(kb))
    except OSError as error:  # not root, or no sysfs: the mount works, reading 128 KiB at a time
        log.debug("could not set the read-ahead of %s: %s", target, error)


def fuse_hint() -> str:
    """Why a mount may have failed, when the reason is this user's access to ``/dev/fuse``."""
    if os.access("/dev/fuse", os.R_OK | os.W_OK):
        return ""
    return " (this user cannot open /dev/fuse: run as root, or make it mode 0666)"


def _prepare_mountpoint(target: str) -> None:
    """Clear a dead mount of ours at ``target``; refuse a live one; require a directory."""
    entry = _registry.mount_at(_registry.canonical(target))
    if entry is not None:
        health = _registry.probe(target)
        if health == "dead":
            log.warning("clearing the stale mount at %s left by a killed daemon", target)
            _registry.detach(target)
        elif health in ("live", "hung"):
            raise RuntimeError(f"{target} is already mounted by a running mountd ({health})")
    if not os.path.exists(target):
        raise OSError(errno.ENOENT, f"mountpoint does not exist (make it first): {target}", target)
    if not os.path.isdir(target):
        raise OSError(errno.ENOTDIR, f"mountpoint is not a directory: {target}", target)


def _guard_mountpoint(target: str) -> Callable[[], None]:
    """Tell host-directory layers never to read through ``target``; return the release."""
    guard_mountpoint(target)
    return lambda: release_mountpoint(target)
