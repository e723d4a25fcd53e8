"""Crash tests: a child staging, disposing or reaping is SIGKILLed at every step of the protocol.

Theory of operation
-------------------
Each case prepares a worktree (a first stage, a later stage, disposing one of two leases,
disposing the last lease, reaping a dead owner's lease; with no config or an operator's config
at the start), forks a child that runs the ``mcpstage`` command line with
``MCPSTAGE_CRASH_AT=<step>``, and requires that it died by ``SIGKILL`` at that step (so the list
of steps per scenario is checked too). Then, on the crashed worktree:

- ``git status`` shows no session file;
- recovery (``reconcile --no-reap``) leaves a config that parses and whose bytes are exactly the
  previous sequence or the intended one, and a manifest whose leases are exactly the config's
  fusion servers, entry for entry;
- on a copy of the crashed worktree the operator edits the config first: recovery keeps those
  bytes exactly, and the operator's content survives to the end;
- disposing what is left returns the worktree to its starting bytes (the edited copy: to the
  operator's content), with no debris left in the git directories.

Leases the scenarios make are owned by the test process, so they stay alive through recovery
(only the reaping scenario has a dead owner). The child is a ``fork`` of the test process
(an interpreter start per step would cost more than the whole protocol).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

import mcpstage
from mcpstage import _bootstrap, _config, _crash, _manifest, _owner
from mcpstage import cli as mcpstage_cli
from mcpstage._manifest import ServerEntry

from .conftest import Places
from .support import Repo, leaked, snapshot

OPERATOR = (
    b'{\n\t"mcpServers": {"mine": {"command": "operator-tool", "args": ["-v"]}},\n\t"x": 1\n}'
)
EDIT = b'{"mcpServers": {"mine2": {"command": "edited"}}}\n'
ENTRY = ServerEntry("node", ("bridge.js",), (("TOKEN", "secret"),))
KEY = "fusion-custom-tools-11111111-2222-4333-8444-555555555555"

LOCK = ("staged", "acquired")
COMMIT = (
    "pending-written",
    "config-temp-written",
    "config-checked",
    "config-replaced",
    "promoted",
)


def _points(*groups: tuple[str, tuple[str, ...]]) -> tuple[str, ...]:
    return tuple(f"{prefix}.{step}" for prefix, steps in groups for step in steps)


def _reachable(scenario: str, baseline: bool) -> tuple[str, ...]:
    """Every crash point the scenario passes, in order."""
    main = (("main-lock", LOCK),)
    release = (("main-lock", ("trashed",)),)
    if scenario == "first-stage":
        made = () if baseline else ("cursor-made",)
        return _points(
            ("bootstrap-lock", LOCK),
            ("bootstrap", ("marker-written", *made)),
            ("bootstrap-lock", ("trashed",)),
            *main,
            ("stage", ("baseline-written", *COMMIT)),
            *release,
        )
    if scenario == "later-stage":
        return _points(*main, ("stage", COMMIT), *release)
    if scenario == "dispose-one":
        return _points(*main, ("dispose", COMMIT), *release)
    if scenario == "reap":
        return _points(*main, ("reap", COMMIT), *release)
    assert scenario == "dispose-last"
    return _points(
        *main,
        ("dispose", COMMIT),
        ("unbootstrap-lock", LOCK),
        ("cleanup", ("state-removed",) if baseline else ("state-removed", "intent-written")),
        ("cleanup", ("marker-removed",)),
        ("unbootstrap-lock", ("trashed",)),
        *release,
        *((("cleanup", ("released",)),) if not baseline else ()),
    )


@dataclass(frozen=True)
class Case:
    scenario: str
    baseline: bool  # an operator config exists at the start
    point: str


CASES = [
    Case(scenario, baseline, point)
    for scenario in ("first-stage", "later-stage", "dispose-one", "dispose-last", "reap")
    for baseline in ((False, True) if scenario in ("first-stage", "dispose-last") else (True,))
    for point in _reachable(scenario, baseline)
]


def test_every_crash_point_is_exercised() -> None:
    assert {case.point for case in CASES} == set(_crash.POINTS)


def _fork_cli(argv: list[str], point: str, log: Path) -> int:
    """Run the command line in a forked child that crashes at ``point``; its exit status."""
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        code = 70
        try:
            os.environ[_crash.ENV] = point
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            code = mcpstage_cli.main(argv)
        finally:
            os._exit(code)
    _pid, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _dead_owner() -> _owner.Process:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return _owner.Process(pid=pid, hostname=_owner.process().hostname)


def _prepare(repo: Repo, case: Case) -> tuple[list[str], list[str]]:
    """Set the scenario up; the child's argv and the leases it should leave."""
    wt = str(repo.wt)
    me = _owner.process()
    owner = ["--owner-pid", str(os.getpid())]
    if case.scenario == "first-stage":
        return ["stage", "-C", wt, "--key", KEY, *owner, "--", "node", "bridge.js"], [KEY]
    first = mcpstage.stage(wt, ENTRY, owner=me).lease
    assert first is not None
    if case.scenario == "later-stage":
        argv = ["stage", "-C", wt, "--key", KEY, *owner, "--", "node", "bridge.js"]
        return argv, [first.key, KEY]
    if case.scenario == "dispose-last":
        return ["dispose", "-C", wt, first.key], []
    if case.scenario == "dispose-one":
        second = mcpstage.stage(wt, ENTRY, owner=me).lease
        assert second is not None
        return ["dispose", "-C", wt, second.key], [first.key]
    assert case.scenario == "reap"
    doomed = mcpstage.stage(wt, ENTRY, owner=_dead_owner()).lease
    assert doomed is not None
    return ["reconcile", "-C", wt], [first.key]


def _leases_of(repo: Repo) -> dict[str, object]:
    state = _manifest.load(mcpstage.resolve(repo.wt))
    return {} if state is None else {x.key: x.entry.to_json() for x in state.leases}


def _intended(
    prior: bytes | None, case: Case, keys: list[str], entries: dict[str, object]
) -> bytes | None:
    if case.scenario == "dispose-last":
        return OPERATOR if case.baseline else None
    value = {} if prior is None else json.loads(prior)
    servers = {
        k: v
        for k, v in value.get("mcpServers", {}).items()
        if not k.startswith("fusion-custom-tools-")
    }
    for key in sorted(keys):
        servers[key] = entries.get(key, {"command": "node", "args": ["bridge.js"]})
    value["mcpServers"] = servers
    return _config.serialize(value)


def _no_debris(repo: Repo) -> None:
    shape = mcpstage.resolve(repo.wt)
    for directory in (shape.common_dir, shape.git_dir, shape.info_dir):
        left = [n for n in os.listdir(directory) if "mcpstage" in n]
        assert left == [], f"debris in {directory}: {left}"


def _check_recovered(repo: Repo, prior: bytes | None, intended: bytes | None) -> None:
    outcome = mcpstage.reconcile(repo.wt, reap=False)
    config = repo.config().read_bytes() if repo.config().exists() else None
    assert config in (prior, intended), f"a config that is neither sequence: {config!r}"
    if config is not None:
        assert _config.parse(config) is not None
    state = outcome.state
    if state is not None:
        assert state.pending is None
        servers = {} if config is None else json.loads(config)["mcpServers"]
        ours = {k: v for k, v in servers.items() if k.startswith("fusion-custom-tools-")}
        assert ours == {x.key: x.entry.to_json() for x in state.leases}
    assert leaked(repo.wt) == []


def _dispose_everything(repo: Repo) -> None:
    state = _manifest.load(mcpstage.resolve(repo.wt))
    for lease in () if state is None else state.leases:
        mcpstage.dispose(repo.wt, lease.key)
    mcpstage.reconcile(repo.wt)


@pytest.mark.parametrize(
    "case", CASES, ids=lambda c: f"{c.scenario}-{'operator' if c.baseline else 'none'}-{c.point}"
)
def test_a_crash_at_any_step_recovers_to_the_previous_or_intended_bytes(
    places: Places, place: str, case: Case
) -> None:
    repo = places.fresh(place)
    if case.baseline:
        repo.wt.joinpath(".cursor").mkdir()
        repo.config().write_bytes(OPERATOR)
    start = snapshot(repo)
    argv, expected_keys = _prepare(repo, case)
    prior = repo.config().read_bytes() if repo.config().exists() else None
    entries = _leases_of(repo)
    with tempfile.NamedTemporaryFile() as log:
        status = _fork_cli(argv, case.point, Path(log.name))
        assert status == -9, (
            f"child exited {status}, not killed at {case.point}:\n{Path(log.name).read_text()}"
        )
    assert leaked(repo.wt) == [], "git showed a session file after the crash"
    intended = _intended(prior, case, expected_keys, entries)

    # The operator edits a copy of the crashed worktree before anyone recovers it.
    edited = Repo(repo.root.with_name(repo.root.name + "-edited"), repo.mounted)
    shutil.copytree(repo.root, edited.root, symlinks=True)
    if edited.config().parent.is_dir():
        edited.config().write_bytes(EDIT)

    _check_recovered(repo, prior, intended)
    _dispose_everything(repo)
    assert snapshot(repo) == start
    _no_debris(repo)

    if edited.config().exists():
        mcpstage.reconcile(edited.wt, reap=False)
        assert edited.config().read_bytes() == EDIT, "recovery wrote over an operator edit"
        _dispose_everything(edited)
        final = json.loads(edited.config().read_bytes())
        assert final == json.loads(EDIT)
        assert not edited.state().exists()
        assert _bootstrap.read_marker(mcpstage.resolve(edited.wt)) is None
        _no_debris(edited)
