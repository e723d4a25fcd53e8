"""Lock directories: owner records, brief retries, and the only two ways to reclaim.

Each test runs on a tmpfs directory and through the mount (the ``repo`` fixture), on the real
lock of a worktree (``.cursor/.fusion-mcp.lock``) or the bootstrap lock in the common directory.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

import mcpstage
from mcpstage import _bootstrap, _locks, _owner

from .support import REPO_ROOT, Repo, cli, porcelain
from .test_protocol import BRIDGE


def _dead_pid() -> int:
    with subprocess.Popen(["true"]) as child:
        child.wait()
    return child.pid


def _plant(spec: _locks.LockSpec, process: _owner.Process, *, age: float, ttl: float = 30.0) -> str:
    """Make the lock directory as an owner that acquired it ``age`` seconds ago would have."""
    owner = _locks.LockOwner(process, time.time() - age, ttl, "planted")
    os.makedirs(os.path.join(spec.path, owner.encode()))
    return owner.encode()


def _cli_argv() -> list[str]:
    return [sys.executable, "-m", "mcpstage"]


def _cli_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "MCPSTAGE_CRASH_AT"}
    env["PYTHONPATH"] = str(REPO_ROOT)
    return env


def _main_spec(repo: Repo) -> _locks.LockSpec:
    shape = mcpstage.resolve(repo.wt)
    os.makedirs(shape.cursor_dir, exist_ok=True)
    return _bootstrap.main_lock(shape)


def test_the_owner_record_holds_pid_hostname_and_acquisition_time(repo: Repo) -> None:
    crashed = cli(
        "stage", "-C", str(repo.wt), "--", "node", env={"MCPSTAGE_CRASH_AT": "main-lock.acquired"}
    )
    assert crashed.returncode == -9
    view = _locks.inspect(_main_spec(repo))
    assert view.owner is not None
    assert view.owner.process.hostname == socket.gethostname()
    assert view.owner.process.pid > 0 and view.owner.process.start > 0
    assert 0 <= time.time() - view.owner.acquired_at < 30
    assert (view.state, view.reason) == ("stale", "owner process is dead")
    assert porcelain(repo.wt) == ""  # the lock is empty directories under the exclusion anyway
    # The record round-trips through its directory name.
    assert _locks.LockOwner.decode(view.owner.encode()) == view.owner


def test_contenders_retry_briefly_then_report_busy(repo: Repo) -> None:
    spec = _main_spec(repo)
    held = _locks.acquire(spec)
    try:
        started = time.monotonic()
        with pytest.raises(
            mcpstage.BusyError, match=rf"^busy: .* is held by pid {os.getpid()} on "
        ):
            mcpstage.stage(repo.wt, BRIDGE, wait=0.3)
        assert 0.3 <= time.monotonic() - started < 5
        result = cli("stage", "-C", str(repo.wt), "--wait", "0.2", "--", "node")
        assert result.returncode == 5 and result.stderr.startswith("mcpstage: busy: ")
    finally:
        assert _locks.release(held)
    assert mcpstage.stage(repo.wt, BRIDGE, wait=0.3).lease is not None


def test_a_contender_gets_the_lock_once_it_is_released(repo: Repo) -> None:
    spec = _main_spec(repo)
    held = _locks.acquire(spec)
    # A contender in another process starts retrying; we release while it waits.
    with subprocess.Popen(
        [*_cli_argv(), "stage", "-C", str(repo.wt), "--wait", "20", "--", "node"],
        stdout=subprocess.PIPE,
        env=_cli_env(),
        text=True,
    ) as contender:
        time.sleep(0.3)
        assert contender.poll() is None  # still retrying
        assert _locks.release(held)
        out, _ = contender.communicate(timeout=30)
    assert contender.returncode == 0 and out.startswith("fusion-custom-tools-")


def test_a_dead_owner_on_this_host_is_reclaimed(repo: Repo) -> None:
    spec = _main_spec(repo)
    _plant(spec, _owner.Process(_dead_pid(), socket.gethostname()), age=0)
    started = time.monotonic()
    assert mcpstage.stage(repo.wt, BRIDGE, wait=5).lease is not None
    assert time.monotonic() - started < 2


def test_an_expired_ttl_is_reclaimed_even_from_a_live_owner(repo: Repo) -> None:
    spec = _main_spec(repo)
    _plant(spec, _owner.process(), age=31, ttl=30)
    assert mcpstage.stage(repo.wt, BRIDGE, wait=5).lease is not None


@pytest.mark.parametrize("age", [0.0, 25.0])
def test_a_live_or_unknowable_owner_within_its_ttl_is_never_reclaimed(
    repo: Repo, age: float
) -> None:
    spec = _main_spec(repo)
    for owner in (_owner.process(), _owner.Process(pid=_dead_pid(), hostname="another-host")):
        planted = _plant(spec, owner, age=age, ttl=30)
        with pytest.raises(mcpstage.BusyError):
            mcpstage.stage(repo.wt, BRIDGE, wait=0.2)
        assert os.listdir(spec.path) == [planted]
        os.rmdir(os.path.join(spec.path, planted))
        os.rmdir(spec.path)


def test_another_hosts_owner_is_reclaimed_after_its_ttl(repo: Repo) -> None:
    spec = _main_spec(repo)
    _plant(spec, _owner.Process(pid=1, hostname="another-host"), age=31, ttl=30)
    assert mcpstage.stage(repo.wt, BRIDGE, wait=5).lease is not None


def test_the_bootstrap_lock_follows_the_same_rules(repo: Repo) -> None:
    shape = mcpstage.resolve(repo.wt)
    spec = _bootstrap.bootstrap_lock(shape)
    planted = _plant(spec, _owner.process(), age=0)
    with pytest.raises(mcpstage.BusyError, match=r"mcpstage-bootstrap\.lock"):
        mcpstage.stage(repo.wt, BRIDGE, wait=0.2)
    os.rmdir(os.path.join(spec.path, planted))
    os.rmdir(spec.path)
    _plant(spec, _owner.Process(_dead_pid(), socket.gethostname()), age=0)
    assert mcpstage.stage(repo.wt, BRIDGE, wait=5).lease is not None


def test_the_backstop_attempt_never_reclaims(repo: Repo) -> None:
    spec = _main_spec(repo)
    planted = _plant(spec, _owner.Process(_dead_pid(), socket.gethostname()), age=0)
    assert _locks.try_acquire(spec) is None
    assert os.listdir(spec.path) == [planted]


def test_release_never_removes_a_lock_that_is_no_longer_ours(repo: Repo) -> None:
    spec = _main_spec(repo)
    held = _locks.acquire(spec)
    # Someone reclaimed it (say after our TTL) and holds it now.
    os.rename(spec.path, spec.path + ".gone")
    theirs = _locks.acquire(spec)
    assert not _locks.release(held)
    assert _locks.still_held(theirs)
    assert _locks.release(theirs)
