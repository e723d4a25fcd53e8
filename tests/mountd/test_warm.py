"""The warm listing (``mountd._warm``): a default mount lists its tree through itself before it
is handed over, so that the kernel answers the first ``git status`` from what the listing told it.

The listing on its own over a host directory (every entry once, never through a symlink, at most
its cap), then real mounts of the tree ``mountd mount`` serves by default over a real repository,
its requests counted by the serving process, and the command line's wiring.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mountd import MountOptions
from mountd import _control as control
from mountd import _registry as registry
from mountd._warm import WARM_ENTRIES, Warmer

from .mounting import cleared_afterwards, mount_process
from .sandbox_trees import default_mount, git, git_env
from .test_run import private_state

__all__ = ["private_state"]  # each mountd command gets its own state directory

DIRS, FILES = 30, 20  # a repository of DIRS * FILES files


def every_entry(root: Path) -> int:
    """How many entries ``root`` holds beneath it, not following symlinks."""
    return sum(len(dirs) + len(files) for _, dirs, files in os.walk(root))


def listed(root: Path, cap: int = WARM_ENTRIES) -> Warmer:
    warmer = Warmer(str(root), cap=cap)
    warmer.start()
    assert warmer.wait(60)
    return warmer


# --- the listing, over a host directory --------------------------------------------------------


def test_the_listing_lists_every_entry_once_and_never_through_a_symlink(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    for i in range(5):
        (outside / "deep" / f"o{i}").write_text("not in the tree\n")
    tree = tmp_path / "tree"
    for d in range(4):
        (tree / f"d{d}" / "sub").mkdir(parents=True)
        for i in range(3):
            (tree / f"d{d}" / "sub" / f"f{i}").write_text("x")
    (tree / "out").symlink_to(outside)  # listed as an entry, never followed
    (tree / "d0" / "loop").symlink_to("..")
    (tree / "gone").symlink_to("nowhere")
    warmer = listed(tree)
    assert warmer.finished
    assert warmer.listed == every_entry(tree) == 4 * (1 + 1 + 3) + 3


def test_the_listing_stops_at_its_cap(tmp_path: Path) -> None:
    for d in range(10):
        (tmp_path / f"d{d}").mkdir()
        for i in range(10):
            (tmp_path / f"d{d}" / f"f{i}").write_text("x")
    assert every_entry(tmp_path) == 110
    assert listed(tmp_path, cap=25).listed == 25
    assert listed(tmp_path, cap=0).listed == 0


def test_the_listing_skips_what_it_cannot_list_and_ends_on_a_missing_root(
    tmp_path: Path,
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "f").write_text("x")
    assert listed(tmp_path / "missing").listed == 0  # nothing to list: done, not stuck
    assert listed(tmp_path).listed == 2


# --- through a default mount of a repository ---------------------------------------------------


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A committed repository of ``DIRS * FILES`` files, each older than the index (so none is
    "racily clean" and re-read for that), its index settled by a ``git status`` on the host."""
    root = tmp_path_factory.mktemp("warm") / "repo"
    past = time.time_ns() - 3600 * 10**9
    for d in range(DIRS):
        (root / f"dir{d}").mkdir(parents=True)
        for i in range(FILES):
            path = root / f"dir{d}" / f"file{i}.txt"
            path.write_text(f"{d} {i}\n")
            os.utime(path, ns=(past, past))
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "initial")
    assert git(root, "status", "--porcelain") == ""
    return root


def first_status(repository: Path, tmp_path: Path, options: MountOptions) -> tuple[int, object]:
    """The LOOKUPs the first ``git status`` in a fresh default mount of ``repository`` sent,
    and what the mount's listing listed before it."""
    mnt, upper = tmp_path / "mnt", tmp_path / "upper"
    mnt.mkdir(parents=True)
    upper.mkdir()
    build = functools.partial(default_mount, str(repository), str(upper))
    with mount_process(build, mnt, options) as mounted:
        before = mounted.stats()
        assert git(mnt, "status", "--porcelain") == ""
        after = mounted.stats()
    lookups = after["counters"].get("lookup", 0) - before["counters"].get("lookup", 0)
    return lookups, before["listed"]


# Entries stay cached for an hour, and the mount waits for its listing as long as it takes, so
# that a slow machine counts the same requests as a fast one.
CACHED = MountOptions(entry_timeout=3600, attr_timeout=3600, negative_timeout=3600)
WARM = MountOptions(
    entry_timeout=3600, attr_timeout=3600, negative_timeout=3600, warm=True, warm_wait=600
)


@pytest.mark.mount
def test_without_the_listing_the_first_status_looks_up_every_file(
    repository: Path, tmp_path: Path
) -> None:
    lookups, listed_before = first_status(repository, tmp_path, CACHED)
    assert listed_before is None
    assert lookups >= DIRS * FILES


@pytest.mark.mount
def test_after_the_listing_the_first_status_sends_few_lookups(
    repository: Path, tmp_path: Path
) -> None:
    lookups, listed_before = first_status(repository, tmp_path, WARM)
    assert isinstance(listed_before, int)
    assert listed_before >= DIRS * (FILES + 1)  # the work tree at least (.git, /tmp besides)
    assert lookups < 100


@pytest.mark.mount
def test_a_listing_capped_below_the_tree_leaves_the_files_to_their_lookups(
    repository: Path, tmp_path: Path
) -> None:
    cap = 20  # fewer than the root's entries: no directory beneath it is listed
    options = MountOptions(
        entry_timeout=3600, attr_timeout=3600, warm=True, warm_wait=600, warm_entries=cap
    )
    lookups, listed_before = first_status(repository, tmp_path, options)
    assert listed_before == cap
    assert lookups >= DIRS * FILES


@pytest.mark.mount
def test_a_listing_still_running_after_the_handover_races_nothing_wrong(
    repository: Path, tmp_path: Path
) -> None:
    """Handed over at once, the mount serves git and its own listing together, and stops the
    listing when it goes away (the child exits 0 with nothing left mounted: ``mount_process``
    checks both)."""
    for attempt in range(2):
        lookups, _ = first_status(
            repository, tmp_path / str(attempt), MountOptions(warm=True, warm_wait=0)
        )
        assert lookups > 0


def test_the_listing_needs_entries_that_stay_cached() -> None:
    assert MountOptions(warm=True).lists_first
    assert not MountOptions().lists_first
    assert not MountOptions(warm=True, entry_timeout=0).lists_first
    assert not MountOptions(warm=True, attr_timeout=0).lists_first
    with pytest.raises(ValueError) as refused:
        MountOptions(warm_wait=-1)
    assert str(refused.value) == "warm_wait and warm_entries must be 0 or more: -1, 200000"


# --- the command line ------------------------------------------------------------------------


# (the entries the listing told the kernel stay cached for an hour, however slow the machine)
MOUNT = (
    sys.executable,
    "-m",
    "mountd",
    "mount",
    "--daemon",
    "--ephemeral",
    "--cache-timeout",
    "3600",
)


@pytest.mark.mount
@pytest.mark.parametrize("flags", [(), ("--no-warm",)])
def test_mountd_mount_of_a_directory_lists_it_unless_told_not_to(
    flags: tuple[str, ...], repository: Path, tmp_path: Path, private_state: Path
) -> None:
    """The listing is done by the time ``mountd mount --daemon`` returns (its READDIRPLUS
    requests counted before anything touched the mount), and then the first status sends few
    lookups; with ``--no-warm`` nothing was listed, and the status looks every file up."""
    with cleared_afterwards(tmp_path / "mnt") as mnt:
        started = subprocess.run(
            [*MOUNT, *flags, str(mnt)],
            cwd=repository,
            env=git_env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert started.returncode == 0, started.stdout + started.stderr
        path = registry.canonical(mnt)
        before = control.request(path, {"op": "status"})["counters"]
        assert git(mnt, "status", "--porcelain") == ""
        after = control.request(path, {"op": "status"})["counters"]
        stopped = subprocess.run(
            [sys.executable, "-m", "mountd", "unmount", str(mnt)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    lookups = after.get("lookup", 0) - before.get("lookup", 0)
    if flags:
        assert before.get("readdir", 0) == 0
        assert lookups >= DIRS * FILES
    else:
        assert before.get("readdir", 0) >= DIRS
        # (the mount waits 5 s at most for its listing: a machine too slow for that may see
        # git race the rest of it, and send more lookups than the 20-odd of a finished one)
        assert lookups < DIRS * FILES
