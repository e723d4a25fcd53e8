"""Running one mount: in the foreground until a signal, or detached in the background.

Theory of operation
-------------------
Foreground (:func:`serve_until_signalled`): the signal receiver for SIGINT, SIGTERM and SIGHUP is
opened *before* the mount exists, so no signal can arrive while the mount is live and kill the
process the default way (which leaves a dead mount). Installing trio's handler also overrides an
inherited ``SIG_IGN``: a daemon started with ``&`` from a non-interactive shell inherits SIGINT
ignored, and would otherwise never stop on it. The first signal cancels the serving scope;
leaving :func:`mountd.mounted` unmounts. While serving, a task rewrites the state file with the
operation counters about once a second (off the trio thread) and watches mountinfo, so a mount
removed from outside (``fusermount3 -u``) ends the process too. The state file is removed on the
way out, whatever the way out is.

Background (:func:`launch`): the parent re-runs ``python -m mountd mount ...`` in a new session
(no controlling terminal, so no SIGHUP from a closing shell) with stdio going to a log file in the
state directory, and passes it the write end of a pipe (``--ready-fd``). The child writes
``ready`` there once the mount is live. The parent returns success only on that line; if the
child exits first, or does not become ready in time, the parent prints the child's log and fails.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import trio

import vfs

from . import Mount, MountOptions, mounted
from . import _registry as registry
from ._collector import tune_for_serving
from ._control import Controller, serve_control, socket_path

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
REFRESH_SECONDS = 1.0
READY = b"ready\n"


@dataclass(frozen=True)
class Served:
    """How a foreground mount ended: by this signal, or removed from outside (``None``)."""

    signal: signal.Signals | None


async def serve_until_signalled(
    fs: vfs.FileSystem,
    mountpoint: str,
    options: MountOptions,
    *,
    spec: str,
    description: str,
    announce: Callable[[], None],
    ready_fd: int | None = None,
    session: str = "",
    project: str = "",
) -> Served:
    """Mount ``fs`` at ``mountpoint`` and serve until SIGINT/SIGTERM/SIGHUP or an outside
    unmount; the mount is gone when this returns. ``project``: the directory the default tree
    serves (its control channel forks it), else empty."""
    with trio.open_signal_receiver(*SIGNALS) as signals:
        async with mounted(fs, mountpoint, options) as mount:
            tune_for_serving()  # this process exists to serve the mount
            pid = os.getpid()
            state = registry.MountState(
                mountpoint=mountpoint,
                spec=spec,
                description=description,
                pid=pid,
                pid_start=registry.process_start(pid),
                started=time.time(),
                counters=dict(mount.counters),
                session=session,
            )
            try:
                outcome = Served(None)
                async with trio.open_nursery() as nursery:
                    # The control socket is up before anyone is told the mount is live.
                    await _start_control(nursery, mount, project or None)
                    await trio.to_thread.run_sync(registry.write_state, state)
                    announce()
                    if ready_fd is not None:
                        os.write(ready_fd, READY)
                        os.close(ready_fd)
                    nursery.start_soon(_refresh, mount, state, nursery.cancel_scope)
                    async for signum in signals:
                        outcome = Served(signal.Signals(signum))
                        break
                    nursery.cancel_scope.cancel()
            finally:
                registry.remove_state(mountpoint, pid)
    return outcome


async def _start_control(nursery: trio.Nursery, mount: Mount, project: str | None) -> None:
    """Serve the mount's control channel (``mountd._control``); without it, warn and go on."""
    controller = Controller(
        mount.tree,
        mount.mountpoint,
        origin=mount,
        counters=mount.counters,
        open_for_writing=mount.open_for_writing,
        project=project,
    )
    try:
        await trio.to_thread.run_sync(lambda: registry.state_dir(create=True))
        await nursery.start(serve_control, controller, socket_path(mount.mountpoint))
    except OSError as error:
        print(f"mountd: no control channel: {error}", file=sys.stderr, flush=True)


async def _refresh(mount: Mount, state: registry.MountState, scope: trio.CancelScope) -> None:
    """Keep the state file's counters current; end serving if the mount vanished."""
    while True:
        await trio.sleep(REFRESH_SECONDS)
        counters = dict(mount.counters)  # copied on the trio thread, where it changes
        await trio.to_thread.run_sync(registry.write_state, replace(state, counters=counters))
        entry = await trio.to_thread.run_sync(registry.mount_at, state.mountpoint)
        if entry is None:
            print(
                f"mountd: {state.mountpoint} was unmounted from outside; exiting",
                file=sys.stderr,
                flush=True,
            )
            scope.cancel()
            return


@dataclass(frozen=True)
class Launched:
    """The outcome of :func:`launch`: the child's pid, and its log on failure."""

    ok: bool
    pid: int
    log: str
    problem: str = ""


def launch(child_args: Sequence[str], mountpoint: str, timeout: float) -> Launched:
    """Start ``python -m mountd mount --ready-fd N <child_args>`` detached; wait until it reports
    the mount live, it exits, or ``timeout`` seconds pass (then it is terminated)."""
    registry.state_dir(create=True)
    log_path = registry.log_path(mountpoint)
    read_end, write_end = os.pipe()
    try:
        with open(log_path, "wb") as log:
            child = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "mountd",
                    "mount",
                    "--ready-fd",
                    str(write_end),
                    *child_args,
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(write_end,),
                start_new_session=True,
            )
    finally:
        os.close(write_end)
    try:
        with contextlib.closing(os.fdopen(read_end, "rb", buffering=0)) as ready:
            readable, _, _ = select.select([ready], [], [], timeout)
            line = ready.readline() if readable else b""
    except BaseException:
        _stop(child)  # Ctrl-C while waiting: no mount may come up behind the user's back
        raise
    if line == READY:
        # The child lives on in its own session; forget it without a ResourceWarning.
        child.returncode = 0
        return Launched(True, child.pid, str(log_path))
    if readable:
        code = child.wait()
        problem = f"the daemon exited with status {code} before the mount was live"
    else:
        _stop(child)
        problem = f"the mount did not become live within {timeout:g} s"
    return Launched(False, child.pid, _read_log(log_path), problem)


def _stop(child: subprocess.Popen[bytes]) -> None:
    """SIGTERM (a mount already live is unmounted cleanly), then SIGKILL after 5 s."""
    child.terminate()
    try:
        child.wait(5)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def _read_log(path: os.PathLike[str] | str) -> str:
    try:
        with open(path, "rb") as handle:
            return handle.read().decode("utf-8", "replace")
    except OSError as error:
        return f"(cannot read the daemon's log {path}: {error.strerror})"
