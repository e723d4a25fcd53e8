"""Mount a tree in a child process, for tests that touch the mount from the outside.

Theory of operation
-------------------
pyfuse3 serves one mount per process, and a test process that both serves a mount and makes
blocking system calls into it deadlocks. So each mount runs in a child process that builds the
tree, serves it with :func:`mountd.mounted`, and talks to the test process over a socket pair:

- the child writes ``ready`` once the mount is live (``mountd.serve`` has verified it), and the
  test process only then returns from ``__enter__``; if the child dies first, the test fails with
  the child's log (never a skip: a machine where ``/dev/fuse`` is unusable fails mount tests);
- ``stats`` asks for the mount's request counters (:meth:`MountProcess.stats`);
- ``stop`` (or the socket closing, e.g. because the test process died) unmounts and exits;
  SIGTERM/SIGINT do the same, and the child asks the kernel for SIGTERM if its parent dies.

On exit the helper checks that the child exited 0 and that nothing of ours is left mounted at the
mountpoint (clearing it and failing the test if something is).

The tree is made in the child by calling ``build()``. A picklable builder (a module-level function,
or ``functools.partial`` of one with plain arguments, e.g. ``partial(compositions.dir_ro, host)``)
runs in a fresh interpreter (``python -m tests.mountd.mounting``), the clean way; any other
callable (a lambda, a closure) runs in a forked copy of the test process, which inherits it.

Usage::

    from tests.mountd.mounting import mount_process, mount_root

    with mount_root(compositions.temp, tmp_path / "mnt") as root:       # root: Path
        (root / "a.txt").write_text("hi")

    with mount_process(build, mnt, MountOptions(attr_timeout=1)) as mounted:
        ...
        assert mounted.stats()["counters"]["lookup"] > 0
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import pickle
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

REPO = Path(__file__).resolve().parents[2]
READY_TIMEOUT = 30.0
STOP_TIMEOUT = 20.0

Builder = Callable[[], object]


class MountProcess:
    """A mount served by a child process (see the module docstring)."""

    def __init__(self, path: Path, pid: int, sock: socket.socket, log: BinaryIO) -> None:
        self.path = path
        self.pid = pid
        self._sock = sock
        self._reader = sock.makefile("rb")
        self._log = log

    def stats(self) -> dict[str, Any]:
        """``{"counters": {op: n}, "inodes": n, "handles": n, "listed": n}`` from the serving
        process (``listed``: the entries its warm listing listed so far, ``None`` without one)."""
        self._sock.sendall(b"stats\n")
        line = self._reader.readline()
        if not line:
            raise RuntimeError(f"mount process exited:\n{self.log()}")
        result: dict[str, Any] = json.loads(line)
        return result

    def log(self) -> str:
        """What the child wrote to stdout/stderr so far."""
        self._log.seek(0)
        return self._log.read().decode(errors="replace")


@contextlib.contextmanager
def mount_root(
    build: Builder, mountpoint: Path | str, options: object | None = None
) -> Iterator[Path]:
    """Serve ``build()`` at ``mountpoint`` (an existing directory) from a child; yield the path."""
    with mount_process(build, mountpoint, options) as mounted:
        yield mounted.path


@contextlib.contextmanager
def mount_process(
    build: Builder,
    mountpoint: Path | str,
    options: object | None = None,
    *,
    ready_timeout: float = READY_TIMEOUT,
) -> Iterator[MountProcess]:
    """Like :func:`mount_root`, yielding the :class:`MountProcess` (``options``: a
    ``mountd.MountOptions``)."""
    path = Path(mountpoint).absolute()
    ours, theirs = socket.socketpair()
    log = tempfile.TemporaryFile()  # noqa: SIM115 (closed in the finally below)
    try:
        child = _start(build, path, options, theirs, ours, log)
    finally:
        theirs.close()
    mounted = MountProcess(path, child.pid, ours, log)
    try:
        ours.settimeout(ready_timeout)
        line = mounted._reader.readline()
        if line != b"ready\n":
            code = child.wait(STOP_TIMEOUT)
            raise RuntimeError(
                f"mount at {path} did not come up (child exit status {code}):\n{mounted.log()}"
            )
        ours.settimeout(STOP_TIMEOUT)
        yield mounted
    finally:
        try:
            _stop(mounted, child)
        finally:
            mounted._reader.close()
            ours.close()
            log.close()


# --- the test process's side -----------------------------------------------------------------


class _Child:
    """A child process, whether spawned (``Popen``) or forked (a bare pid)."""

    def __init__(self, pid: int, popen: subprocess.Popen[bytes] | None = None) -> None:
        self.pid = pid
        self._popen = popen
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            if self._popen is not None:
                self.returncode = self._popen.poll()
            else:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float) -> int | None:
        deadline = time.monotonic() + timeout
        while self.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        return self.returncode

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        self.wait(STOP_TIMEOUT)


def _start(
    build: Builder,
    path: Path,
    options: object | None,
    sock: socket.socket,
    ours: socket.socket,
    log: BinaryIO,
) -> _Child:
    try:
        payload = pickle.dumps((build, str(path), options))
    except (pickle.PicklingError, AttributeError, TypeError):
        payload = None
    if payload is not None:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        }
        popen = subprocess.Popen(
            [sys.executable, "-m", "tests.mountd.mounting", str(sock.fileno())],
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=log,
            pass_fds=(sock.fileno(),),
            cwd=REPO,
            env=env,
        )
        assert popen.stdin is not None
        popen.stdin.write(payload)
        popen.stdin.close()
        return _Child(popen.pid, popen)
    pid = os.fork()
    if pid == 0:  # the forked child: never return into the test process's code
        code = 1
        try:
            ours.close()  # so that the test process closing its end reads as EOF here
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            code = _child_main(build, str(path), options, sock.fileno())
        finally:
            os._exit(code)
    return _Child(pid)


def _stop(mounted: MountProcess, child: _Child) -> None:
    from mountd import _registry

    with contextlib.suppress(OSError):
        mounted._sock.sendall(b"stop\n")
    code = child.wait(STOP_TIMEOUT)
    problems = []
    if code is None:
        child.kill()
        problems.append(f"mount process {child.pid} did not stop within {STOP_TIMEOUT} s; killed")
    elif code != 0:
        problems.append(f"mount process exited with status {code}")
    canonical = _registry.canonical(str(mounted.path))
    if _registry.mount_at(canonical) is not None:
        with contextlib.suppress(_registry.DetachError):
            _registry.detach(canonical)
        problems.append(f"{mounted.path} was still mounted after the mount process ended")
    if problems:
        raise AssertionError("; ".join(problems) + "\n" + mounted.log())


@contextlib.contextmanager
def cleared_afterwards(path: Path) -> Iterator[Path]:
    """Yield ``path`` (a mountpoint for ``mountd`` commands a test runs); afterwards kill the
    daemon the registry has there and detach whatever is still mounted, so a failing test
    leaves nothing behind."""
    from mountd import _registry

    try:
        yield path
    finally:
        canonical = _registry.canonical(path)
        state = _registry.read_state(canonical)
        if state is not None and _registry.process_alive(state.pid, state.pid_start):
            os.kill(state.pid, signal.SIGKILL)
        while _registry.mount_at(canonical) is not None:
            _registry.detach(canonical)


# --- the child's side --------------------------------------------------------------------------


def _child_main(build: Builder, mountpoint: str, options: object | None, fd: int) -> int:
    """Build the tree and serve it until told to stop; the exit status."""
    root = logging.getLogger()
    for handler in list(root.handlers):  # a forked pytest's capture handlers lead nowhere
        root.removeHandler(handler)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s"
    )
    with contextlib.suppress(AttributeError, OSError):
        import faulthandler

        faulthandler.cancel_dump_traceback_later()
    _die_with_parent()
    try:
        import trio

        tree = build()
        trio.run(functools.partial(_serve_child, tree, mountpoint, options, fd))
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        return 1
    sys.stderr.flush()
    return 0


def _die_with_parent() -> None:
    import ctypes

    pr_set_pdeathsig = 1
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


async def _serve_child(tree: object, mountpoint: str, options: object | None, fd: int) -> None:
    import trio

    from mountd import MountOptions, mounted

    stream = trio.SocketStream(trio.socket.from_stdlib_socket(socket.socket(fileno=fd)))
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with mounted(tree, mountpoint, options or MountOptions()) as mount:  # type: ignore[arg-type]
            await stream.send_all(b"ready\n")
            async with trio.open_nursery() as nursery:

                async def on_signal() -> None:
                    async for _ in signals:
                        nursery.cancel_scope.cancel()

                async def on_command() -> None:
                    buffer = b""
                    while True:
                        data = await stream.receive_some()
                        if not data:
                            break
                        buffer += data
                        while b"\n" in buffer:
                            line, buffer = buffer.split(b"\n", 1)
                            if line == b"stop":
                                nursery.cancel_scope.cancel()
                                return
                            if line == b"stats":
                                warmer = mount.warmer
                                reply = {
                                    "counters": dict(mount.counters),
                                    "inodes": mount.known_inodes,
                                    "handles": mount.open_handles,
                                    "listed": None if warmer is None else warmer.listed,
                                }
                                await stream.send_all(json.dumps(reply).encode() + b"\n")
                    nursery.cancel_scope.cancel()

                nursery.start_soon(on_signal)
                nursery.start_soon(on_command)


def main(argv: list[str]) -> int:
    """``python -m tests.mountd.mounting FD``: the spawned child (payload on stdin)."""
    build, mountpoint, options = pickle.loads(sys.stdin.buffer.read())
    return _child_main(build, mountpoint, options, int(argv[0]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
