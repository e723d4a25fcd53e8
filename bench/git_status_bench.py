#!/usr/bin/env python3
"""The first ``git status`` of a repository in a fresh default mount, against the host.

Theory of operation
-------------------
A repository committed on the host (``--repo DIR``, a clone of a public one; or ``--files N``
made here, every file older than its index) is timed with ``git status --porcelain`` on the host
and then in a fresh mount of exactly the tree ``mountd mount`` serves over it by default
(``bench/_mount_daemon.py repo``: copy-on-write over the directory, the repository policy, an
audit log, a turn root's /tmp; its upper in a fresh directory each time). Each repetition runs
host then mount, first with the host's caches warm (the host's run is its second, the way an
agent's repository was just used), then after dropping the kernel's caches (``--cold``, root)
before each of the two. The mount's FUSE request counts and the daemon's CPU time of its first
``git status`` are reported: READs are how many files git hashed (0 when the mount shows the
inode numbers git's index recorded; the index and a few objects are read regardless).

Without ``--warm`` the mount is not listed first (as with ``mountd mount --no-warm``);
``--warm`` times it twice in each repetition, without and with the listing the default tree's
mounts make before they are handed over (``MountOptions.warm``, ``mountd._warm``), and reports
the mount's start (the daemon started to the mount handed over, the listing included) beside
each ``git status``.

``--profile`` profiles the daemon during the mount's ``git status`` (pyinstrument when
installed, cProfile otherwise). Nothing is written into the repository: ``git status`` in the
mount writes its copy-on-write upper, thrown away after each repetition.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from mount_bench import Daemon, lazy_unmount

GIT_ENV = {
    **os.environ,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@example.invalid",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@example.invalid",
}


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=GIT_ENV, capture_output=True, text=True, check=True
    )
    return done.stdout


def synthetic(root: Path, files: int) -> Path:
    """A repository of ``files`` small files in 10 x 7 directories, committed, older than its
    index (none "racily clean")."""
    for i in range(files):
        path = root / f"pkg{i % 10}" / f"sub{i % 7}" / f"mod{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"VALUE = {i}\n")
    past = time.time_ns() - 3600 * 10**9
    for dirpath, _, names in os.walk(root):
        for name in names:
            os.utime(Path(dirpath, name), ns=(past, past))
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "initial")
    return root


def drop_caches() -> None:
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def timed_status(cwd: Path) -> float:
    start = time.perf_counter()
    out = git(cwd, "status", "--porcelain")
    elapsed = time.perf_counter() - start
    if out:
        raise SystemExit(f"git status in {cwd} is not clean:\n{out[:2000]}")
    return elapsed


def mounted_status(
    repo: Path, work: Path, *, cold: bool, profile: bool, options: list[str]
) -> tuple[float, float, dict[str, int], float, str]:
    """The first ``git status`` in a fresh default mount of ``repo`` (``options``: MountOptions
    fields as ``field=value``): the seconds its start took (to the mount handed over), the
    seconds of the status, the requests it sent by op, the daemon's CPU seconds, and the
    profile's text (``profile``)."""
    mountpoint = work / "mnt"
    mountpoint.mkdir(exist_ok=True)
    upper = Path(str(repo).rstrip("/") + ".upper")
    shutil.rmtree(upper, ignore_errors=True)
    start = time.perf_counter()
    daemon = Daemon("repo", mountpoint, repo, work / "daemon.log", options)
    try:
        daemon.wait_ready()
        started = time.perf_counter() - start
        if cold:
            drop_caches()
        before = daemon.request("stats")
        if profile:
            daemon.request("profile-start")
        seconds = timed_status(mountpoint)
        if profile:
            daemon.request("profile-stop")
        after = daemon.request("stats")
        text = daemon.request("profile-report 30")["text"] if profile else ""
    finally:
        daemon.stop()
        lazy_unmount(mountpoint, fuse=True)
        shutil.rmtree(upper, ignore_errors=True)
        for leftover in (Path(str(upper) + ".audit.jsonl"),):
            leftover.unlink(missing_ok=True)
    counts = {
        op: after["counters"].get(op, 0) - before["counters"].get(op, 0) for op in after["counters"]
    }
    cpu = after["cpu"] - before["cpu"]
    return started, seconds, {op: n for op, n in counts.items() if n}, cpu, text


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--repo", type=Path, help="a git work tree committed on the host")
    source.add_argument("--files", type=int, help="make a repository of N files instead")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--cold", action="store_true", help="also drop the kernel's caches (root)")
    p.add_argument("--profile", action="store_true", help="profile the daemon (last rep)")
    p.add_argument(
        "--warm", action="store_true", help="compare the mount without and with its listing"
    )
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="agentroot-git-status-"))
    mounts: dict[str, list[str]] = (
        {"mount": []} if not args.warm else {"no listing": [], "listing": ["warm=true"]}
    )
    try:
        repo = synthetic(work / "repo", args.files) if args.files else args.repo.resolve()
        files = int(git(repo, "ls-files", "-z").count("\0"))
        print(f"repository: {repo} ({files} files in the index)", flush=True)
        timed_status(repo)  # the host's index settled: what an agent finds
        modes = [False, True] if args.cold else [False]
        for cold in modes:
            host: list[float] = []
            timed: dict[str, list[tuple[float, float]]] = {name: [] for name in mounts}
            for rep in range(args.reps):
                if cold:
                    drop_caches()
                host.append(timed_status(repo))
                last = rep == args.reps - 1
                for name, options in mounts.items():
                    started, seconds, counts, cpu, text = mounted_status(
                        repo, work, cold=cold, profile=args.profile and last, options=options
                    )
                    timed[name].append((started, seconds))
                    if rep == 0 or last:
                        ops = ", ".join(f"{op}={n}" for op, n in sorted(counts.items()))
                        print(
                            f"  rep {rep + 1}: {name}: start {started:.3f} s, status "
                            f"{seconds:.3f} s, daemon CPU {cpu:.2f} s: {ops}",
                            flush=True,
                        )
                    if text:
                        print(text)
            h = statistics.median(host)
            label = "cold caches" if cold else "warm host caches"
            print(f"{label}, medians of {args.reps}: host {h:.3f} s", flush=True)
            for name, runs in timed.items():
                started = statistics.median(run[0] for run in runs)
                m = statistics.median(run[1] for run in runs)
                both = statistics.median(run[0] + run[1] for run in runs)
                print(
                    f"  {name}: first git status in a fresh default mount {m:.3f} s "
                    f"({m / h:.1f}x host); the mount's start {started:.3f} s; start and status "
                    f"{both:.3f} s",
                    flush=True,
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
