#!/usr/bin/env python3
"""Speed of ``mountd`` mounts against a kernel tmpfs directory (a benchmark, not a test).

Theory of operation
- Targets. ``tmpfs``: a directory on a kernel tmpfs mounted for this run (a /dev/shm directory
  when mounting is not allowed). ``temp``: a ``mountd`` mount of ``vfs.temp_fs()``. ``dir``: a
  ``mountd`` mount of ``vfs.dir_fs`` over a directory on that tmpfs. ``shm``: a /dev/shm
  directory, a second kernel baseline whose ratio shows the noise floor. Each mount is served by
  its own daemon process (``bench/_mount_daemon.py``), because pyfuse3 keeps its session in module
  globals; a daemon serves its mount for the whole run.
- The C anchor. ``passthrough_hp`` (with ``--anchor PATH``): libfuse's C++ ``passthrough_hp``
  binary at PATH, run with its default options in the foreground over its own directory on that
  tmpfs, the same kind of source ``dir`` serves. It is built outside the repository. It is ready
  once its mountpoint shows in ``/proc/self/mountinfo``, and is stopped by unmounting it
  (``fusermount3 -u``), which ends it. It has no request counters: its requests show as ``-``,
  its CPU time (threads included) comes from ``/proc/PID/stat``.
- Workloads are groups of phases that build on each other (create, then stat, ...), the same as
  ``shared/notes/anchor-speed.md`` so ratios compare. Only phases are timed; setup (files that a
  phase reads, ``git init``) is not. Every group runs in a fresh directory and removes it.
- Repetitions are interleaved: for each group, rep 1 on every target, then rep 2 on every target,
  so a shared machine's drift hits every target alike. The report gives medians, ratios of
  medians to tmpfs, and the geometric mean of the ratios over the phases that ran everywhere.
- Requests. Each daemon counts FUSE requests by op (``Mount.counters``); the bench asks for the
  counts and the daemon's CPU time before and after each phase over the daemon's stdin/stdout
  (never through a mount) and reports the difference.
- Failure. A phase that fails (an ``OSError``, a tool's non-zero exit, a wrong byte count) is
  reported as FAIL with its error, the rest of its group is skipped on that target, and the bench
  goes on. A watchdog kills the daemon of a phase that runs past ``--timeout``, which turns a hung
  mount into ENOTCONN errors instead of a hung bench.
- Cleanup runs in ``finally`` (SIGTERM and SIGHUP are turned into KeyboardInterrupt): daemons are
  asked to quit, then terminated, then killed; leftover mounts are lazily unmounted; the tmpfs is
  unmounted; the work directory is removed. Daemons also die with the bench (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import dataclasses
import json
import math
import os
import select
import shutil
import signal
import statistics
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
DAEMON_SCRIPT = BENCH_DIR / "_mount_daemon.py"
CACHE_DIR = Path(os.environ.get("AGENTROOT_BENCH_CACHE", "/tmp/agentroot-bench-cache"))
LOG_DIR = BENCH_DIR / "results"
KiB = 1024
MiB = 1024 * KiB

GROUPS: dict[str, tuple[str, ...]] = {
    "small": (
        "small.create",
        "small.stat",
        "small.readdir",
        "small.read_cold",
        "small.read_warm",
        "small.delete",
    ),
    "big": ("big.write", "big.read"),
    "tree": (
        "tree.untar",
        "tree.rg",
        "tree.find",
        "tree.git_add",
        "tree.git_commit",
        "tree.git_status",
        "tree.rm",
    ),
    "churn": ("churn.replace",),
    "warm": ("warm.pass1", "warm.pass2-5"),
    "floor": ("floor.lookup",),
}
PHASES = tuple(p for phases in GROUPS.values() for p in phases)
OPT_IN = frozenset(GROUPS["floor"])
"""Phases run only when named (``--only floor``): not part of the geomean history."""
MOUNT_KINDS = ("temp", "dir", "cow", "cowdisk", "default", "guarded")
ANCHOR = "passthrough_hp"
TARGET_KINDS = ("tmpfs", "shm", *MOUNT_KINDS, ANCHOR)
PR_SET_PDEATHSIG = 1


class PhaseError(Exception):
    """A workload saw something wrong (a tool failed, a byte count is off, a daemon died)."""


# ---------------------------------------------------------------------------------------------
# Sizes


@dataclasses.dataclass(frozen=True)
class Sizes:
    """How big each workload is; ``scaled`` shrinks all of them for a quick run."""

    small_files: int = 5000
    small_dirs: int = 50
    small_size: int = 1 * KiB
    big_bytes: int = 256 * MiB
    big_block: int = 128 * KiB
    tree_files: int = 0  # 0: the whole standard library
    replaces: int = 2000
    warm_files: int = 1000
    warm_size: int = 4 * KiB
    warm_passes: int = 5

    @classmethod
    def scaled(cls, factor: float) -> Sizes:
        full = cls()
        if factor >= 1.0:
            return full

        def shrink(n: int, least: int) -> int:
            return max(least, int(n * factor))

        return cls(
            small_files=shrink(full.small_files, 50),
            small_dirs=shrink(full.small_dirs, 5),
            big_bytes=shrink(full.big_bytes // full.big_block, 8) * full.big_block,
            tree_files=shrink(2400, 100),
            replaces=shrink(full.replaces, 20),
            warm_files=shrink(full.warm_files, 10),
        )


# ---------------------------------------------------------------------------------------------
# Daemons and targets


def _wait_readable(fd: int, timeout: float) -> bool:
    ready, _, _ = select.select([fd], [], [], timeout)
    return bool(ready)


class Daemon:
    """One ``_mount_daemon.py`` child serving one mount; line-JSON requests over its stdin/stdout."""

    def __init__(
        self, kind: str, mountpoint: Path, backing: Path | None, log: Path, options: list[str]
    ) -> None:
        self.kind = kind
        self.mountpoint = mountpoint
        self.log = log
        self._lock = threading.Lock()
        argv = [
            sys.executable,
            str(DAEMON_SCRIPT),
            kind,
            str(mountpoint),
            "--parent",
            str(os.getpid()),
        ]
        if backing is not None:
            argv += ["--backing", str(backing)]
        for option in options:
            argv += ["--option", option]
        with log.open("ab") as err:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                start_new_session=True,  # Ctrl-C reaches only the bench, which then cleans up in order
            )

    def wait_ready(self, timeout: float = 60.0) -> None:
        reply = self._read_reply(timeout)
        if not reply.get("ready"):
            raise PhaseError(f"{self.kind} daemon did not start: {reply}")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def request(self, op: str, timeout: float = 60.0) -> dict[str, Any]:
        with self._lock:
            if not self.alive() or self.proc.stdin is None:
                raise PhaseError(
                    f"{self.kind} daemon is dead (exit {self.proc.returncode}); see {self.log}"
                )
            try:
                self.proc.stdin.write(op.encode() + b"\n")
                self.proc.stdin.flush()
            except BrokenPipeError as exc:
                raise PhaseError(f"{self.kind} daemon is dead; see {self.log}") from exc
            return self._read_reply(timeout)

    def _read_reply(self, timeout: float) -> dict[str, Any]:
        assert self.proc.stdout is not None
        if not _wait_readable(self.proc.stdout.fileno(), timeout):
            raise PhaseError(
                f"{self.kind} daemon did not answer within {timeout:.0f} s; see {self.log}"
            )
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(5)
            raise PhaseError(f"{self.kind} daemon exited ({self.proc.returncode}); see {self.log}")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()

    def stop(self) -> None:
        """Quit politely, then SIGTERM, then SIGKILL; each step waits a little."""
        if self.alive() and self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.write(b"quit\n")
                self.proc.stdin.close()
        for step in (None, signal.SIGTERM, signal.SIGKILL):
            if step is not None and self.alive():
                with contextlib.suppress(ProcessLookupError):
                    self.proc.send_signal(step)
            try:
                self.proc.wait(10)
                break
            except subprocess.TimeoutExpired:
                continue
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        if self.proc.returncode != 0:
            print(
                f"warning: {self.kind} daemon exited {self.proc.returncode}; see {self.log}",
                file=sys.stderr,
            )


class AnchorDaemon(Daemon):
    """A C ``passthrough_hp`` serving SOURCE at a mountpoint; answers ``stats`` from /proc."""

    def __init__(self, binary: Path, mountpoint: Path, source: Path, log: Path) -> None:
        self.kind = ANCHOR
        self.mountpoint = mountpoint
        self.log = log
        with log.open("ab") as err:
            self.proc = subprocess.Popen(
                [str(binary), "--foreground", str(source), str(mountpoint)],
                stdin=subprocess.DEVNULL,
                stdout=err,
                stderr=err,
                start_new_session=True,
                preexec_fn=_die_with_bench,
            )

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not is_mounted(self.mountpoint):
            if not self.alive() or time.monotonic() > deadline:
                raise PhaseError(f"{self.kind} did not mount; see {self.log}")
            time.sleep(0.05)

    def request(self, op: str, timeout: float = 60.0) -> dict[str, Any]:
        if not self.alive():
            raise PhaseError(f"{self.kind} is dead (exit {self.proc.returncode}); see {self.log}")
        if op == "stats":
            return {"counters": {}, "cpu": process_cpu(self.proc.pid)}
        return {"text": f"(no profile of the C {self.kind})"}

    def stop(self) -> None:
        if self.alive():  # unmounting ends a foreground passthrough_hp
            subprocess.run(["fusermount3", "-u", str(self.mountpoint)], check=False)
        super().stop()


def _die_with_bench() -> None:
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def process_cpu(pid: int) -> float:
    """User+system CPU seconds of a process, all its threads (fields 14 and 15 of its stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclasses.dataclass
class Target:
    name: str
    root: Path
    daemon: Daemon | None = None
    dead: str = ""  # why this target can no longer run anything

    def stats(self) -> dict[str, Any] | None:
        return None if self.daemon is None else self.daemon.request("stats")


def is_mounted(path: Path) -> bool:
    return str(path) in mountpoints()


def lazy_unmount(path: Path, fuse: bool) -> None:
    if not is_mounted(path):
        return
    argv = ["fusermount3", "-u", "-z", str(path)] if fuse else ["umount", "-l", str(path)]
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0 and fuse:
        result = subprocess.run(
            ["umount", "-l", str(path)], capture_output=True, text=True, check=False
        )
    if result.returncode != 0:
        print(f"warning: could not unmount {path}: {result.stderr.strip()}", file=sys.stderr)


def mountpoints() -> list[str]:
    with open("/proc/self/mountinfo") as f:
        return [line.split(" ")[4].encode().decode("unicode_escape") for line in f]


def clear_leftovers() -> None:
    """Remove what a bench killed with SIGKILL left behind (its daemons die with it, not its tmpfs)."""
    for work in Path(tempfile.gettempdir()).glob("agentroot-bench-*"):
        pid_file = work / "pid"
        if not pid_file.exists():
            continue
        with contextlib.suppress(ValueError, OSError):
            os.kill(int(pid_file.read_text()), 0)
            continue  # that bench is still running
        mounted = set(mountpoints())
        for path in sorted(work.iterdir(), reverse=True):  # mnt-* before tmpfs
            if str(path) in mounted:
                lazy_unmount(path, fuse=path.name.startswith("mnt-"))
        shutil.rmtree(work, ignore_errors=True)
        print(f"note: removed {work}, left by a killed bench", file=sys.stderr)


class Workspace:
    """Owns every resource of a run: the work dir, the tmpfs, the daemons. ``close`` frees them."""

    def __init__(self, mount_options: list[str], anchor: Path | None = None) -> None:
        self.mount_options = mount_options
        self.anchor = anchor
        clear_leftovers()
        self.work = Path(tempfile.mkdtemp(prefix="agentroot-bench-"))
        (self.work / "pid").write_text(str(os.getpid()))
        self.tmpfs = self.work / "tmpfs"
        self.tmpfs.mkdir()
        self.tmpfs_mounted = False
        self.shm: Path | None = None
        self.daemons: list[Daemon] = []
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "mode=0755", "agentroot-bench", str(self.tmpfs)],
            capture_output=True,
            text=True,
            check=False,
        )
        if mounted.returncode == 0:
            self.tmpfs_mounted = True
            self.kernel_dir = self.tmpfs
        else:
            print(
                f"note: cannot mount a tmpfs ({mounted.stderr.strip()}); using /dev/shm",
                file=sys.stderr,
            )
            self.kernel_dir = self.shm_dir()

    def shm_dir(self) -> Path:
        if self.shm is None:
            self.shm = Path(tempfile.mkdtemp(prefix="agentroot-bench-", dir="/dev/shm"))
        return self.shm

    def make_target(self, name: str) -> Target:
        kind, _, option = name.partition("@")
        if kind == "tmpfs":
            root = self.kernel_dir / "plain"
            root.mkdir()
            return Target(kind, root)
        if kind == "shm":
            root = self.shm_dir() / "plain"
            root.mkdir()
            return Target(kind, root)
        slug = "".join(c if c.isalnum() else "-" for c in name)
        mountpoint = self.work / f"mnt-{slug}"
        mountpoint.mkdir()
        backing = None
        if kind in ("dir", "cow", "cowdisk", "default", "guarded", ANCHOR):
            backing = self.kernel_dir / f"backing-{slug}"  # one per target: dir and dir@...
            backing.mkdir()
        LOG_DIR.mkdir(exist_ok=True)
        log = LOG_DIR / f"daemon-{slug}.log"
        log.write_bytes(b"")
        options = [*self.mount_options, *(option.split("+") if option else [])]
        daemon: Daemon
        if kind == ANCHOR:
            assert self.anchor is not None and backing is not None
            daemon = AnchorDaemon(self.anchor, mountpoint, backing, log)
        else:
            daemon = Daemon(kind, mountpoint, backing, log, options)
        self.daemons.append(daemon)
        daemon.wait_ready()
        return Target(name, mountpoint, daemon)

    def close(self) -> None:
        for daemon in self.daemons:
            daemon.stop()
        for daemon in self.daemons:
            lazy_unmount(daemon.mountpoint, fuse=True)
        if self.tmpfs_mounted:
            lazy_unmount(self.tmpfs, fuse=False)
        for path in (self.shm, self.work):
            if path is not None:
                shutil.rmtree(path, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# Recording


@dataclasses.dataclass
class Sample:
    seconds: float | None  # None: failed
    error: str = ""
    requests: dict[str, int] = dataclasses.field(default_factory=dict)
    daemon_cpu: float = 0.0


Results = dict[str, dict[str, list[Sample]]]  # phase -> target -> one sample per repetition


def counter_delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    delta = {op: after.get(op, 0) - before.get(op, 0) for op in after}
    return {op: n for op, n in sorted(delta.items(), key=lambda kv: (-kv[1], kv[0])) if n}


class Recorder:
    """Times phases on one target and collects samples, FUSE request deltas and profiles."""

    def __init__(
        self,
        target: Target,
        wanted: set[str],
        results: Results,
        timeout: float,
        profile: set[str],
    ) -> None:
        self.target = target
        self.wanted = wanted
        self.results = results
        self.timeout = timeout
        self.profile = profile

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        target = self.target
        profiling = name in self.profile and target.daemon is not None
        before = target.stats()
        if profiling:
            assert target.daemon is not None
            target.daemon.request("profile-start")
        watchdog = None
        if target.daemon is not None:
            watchdog = threading.Timer(self.timeout, self._hung, args=(name,))
            watchdog.daemon = True
            watchdog.start()
        start = time.perf_counter()
        try:
            yield
        except (OSError, subprocess.SubprocessError, PhaseError) as exc:
            if name in self.wanted:
                self.results[name][target.name].append(Sample(None, error=describe(exc)))
            raise
        finally:
            elapsed = time.perf_counter() - start
            if watchdog is not None:
                watchdog.cancel()
        if profiling:
            assert target.daemon is not None
            target.daemon.request("profile-stop")
        after = target.stats()
        if name not in self.wanted:
            return
        sample = Sample(elapsed)
        if before is not None and after is not None:
            sample.requests = counter_delta(before["counters"], after["counters"])
            sample.daemon_cpu = after["cpu"] - before["cpu"]
        self.results[name][target.name].append(sample)

    def _hung(self, name: str) -> None:
        print(
            f"\n{self.target.name}: {name} ran past {self.timeout:.0f} s; killing its daemon",
            file=sys.stderr,
        )
        self.target.dead = f"{name} hung"
        if self.target.daemon is not None:
            self.target.daemon.kill()


def describe(exc: BaseException) -> str:
    if isinstance(exc, subprocess.CalledProcessError):
        tail = (exc.stderr or b"").decode(errors="replace").strip().splitlines()[-1:]
        return f"{Path(str(exc.cmd[0])).name} exit {exc.returncode}: {' '.join(tail)}"[:160]
    return f"{type(exc).__name__}: {exc}"[:160]


# ---------------------------------------------------------------------------------------------
# Workloads: each takes a Recorder and a fresh directory it may fill, and empties it.


Workload = Callable[[Recorder, Path, Sizes], None]


def write_file(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def read_file(path: Path) -> int:
    fd = os.open(path, os.O_RDONLY)
    try:
        return len(os.read(fd, 1 << 20))
    finally:
        os.close(fd)


def expect(got: int, want: int, what: str) -> None:
    if got != want:
        raise PhaseError(f"{what}: got {got}, expected {want}")


def small_workload(rec: Recorder, base: Path, sizes: Sizes) -> None:
    per_dir = max(1, sizes.small_files // sizes.small_dirs)
    dirs = [base / f"d{d:03}" for d in range(sizes.small_dirs)]
    files = [d / f"f{i:04}.txt" for d in dirs for i in range(per_dir)]
    data = b"x" * sizes.small_size
    with rec.phase("small.create"):
        for d in dirs:
            os.mkdir(d)
        for f in files:
            write_file(f, data)
    with rec.phase("small.stat"):
        seen = 0
        for top, _dirnames, filenames in os.walk(base):
            for name in filenames:
                os.lstat(os.path.join(top, name))
                seen += 1
        expect(seen, len(files), "files seen by os.walk")
    with rec.phase("small.readdir"):
        listed = 0
        for d in dirs:
            with os.scandir(d) as it:
                listed += sum(1 for _ in it)
        expect(listed, len(files), "entries listed by scandir")
    for phase in ("small.read_cold", "small.read_warm"):
        with rec.phase(phase):
            total = sum(read_file(f) for f in files)
            expect(total, len(files) * sizes.small_size, "bytes read")
    with rec.phase("small.delete"):
        for f in files:
            os.unlink(f)
        for d in dirs:
            os.rmdir(d)


def big_workload(rec: Recorder, base: Path, sizes: Sizes) -> None:
    path = base / "big.bin"
    block = os.urandom(sizes.big_block)
    blocks = sizes.big_bytes // sizes.big_block
    with rec.phase("big.write"):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            for _ in range(blocks):
                os.write(fd, block)
            os.fsync(fd)
        finally:
            os.close(fd)
    buf = bytearray(sizes.big_block)
    view = memoryview(buf)
    with rec.phase("big.read"), open(path, "rb", buffering=0) as f:
        total = 0
        while n := f.readinto(view):
            total += n
        expect(total, blocks * sizes.big_block, "bytes read")
    os.unlink(path)


def run_tool(argv: list[str], cwd: Path, ok: tuple[int, ...] = (0,)) -> None:
    result = subprocess.run(
        argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=TOOL_ENV, check=False
    )
    if result.returncode not in ok:
        raise subprocess.CalledProcessError(result.returncode, argv, stderr=result.stderr)


TOOL_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/nonexistent",
    "LANG": "C.UTF-8",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@example.invalid",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@example.invalid",
}


def tree_workload(tarball: Path) -> Workload:
    def run(rec: Recorder, base: Path, sizes: Sizes) -> None:
        src = base / "stdlib"
        with rec.phase("tree.untar"):
            run_tool(["tar", "-xf", str(tarball), "-C", str(base)], base)
        with rec.phase("tree.rg"):
            run_tool(["rg", "-c", "import"], src)
        with rec.phase("tree.find"):
            run_tool(["find", ".", "-name", "*.py"], src)
        run_tool(["git", "-c", "init.defaultBranch=main", "init", "-q"], src)
        with rec.phase("tree.git_add"):
            run_tool(["git", "add", "-A"], src)
        with rec.phase("tree.git_commit"):
            run_tool(["git", "commit", "-q", "-m", "bench"], src)
        with rec.phase("tree.git_status"):
            run_tool(["git", "status"], src)
        with rec.phase("tree.rm"):
            run_tool(["rm", "-rf", str(src)], base)

    return run


def churn_workload(rec: Recorder, base: Path, sizes: Sizes) -> None:
    final = base / "state.json"
    temp = base / "state.json.tmp"
    data = b"{}" + b" " * 1022
    with rec.phase("churn.replace"):
        for _ in range(sizes.replaces):
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(temp, final)
    expect(os.lstat(final).st_size, len(data), "size after replaces")
    os.unlink(final)


def floor_workload(rec: Recorder, base: Path, sizes: Sizes) -> None:
    """The cheapest request there is, to measure what a round trip costs apart from the tree:
    ``lstat`` of names that do not exist, each a new name (one LOOKUP, answered ENOENT; the
    kernel caches the miss, so no name is asked twice)."""
    count = sizes.small_files * 4
    with rec.phase("floor.lookup"):
        for i in range(count):
            try:
                os.lstat(base / f"missing-{i}")
            except FileNotFoundError:
                continue
            raise PhaseError(f"missing-{i} exists")


def warm_workload(rec: Recorder, base: Path, sizes: Sizes) -> None:
    files = [base / f"w{i:04}.bin" for i in range(sizes.warm_files)]
    data = os.urandom(sizes.warm_size)
    for f in files:
        write_file(f, data)
    want = len(files) * sizes.warm_size
    with rec.phase("warm.pass1"):
        expect(sum(read_file(f) for f in files), want, "bytes read")
    with rec.phase("warm.pass2-5"):
        for _ in range(sizes.warm_passes - 1):
            expect(sum(read_file(f) for f in files), want, "bytes read")
    for f in files:
        os.unlink(f)


# ---------------------------------------------------------------------------------------------
# The source tree


def stdlib_tarball(limit: int) -> Path:
    """A tar of this Python's standard library (no site-packages, caches or config), built once."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    version = ".".join(map(str, sys.version_info[:3]))
    out = CACHE_DIR / f"stdlib-{version}-{limit or 'all'}.tar"
    if out.exists():
        return out
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    entries: list[Path] = []
    files = 0
    for top, dirnames, filenames in os.walk(stdlib):
        rel = Path(top).relative_to(stdlib)
        dirnames[:] = sorted(
            d
            for d in dirnames
            if d not in ("site-packages", "__pycache__")
            and not (rel == Path(".") and d.startswith("config-"))
        )
        entries.append(Path(top))
        for name in sorted(filenames):
            if limit and files >= limit:
                break
            entries.append(Path(top) / name)
            files += 1
    partial = out.with_suffix(f".{os.getpid()}.part")
    with tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as tar:
        for path in entries:
            tar.add(path, arcname=str(Path("stdlib") / path.relative_to(stdlib)), recursive=False)
    partial.rename(out)
    print(f"built {out} ({files} files)", file=sys.stderr)
    return out


# ---------------------------------------------------------------------------------------------
# Report


def median(samples: list[Sample]) -> float | None:
    times = [s.seconds for s in samples]
    if not times or any(t is None for t in times):
        return None
    return statistics.median(t for t in times if t is not None)


def first_error(samples: list[Sample]) -> str:
    return next((s.error for s in samples if s.seconds is None), "")


def ratios(results: Results, targets: list[str]) -> dict[str, dict[str, float | None]]:
    out: dict[str, dict[str, float | None]] = {}
    for phase, by_target in results.items():
        base = median(by_target.get("tmpfs", []))
        row: dict[str, float | None] = {}
        for name in targets:
            m = median(by_target.get(name, []))
            row[name] = None if base is None or m is None or base <= 0 else m / base
        out[phase] = row
    return out


def geomeans(
    table: dict[str, dict[str, float | None]], targets: list[str]
) -> dict[str, tuple[float | None, int]]:
    out: dict[str, tuple[float | None, int]] = {}
    for name in targets:
        values = [row[name] for row in table.values() if row.get(name)]
        logs = [math.log(v) for v in values if v]
        out[name] = (math.exp(sum(logs) / len(logs)) if logs else None, len(logs))
    return out


def fmt_seconds(s: float) -> str:
    return f"{s * 1000:.1f} ms" if s < 1 else f"{s:.2f} s"


def print_report(results: Results, targets: list[str], reps: int) -> dict[str, Any]:
    table = ratios(results, targets)
    means = geomeans(table, targets)
    print(
        f"\nmedian of {reps} interleaved repetitions; ratio to tmpfs (median time in parentheses)\n"
    )
    print("| phase | " + " | ".join(targets) + " |")
    print("|---|" + "---:|" * len(targets))
    for phase, by_target in results.items():
        cells = []
        for name in targets:
            samples = by_target.get(name, [])
            m = median(samples)
            if m is None:
                cells.append("FAIL" if samples else "-")
            elif name == "tmpfs":
                cells.append(f"1.0x ({fmt_seconds(m)})")
            else:
                cells.append(f"{table[phase][name]:.1f}x ({fmt_seconds(m)})")
        print(f"| {phase} | " + " | ".join(cells) + " |")
    total = len(results)
    cells = []
    for name in targets:
        value, n = means[name]
        note = "" if n == total else f" ({n}/{total} phases)"
        cells.append("-" if value is None else f"**{value:.1f}x**{note}")
    print("| **geomean** | " + " | ".join(cells) + " |")

    failures = [
        (phase, name, first_error(samples))
        for phase, by_target in results.items()
        for name, samples in by_target.items()
        if first_error(samples)
    ]
    if failures:
        print("\nfailures:")
        for phase, name, error in failures:
            print(f"  {name} {phase}: {error}")

    mounts = [t for t in targets if t.partition("@")[0] in (*MOUNT_KINDS, ANCHOR)]
    if mounts:
        print("\nFUSE requests per phase (last good repetition), daemon CPU, top ops:\n")
        width = max(5, *map(len, mounts))
        for phase, by_target in results.items():
            for name in mounts:
                good = [s for s in by_target.get(name, []) if s.seconds is not None]
                if not good:
                    continue
                s = good[-1]
                n = sum(s.requests.values())
                count = "-" if name == ANCHOR else str(n)  # the C anchor counts nothing
                per = f"{s.daemon_cpu / n * 1e6:.0f} us/req" if n else "-"
                top = ", ".join(f"{op} {c}" for op, c in list(s.requests.items())[:8])
                print(
                    f"  {phase:17} {name:{width}} {count:>8} req  cpu {fmt_seconds(s.daemon_cpu):>9}  {per:>11}  {top}"
                )

    return {
        "phases": {
            phase: {
                name: {
                    "seconds": [s.seconds for s in samples],
                    "median": median(samples),
                    "ratio": table[phase].get(name),
                    "error": first_error(samples),
                    "requests": [s.requests for s in samples],
                    "daemon_cpu": [s.daemon_cpu for s in samples],
                }
                for name, samples in by_target.items()
            }
            for phase, by_target in results.items()
        },
        "geomean": {name: {"ratio": v, "phases": n} for name, (v, n) in means.items()},
    }


# ---------------------------------------------------------------------------------------------
# Main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--reps", type=int, default=3, help="interleaved repetitions (default 3)")
    p.add_argument(
        "--only", default="", help="comma list of groups or phases: " + ", ".join(GROUPS)
    )
    p.add_argument(
        "--scale",
        type=float,
        nargs="?",
        const=0.1,
        default=1.0,
        help="shrink every workload by this factor (alone: 0.1) for a quick run",
    )
    p.add_argument(
        "--targets",
        default="tmpfs,temp,dir",
        help="comma list from "
        + ", ".join(TARGET_KINDS)
        + "; KIND@FIELD=VALUE adds MountOptions fields to one mount (several joined with +: A/B runs in one bench)",
    )
    p.add_argument("--json", type=Path, help="write all samples, medians, ratios and counts here")
    p.add_argument(
        "--anchor",
        type=Path,
        metavar="PATH",
        help=f"a libfuse passthrough_hp binary, for the {ANCHOR} target (added when not listed)",
    )
    p.add_argument(
        "--profile", metavar="PHASE", help="profile the daemons during PHASE (a phase or group)"
    )
    p.add_argument("--profile-top", type=int, default=25, help="functions to print per profile")
    p.add_argument(
        "--mount-option",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="a MountOptions field for every daemon (JSON value), e.g. attr_timeout=0",
    )
    p.add_argument(
        "--timeout", type=float, default=600.0, help="kill a daemon whose phase runs longer"
    )
    args = p.parse_args(argv)
    targets = [t for t in args.targets.split(",") if t]
    for t in targets:
        kind, at, option = t.partition("@")
        if kind not in TARGET_KINDS or (at and (kind not in MOUNT_KINDS or "=" not in option)):
            p.error(f"unknown target {t!r}")
    if ANCHOR in targets and args.anchor is None:
        p.error(f"target {ANCHOR} needs --anchor PATH")
    if args.anchor is not None and ANCHOR not in targets:
        targets.append(ANCHOR)
    if "tmpfs" in targets:
        targets.remove("tmpfs")
    args.targets = ["tmpfs", *targets]
    args.wanted = expand(p, args.only) if args.only else set(PHASES) - OPT_IN
    args.profiled = set()
    if args.profile:
        args.profiled = expand(p, args.profile)
        if not args.only:
            args.wanted = set(args.profiled)
    if args.reps < 1:
        p.error("--reps must be at least 1")
    return args


def expand(p: argparse.ArgumentParser, spec: str) -> set[str]:
    out: set[str] = set()
    for item in (s.strip() for s in spec.split(",")):
        if item in GROUPS:
            out.update(GROUPS[item])
        elif item in PHASES:
            out.add(item)
        elif item:
            p.error(
                f"unknown workload {item!r}; groups: {', '.join(GROUPS)}; phases: {', '.join(PHASES)}"
            )
    return out


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = Sizes.scaled(args.scale)
    # SIGINT too: a bench started with `&` from a script inherits it ignored.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _raise_interrupt)
    workloads: dict[str, Workload] = {
        "small": small_workload,
        "big": big_workload,
        "churn": churn_workload,
        "warm": warm_workload,
        "floor": floor_workload,
    }
    groups = [g for g, phases in GROUPS.items() if args.wanted.intersection(phases)]
    if "tree" in groups:
        workloads["tree"] = tree_workload(stdlib_tarball(sizes.tree_files))
    results: Results = {p: {t: [] for t in args.targets} for p in PHASES if p in args.wanted}
    workspace = Workspace(args.mount_option, args.anchor)
    try:
        targets = [workspace.make_target(kind) for kind in args.targets]
        print(
            f"work dir {workspace.work}; targets: "
            + ", ".join(f"{t.name}={t.root}" for t in targets),
            file=sys.stderr,
        )
        for group in groups:
            for rep in range(args.reps):
                for target in targets:
                    run_group(target, group, rep, workloads[group], sizes, results, args)
        report = print_report(results, args.targets, args.reps)
        for target in targets:
            if target.daemon is not None and args.profiled:
                print(
                    f"\nprofile of the {target.name} daemon during {', '.join(sorted(args.profiled))}:\n"
                )
                print(
                    target.daemon.request(f"profile-report {args.profile_top}", timeout=120)["text"]
                )
        if args.json:
            report["config"] = {
                "argv": sys.argv,
                "reps": args.reps,
                "scale": args.scale,
                "sizes": dataclasses.asdict(sizes),
                "targets": args.targets,
                "python": sys.version,
                "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            }
            args.json.write_text(json.dumps(report, indent=1) + "\n")
            print(f"\nwrote {args.json}", file=sys.stderr)
    except KeyboardInterrupt:
        print("\ninterrupted; cleaning up", file=sys.stderr)
        return 130
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.SIG_IGN)  # a second Ctrl-C must not cut the cleanup short
        workspace.close()
    return 0


def run_group(
    target: Target,
    group: str,
    rep: int,
    workload: Workload,
    sizes: Sizes,
    results: Results,
    args: argparse.Namespace,
) -> None:
    print(f"{group} rep {rep + 1}/{args.reps} on {target.name} ...", file=sys.stderr, flush=True)
    if target.dead:
        for phase in GROUPS[group]:
            if phase in results:
                results[phase][target.name].append(
                    Sample(None, error=f"target dead: {target.dead}")
                )
        return
    base = target.root / f"{group}-{rep}"
    rec = Recorder(target, args.wanted, results, args.timeout, args.profiled)
    try:
        os.mkdir(base)
        workload(rec, base, sizes)
        os.rmdir(base)
    except (OSError, subprocess.SubprocessError, PhaseError) as exc:
        print(f"  {target.name} {group}: {describe(exc)}", file=sys.stderr)
        done = {p for p in GROUPS[group] if p in results and len(results[p][target.name]) > rep}
        for phase in GROUPS[group]:
            if phase in results and phase not in done:
                results[phase][target.name].append(
                    Sample(None, error="skipped after an earlier failure")
                )
        if target.daemon is not None and not target.daemon.alive():
            target.dead = target.dead or f"daemon exited ({target.daemon.proc.returncode})"
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
