#!/usr/bin/env python3
"""What agents actually do, on tmpfs, on the host disk, in a mount and inside ``mountd run``.

A benchmark, not a test; run by hand, as root::

    .venv/bin/python bench/agent_workloads.py --repo /path/to/a/git/repository
    .venv/bin/python bench/agent_workloads.py --only venv,rmrf --reps 5

Theory of operation
- Workloads (each a shell command, timed, after an untimed setup in a fresh directory):
  ``venv``: ``python3 -m venv`` (ensurepip installs pip, ~1,000 files) and ``pip install`` of a
  handful of wheels from a wheelhouse in the directory (no network); ``checkout``: ``git checkout``
  between two tags far apart in a clone of ``--repo`` (default tags: its oldest and newest
  ``--tags``); ``suite``: part of networkx's own test suite (the project ``run_bench.py`` uses);
  ``rmrf``: ``rm -rf`` of a build tree (a copy of this Python's standard library).
- Targets: ``tmpfs`` (a directory on a tmpfs mounted for the run), ``disk`` (a directory on the
  host disk, under ``--disk``), ``mount`` (``mountd mount``'s default tree over such a directory:
  the command runs in the mount, the mount's start is not timed) and ``run`` (the command inside
  ``mountd run`` over such a directory: its start, sandbox, summary and stop are timed, as an
  agent's harness feels them). Every setup is made on the host before a mount sees it, so what
  the command reads is the lower layer, as in a real repository.
- Repetitions are interleaved per workload (rep 1 on every target, then rep 2, ...), so a shared
  machine's drift hits every target alike. The report gives medians and ratios to the disk (the
  issue's target: none above 1.5x inside ``mountd run``) and to tmpfs.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import run_bench

HERE = Path(__file__).resolve().parent
MOUNTD = HERE.parent / ".venv" / "bin" / "mountd"
PYTHON = "/usr/bin/python3"  # the interpreter the sandbox shows
WHEELS = ("attrs", "idna", "six", "packaging", "iniconfig", "pluggy", "pytest")
SUITE = "networkx/algorithms/shortest_paths networkx/algorithms/flow"
ENV = {
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONPATH": ".bench-deps",
    "GIT_CONFIG_GLOBAL": "/dev/null",
}
TARGETS = ("tmpfs", "disk", "mount", "run")


@dataclass(frozen=True)
class Workload:
    name: str
    setup: Callable[[Path], None]
    command: str


def sh(command: str, cwd: Path) -> None:
    subprocess.run(["sh", "-c", command], cwd=cwd, check=True, env={**os.environ, **ENV})


def workloads(args: argparse.Namespace) -> list[Workload]:
    cache: Path = args.cache
    wheelhouse = cache / "wheelhouse"
    if (args.only is None or "venv" in args.only) and not wheelhouse.is_dir():
        subprocess.run(
            [sys.executable, "-m", "pip", "-q", "download", "-d", str(wheelhouse), *WHEELS],
            check=True,
        )
    found: list[Workload] = [
        Workload(
            "venv",
            lambda d: shutil.copytree(wheelhouse, d / "wheels"),
            f"{PYTHON} -m venv v && v/bin/pip -q --disable-pip-version-check install"
            f" --no-index --find-links wheels {' '.join(WHEELS)}",
        ),
        Workload(
            "rmrf",
            lambda d: shutil.copytree(
                Path(os.__file__).parent, d / "build", symlinks=True, ignore=_no_site_packages
            ),
            "rm -rf build",
        ),
    ]
    if args.repo is not None:
        old, new = args.tags.split("..")
        found.append(
            Workload(
                "checkout",
                lambda d: sh(
                    f"git clone -q --no-local {args.repo} repo && git -C repo checkout -q {old}", d
                ),
                f"git -C repo checkout -q {new}",
            )
        )
    elif args.only is None or "checkout" in args.only:
        print("checkout: skipped (give --repo, a git repository with tags far apart)")
    if args.only is None or "suite" in args.only:
        project = run_bench.prepare(cache)
        found.append(
            Workload(
                "suite",
                lambda d: shutil.copytree(project, d / "project", symlinks=True),
                f"cd project && {PYTHON} -m pytest -q -p no:cacheprovider {SUITE}",
            )
        )
    return [w for w in found if args.only is None or w.name in args.only]


def _no_site_packages(directory: str, names: list[str]) -> set[str]:
    return {n for n in names if n in ("site-packages", "dist-packages", "__pycache__")}


@contextlib.contextmanager
def tmpfs(base: Path) -> Iterator[Path]:
    where = base / "tmpfs"
    where.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4g", "agentroot-bench", str(where)], check=True
    )
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def timed(target: str, workload: Workload, root: Path, mountd: Path) -> float:
    """One run of ``workload`` on ``target``: its setup in a fresh directory under ``root``, then
    the timed command."""
    work = Path(tempfile.mkdtemp(dir=root, prefix=f"{workload.name}-"))
    env = {**os.environ, **ENV}
    try:
        workload.setup(work)
        if target in ("tmpfs", "disk"):
            start = time.perf_counter()
            subprocess.run(
                ["sh", "-c", workload.command], cwd=work, env=env, check=True, capture_output=True
            )
            return time.perf_counter() - start
        if target == "run":
            flags = [arg for name in ENV for arg in ("--env", name)]
            start = time.perf_counter()
            subprocess.run(
                [str(mountd), "run", *flags, "--", "sh", "-c", workload.command],
                cwd=work,
                env=env,
                check=True,
                capture_output=True,
            )
            return time.perf_counter() - start
        mnt = Path(tempfile.mkdtemp(dir=root, prefix="mnt-"))
        subprocess.run(
            [str(mountd), "mount", "--daemon", "--fresh", str(mnt)],
            cwd=work,
            env=env,
            check=True,
            capture_output=True,
        )
        try:
            start = time.perf_counter()
            subprocess.run(
                ["sh", "-c", workload.command], cwd=mnt, env=env, check=True, capture_output=True
            )
            return time.perf_counter() - start
        finally:
            subprocess.run(
                [str(mountd), "unmount", "--discard", str(mnt)], check=False, capture_output=True
            )
            mnt.rmdir()
    except subprocess.CalledProcessError as failed:
        err = (failed.stderr or b"")[-1500:].decode(errors="replace")
        sys.exit(f"{workload.name} on {target}: exit {failed.returncode}\n{err}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--only", type=lambda s: set(s.split(",")), help="venv,checkout,suite,rmrf")
    parser.add_argument("--targets", default=",".join(TARGETS), help=",".join(TARGETS))
    parser.add_argument("--repo", type=Path, help="a git repository (a bare one will do)")
    parser.add_argument("--tags", default="1.0..3.1.3", help="OLD..NEW, two tags of --repo")
    parser.add_argument("--disk", type=Path, default=Path("/var/tmp"), help="the host disk")
    parser.add_argument("--mountd", type=Path, default=MOUNTD)
    parser.add_argument(
        "--cache", type=Path, default=Path.home() / ".cache" / "agentroot-bench", help="downloads"
    )
    args = parser.parse_args()
    targets = args.targets.split(",")
    chosen = workloads(args)
    times: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory(dir=args.disk, prefix="agentroot-agent-bench-") as base:
        disk = Path(base) / "disk"
        disk.mkdir()
        with tmpfs(Path(base)) as memory:
            for workload in chosen:
                for rep in range(1, args.reps + 1):
                    for target in targets:
                        root = memory if target == "tmpfs" else disk
                        took = timed(target, workload, root, args.mountd)
                        times.setdefault((workload.name, target), []).append(took)
                        print(f"{workload.name} rep {rep} {target}: {took:.2f} s", flush=True)
    print(f"\n{'workload':<10}" + "".join(f"{t:>10}" for t in targets) + "  (median s; x disk)")
    for workload in chosen:
        medians = {t: statistics.median(times[workload.name, t]) for t in targets}
        print(f"{workload.name:<10}" + "".join(f"{medians[t]:>10.2f}" for t in targets))
        if "disk" in medians:
            ratios = "".join(f"{medians[t] / medians['disk']:>9.2f}x" for t in targets)
            print(f"{'':<10}{ratios}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
