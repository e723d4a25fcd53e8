#!/usr/bin/env python3
"""One mount served for ``bench/mount_bench.py``, driven by JSON lines over stdin/stdout.

Theory of operation
- ``_mount_daemon.py KIND MOUNTPOINT [--backing DIR]`` builds the tree (``temp``: ``temp_fs()``;
  ``dir``: ``dir_fs(DIR)``; ``cow``: ``cow_fs(dir_fs(DIR))``; ``default``: that cow as ``mountd
  mount`` serves it by default, in an audited union with a scratch ``/tmp`` under a turn root;
  ``guarded``: that cow under the repository policy and an audit log; ``repo``: exactly the
  tree ``mountd mount`` serves without a spec over DIR, ``mountd._run.default_tree``, audited,
  under a turn root, its upper beside DIR), mounts it with
  ``mountd.mounted`` and prints ``{"ready": true}`` once the mount is live. One process serves
  one mount (pyfuse3 keeps its session in module globals).
- Then it answers one JSON line per command line read from stdin:
  ``stats`` -> ``{"counters": {op: count}, "cpu": seconds}`` (the mount's FUSE request counters
  and this process's user+system CPU time, threads included); ``profile-start`` and
  ``profile-stop`` -> ``{"ok": true}`` (profiling windows accumulate); ``profile-report N`` ->
  ``{"text": ...}`` (pyinstrument when installed, else cProfile's top N functions).
- ``quit``, end of stdin, SIGINT, SIGTERM or SIGHUP unmount and exit 0. The daemon asks for
  SIGTERM when the bench dies (PR_SET_PDEATHSIG), so a killed bench leaves no live mount.
- The protocol owns the real stdout; anything else printed goes to stderr (the bench's log file).
"""

from __future__ import annotations

import argparse
import cProfile
import ctypes
import io
import json
import os
import pstats
import resource
import signal
import sys
from typing import Any

import trio

PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before prctl took effect
        sys.exit("bench is gone")


def build_tree(kind: str, backing: str | None) -> Any:
    import vfs

    if kind == "temp":
        return vfs.temp_fs()
    if kind == "dir":
        if backing is None:
            sys.exit("dir needs --backing")
        return vfs.dir_fs(backing)
    if backing is None:
        sys.exit(f"{kind} needs --backing")
    if kind == "cow":  # `mountd mount --ephemeral`'s tree at /: changes in memory
        return vfs.cow_fs(vfs.dir_fs(backing))
    upper = backing.rstrip("/") + ".upper"  # (where a session's upper would be)
    os.makedirs(upper, exist_ok=True)
    if kind == "repo":  # as mountd.cli serves the current directory by default
        from pathlib import Path

        from mountd._run import default_tree
        from vfs import AuditLog, audited_fs
        from vfs.turns import turn_root

        log = AuditLog(upper + ".audit.jsonl")  # a file, as mountd mount keeps it
        return turn_root(audited_fs(default_tree(backing, Path(upper))[0], log))
    cow = vfs.cow_fs(vfs.dir_fs(backing), vfs.dir_fs(upper))
    if kind == "cowdisk":  # what `mountd mount` serves at / by default: changes in a session
        return cow
    from vfs import AuditLog, audited_fs

    log = AuditLog(keep=1024)
    if kind == "default":  # all of what `mountd mount` serves by default (see mountd.cli)
        from vfs.turns import turn_root

        return turn_root(audited_fs(vfs.union_fs({"/": cow, "/tmp": vfs.temp_fs()}), log))
    if kind == "guarded":  # what `mountd run` serves over a repository, but the sandbox root
        from vfs import policy_fs, repository_policy

        return audited_fs(policy_fs(cow, repository_policy()), log)
    sys.exit(f"unknown tree kind {kind!r}")


def parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def mount_options(pairs: list[str]) -> tuple[Any, bool]:
    """MountOptions from ``field=value`` pairs, and whether to tune the collector as ``mountd
    mount`` does (the pseudo-field ``tune_gc``, true unless given false, for A/B runs)."""
    from mountd import MountOptions

    overrides = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        overrides[key] = parse_value(value)
    tune_gc = bool(overrides.pop("tune_gc", True))
    return MountOptions(**overrides), tune_gc


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Profiler:
    """Accumulates profiling windows; pyinstrument when installed, cProfile otherwise."""

    def __init__(self) -> None:
        try:
            from pyinstrument import Profiler as Sampler
        except ImportError:
            self.sampler = None
            self.profile = cProfile.Profile()
        else:
            self.sampler = Sampler(interval=0.0005, async_mode="disabled")

    def start(self) -> None:
        if self.sampler is not None:
            self.sampler.start()
        else:
            self.profile.enable()

    def stop(self) -> None:
        if self.sampler is not None:
            self.sampler.stop()
        else:
            self.profile.disable()

    def report(self, top: int) -> str:
        if self.sampler is not None:
            text: str = self.sampler.output_text(unicode=False, color=False)
            session = self.sampler.last_session
            if session is not None:
                root = session.root_frame()
                if root is not None:
                    text += "\n" + split_report(root)
            return text
        out = io.StringIO()
        stats = pstats.Stats(self.profile, stream=out)
        out.write("cProfile (pyinstrument not installed), by own time:\n")
        stats.sort_stats(pstats.SortKey.TIME).print_stats(top)
        out.write("by cumulative time:\n")
        stats.sort_stats(pstats.SortKey.CUMULATIVE).print_stats(top)
        return out.getvalue()


# Where a serving daemon's time goes, by the part of the stack that spends it (see split_report).
PARTS = (
    ("waiting", "for the next request: trio's epoll, the reader's poll, select and yield"),
    ("pyfuse3", "pyfuse3's Cython and libfuse: reading, decoding and answering requests"),
    ("trio", "trio's scheduler and its worker threads' hand-offs"),
    ("reader", "mountd's request reader (its own Python)"),
    ("mount", "mountd's handlers and their tables (inodes, pages, keepers, ...)"),
    ("tree", "the served tree: vfs's Python and the syscalls it makes"),
    ("other", "anything else"),
)

_WAITS = frozenset(
    {"poll", "poll.poll", "select", "sched_yield", "epoll.poll", "lock.acquire", "acquire"}
)


def _part_of(path: str) -> str | None:
    if "pyfuse3" in path:
        return "pyfuse3"
    if "/trio/" in path or "/anyio/" in path or "/outcome/" in path:
        return "trio"
    if "mountd/_reader" in path:
        return "reader"
    if "mountd/" in path:
        return "mount"
    if "vfs/" in path:
        return "tree"
    return None


def split_report(root: Any) -> str:
    """Sampled time by part (:data:`PARTS`): each sample's own frame decides, a built-in call
    (a syscall) counting for the Python that made it, a waiting call for ``waiting``."""
    totals = dict.fromkeys((name for name, _ in PARTS), 0.0)

    def walk(frame: Any, part: str) -> None:
        for child in frame.children:
            if child.is_synthetic:  # the time a frame spent in itself
                own = part
                if frame.file_path_short == "<built-in>":
                    own = "waiting" if frame.function in _WAITS else part
                totals[own] += child.time
                continue
            walk(child, _part_of(child.file_path or "") or part)

    walk(root, "other")
    whole = sum(totals.values()) or 1.0
    lines = ["Where the time went (share of the samples):"]
    for name, what in PARTS:
        lines.append(f"  {name:8} {100 * totals[name] / whole:5.1f}%  {what}")
    return "\n".join(lines) + "\n"


async def serve(args: argparse.Namespace, reply: io.TextIOBase) -> None:
    from mountd import mounted
    from mountd._collector import tune_for_serving

    def send(message: dict[str, Any]) -> None:
        reply.write(json.dumps(message) + "\n")
        reply.flush()

    fs = build_tree(args.kind, args.backing)
    profiler = Profiler()
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
        async with trio.open_nursery() as nursery:

            async def on_signal() -> None:
                async for _ in signals:
                    nursery.cancel_scope.cancel()

            nursery.start_soon(on_signal)
            options, tune_gc = mount_options(args.option)
            async with mounted(fs, args.mountpoint, options) as mount:
                if tune_gc:
                    tune_for_serving()  # as mountd mount does
                send({"ready": True, "pid": os.getpid()})
                stdin = trio.lowlevel.FdStream(os.dup(0))
                buffer = b""
                while True:
                    chunk = await stdin.receive_some()
                    if not chunk:
                        break
                    buffer += chunk
                    while b"\n" in buffer:
                        line, buffer = buffer.split(b"\n", 1)
                        command, _, rest = line.decode().strip().partition(" ")
                        if command == "quit":
                            nursery.cancel_scope.cancel()
                        elif command == "stats":
                            send({"counters": dict(mount.counters), "cpu": cpu_seconds()})
                        elif command == "profile-start":
                            profiler.start()
                            send({"ok": True})
                        elif command == "profile-stop":
                            profiler.stop()
                            send({"ok": True})
                        elif command == "profile-report":
                            send({"text": profiler.report(int(rest or 25))})
                        else:
                            send({"error": f"unknown command {command!r}"})
            nursery.cancel_scope.cancel()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("kind", choices=("temp", "dir", "cow", "cowdisk", "default", "guarded", "repo"))
    p.add_argument("mountpoint")
    p.add_argument("--backing")
    p.add_argument("--parent", type=int, required=True)
    p.add_argument("--option", action="append", default=[], help="MountOptions field=value")
    args = p.parse_args()
    die_with_parent(args.parent)
    reply = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # stray prints must not corrupt the protocol
    trio.run(serve, args, reply)
    return 0


if __name__ == "__main__":
    sys.exit(main())
