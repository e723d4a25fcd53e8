"""Eight processes stage and dispose sessions at random against one worktree.

The test leads them through phases (staging, then draining until the worktree empties, twice).
While they run, it samples ``git status`` continuously: no session file may ever show.
Afterwards no lease is lost (the manifest holds exactly the sessions the workers staged and did
not dispose, and the config holds exactly those servers, entry for entry), and once everything
is disposed (the workers have exited, so reconciliation reaps what they left) the worktree is
byte-identical to the start: ``.cursor/`` gone, the exclusion gone, no debris in git's
directories.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import mcpstage
from mcpstage import _manifest

from .support import REPO_ROOT, Repo, porcelain, snapshot

WORKERS = 8
CYCLES = 2  # staging then draining, twice: the second stages into a worktree that emptied
STARTUP = 1.5  # every peer's interpreter is up by then
STAGING = 0.5
DRAIN_LIMIT = 90.0  # a drain ends when the worktree empties; this only stops a broken run


class Phases:
    """The phase every peer is in, written to a file they read; a drain lasts until a cleanup."""

    def __init__(self, control: Path, logs: list[Path]) -> None:
        self._control, self._logs = control, logs
        self._cycle = 0
        self._go("wait")

    def _go(self, phase: str) -> None:
        staged = self._control.with_suffix(".new")
        staged.write_text(phase)
        os.replace(staged, self._control)  # a peer never reads a half-written phase
        self.phase, self._since = phase, time.monotonic()
        self._cleanups_before = self.cleanups()

    def stop(self) -> None:
        self._go("stop")

    def cleanups(self) -> int:
        return sum(log.read_text().count(" cleaned") for log in self._logs if log.exists())

    def advance(self) -> None:
        spent = time.monotonic() - self._since
        if self.phase == "wait" and spent >= STARTUP:
            self._go("stage")
        elif self.phase == "stage" and spent >= STAGING:
            self._go("drain")
        elif self.phase == "drain" and (
            self.cleanups() > self._cleanups_before or spent >= DRAIN_LIMIT
        ):
            self._cycle += 1
            self._go("stage" if self._cycle < CYCLES else "stop")


def test_eight_peers_never_lose_a_lease_nor_show_a_session_file(repo: Repo, tmp_path: Path) -> None:
    start = snapshot(repo)
    env = {k: v for k, v in os.environ.items() if k != "MCPSTAGE_CRASH_AT"}
    env["PYTHONPATH"] = str(REPO_ROOT)
    logs = [tmp_path / f"worker{n}.log" for n in range(WORKERS)]
    phases = Phases(tmp_path / "phase", logs)
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.mcpstage.worker",
                str(repo.wt),
                str(tmp_path / "phase"),
                str(n),
                str(log),
            ],
            env=env,
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n, log in enumerate(logs)
    ]
    samples, shown = 0, []
    try:
        while any(worker.poll() is None for worker in workers):
            status = porcelain(repo.wt)
            samples += 1
            time.sleep(0.02)  # leave the mount some room for the peers
            shown += [line for line in status.splitlines() if ".cursor" in line]
            phases.advance()
    finally:
        if phases.phase != "stop":  # a peer failed: let the others go
            phases.stop()
        results = [worker.communicate(timeout=120) for worker in workers]
    for worker, (_out, err) in zip(workers, results, strict=True):
        assert worker.returncode == 0, err
    assert shown == [], f"git status showed session files: {sorted(set(shown))}"
    assert samples >= 5

    staged: list[str] = []
    disposed: set[str] = set()
    cleanups = 0
    for log in logs:
        for line in log.read_text().splitlines():
            verb, key, *cleaned = line.split()
            (staged.append if verb == "staged" else disposed.add)(key)
            cleanups += bool(cleaned)
    assert len(staged) == len(set(staged)) >= WORKERS  # every session got its own key
    assert cleanups >= CYCLES  # each drain emptied the worktree, and peers staged again after
    live = set(staged) - disposed

    shape = mcpstage.resolve(repo.wt)
    state = _manifest.load(shape)
    leases = {} if state is None else {x.key: x.entry.to_json() for x in state.leases}
    assert set(leases) == live
    if live:
        assert state is not None and state.pending is None
        config = json.loads(Path(shape.config_path).read_bytes())
        assert config == {"mcpServers": leases}
    else:
        assert not Path(shape.cursor_dir).exists()

    outcome = mcpstage.reconcile(repo.wt)  # the workers are gone: their leases are reaped
    assert set(outcome.reaped) == live
    assert porcelain(repo.wt) == ""
    assert snapshot(repo) == start
    for directory in (shape.common_dir, shape.git_dir, shape.info_dir):
        assert [n for n in os.listdir(directory) if "mcpstage" in n] == []
