"""An operator's editor saves ``.cursor/mcp.json`` while mcpstage works on it: no save is lost.

Every write of the config composes operator content from the bytes read at the start of the
operation; a save that lands between that read and the rename must be looked at again and
kept. The deterministic tests run a real editor process at the exact step
(``MCPSTAGE_RUN_AT``, see ``mcpstage._crash``), in both save styles: before the last look at
the config (``<kind>.config-temp-written``) and after it, right before the rename
(``<kind>.config-checked``). The race test runs four peers staging and disposing while an
editor saves every 0.1 s, and asserts only that every save stayed (never a speed).

Through the mount the racing editor saves by rename only: a ``mountd`` mount applies an
in-place save (``open(path, "w")``, then write) that races a rename of the same name to the
file that holds the name afterwards, leaving NUL bytes, whoever renames (mcpstage, or another
editor's save); that is the mount's to fix, and the deterministic tests cover in-place saves
through the mount at each step.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import mcpstage
from mcpstage import _bootstrap, _manifest

from .support import REPO_ROOT, Repo, cli, porcelain

STYLES = ("rename", "inplace")
FUSION = "fusion-custom-tools-"


def _editor(repo: Repo, style: str, value: str) -> str:
    return f"{sys.executable} -m tests.mcpstage.editor save {repo.config()} {style} {value}"


def _run_with_editor(repo: Repo, step: str, style: str, *args: str) -> str:
    result = cli(
        *args,
        env={
            "MCPSTAGE_RUN_AT": step,
            "MCPSTAGE_RUN": _editor(repo, style, "v1"),
            "PYTHONPATH": str(REPO_ROOT),
        },
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def _config(repo: Repo) -> dict[str, object]:
    value: dict[str, object] = json.loads(repo.config().read_bytes())
    return value


def _fusion(repo: Repo) -> set[str]:
    servers = _config(repo).get("mcpServers", {})
    assert isinstance(servers, dict)
    return {key for key in servers if key.startswith(FUSION)}


def _leases(repo: Repo) -> set[str]:
    state = _manifest.load(mcpstage.resolve(repo.wt))
    return set() if state is None else {lease.key for lease in state.leases}


def _kept(repo: Repo) -> None:
    value = _config(repo)
    assert value["edited"] == "v1", "the editor's save was lost"
    servers = value["mcpServers"]
    assert isinstance(servers, dict)
    assert servers["mine"] == {"command": "edited", "args": ["v1"]}


def _owned(*args: str) -> tuple[str, ...]:
    return (*args[:1], "--owner-pid", str(os.getpid()), *args[1:])


@pytest.mark.parametrize("moment", ["config-temp-written", "config-checked"])
@pytest.mark.parametrize("style", STYLES)
def test_a_save_during_stage_is_kept(repo: Repo, style: str, moment: str) -> None:
    wt = str(repo.wt)
    first = cli(*_owned("stage", "-C", wt, "--", "node", "a.js")).stdout.strip()
    second = _run_with_editor(
        repo, f"stage.{moment}", style, *_owned("stage", "-C", wt, "--", "node", "b.js")
    ).strip()
    _kept(repo)
    assert _fusion(repo) == {first, second} == _leases(repo)
    state = mcpstage.status(repo.wt).state
    assert state is not None and state.operator_edit and state.pending is None


# Disposing one of two leases and reaping commit exactly as staging does: one pairing each.
SOME = [("rename", "config-temp-written"), ("inplace", "config-checked")]


@pytest.mark.parametrize(("style", "moment"), SOME)
def test_a_save_during_dispose_is_kept(repo: Repo, style: str, moment: str) -> None:
    wt = str(repo.wt)
    first = cli(*_owned("stage", "-C", wt, "--", "node", "a.js")).stdout.strip()
    second = cli(*_owned("stage", "-C", wt, "--", "node", "b.js")).stdout.strip()
    _run_with_editor(repo, f"dispose.{moment}", style, "dispose", "-C", wt, second)
    _kept(repo)
    assert _fusion(repo) == {first} == _leases(repo)


@pytest.mark.parametrize("moment", ["config-temp-written", "config-checked"])
@pytest.mark.parametrize("style", STYLES)
def test_a_save_during_the_last_dispose_is_kept(repo: Repo, style: str, moment: str) -> None:
    wt = str(repo.wt)
    key = cli(*_owned("stage", "-C", wt, "--", "node", "a.js")).stdout.strip()
    out = _run_with_editor(repo, f"dispose.{moment}", style, "dispose", "-C", wt, key)
    assert out.endswith("cleaned up\n")
    _kept(repo)
    assert _fusion(repo) == set()
    assert _bootstrap.read_marker(mcpstage.resolve(repo.wt)) is None
    assert not repo.state().exists()


@pytest.mark.parametrize(("style", "moment"), SOME)
def test_a_save_during_a_reap_is_kept(repo: Repo, style: str, moment: str) -> None:
    wt = str(repo.wt)
    live = cli(*_owned("stage", "-C", wt, "--", "node", "a.js")).stdout.strip()
    with subprocess.Popen(["true"]) as gone:
        gone.wait()
    dead = cli("stage", "-C", wt, "--owner-pid", str(gone.pid), "--", "node", "b.js")
    assert dead.returncode == 0, dead.stderr
    out = _run_with_editor(repo, f"reap.{moment}", style, "reconcile", "-C", wt)
    assert f"reaped: {dead.stdout.strip()}\n" in out
    _kept(repo)
    assert _fusion(repo) == {live} == _leases(repo)


# --- the race --------------------------------------------------------------------------------

WORKERS = 4
STARTUP = 1.5  # every peer's interpreter is up by then
RACE = 8.0  # how long the peers and the editor race
INTERVAL = 0.1  # between the editor's saves


def test_an_editor_racing_four_peers_loses_no_save(repo: Repo, tmp_path: Path) -> None:
    styles = "rename" if repo.mounted else "rename,inplace"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCPSTAGE_")}
    env["PYTHONPATH"] = str(REPO_ROOT)
    repo.wt.joinpath(".cursor").mkdir()
    repo.config().write_text('{"mcpServers": {"mine": {"command": "operator"}}}\n')
    control = tmp_path / "phase"
    control.write_text("wait")
    logs = [tmp_path / f"worker{n}.log" for n in range(WORKERS)]
    editor_log = tmp_path / "editor.log"

    def spawn(*args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", *args],
            env=env,
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    workers = [
        spawn("tests.mcpstage.worker", str(repo.wt), str(control), str(n), str(log))
        for n, log in enumerate(logs)
    ]
    editor = None
    try:
        time.sleep(STARTUP)
        control.write_text("stage")
        editor = spawn(
            "tests.mcpstage.editor",
            "race",
            str(repo.config()),
            str(control),
            str(editor_log),
            str(INTERVAL),
            styles,
        )
        time.sleep(RACE)
    finally:
        control.write_text("stop")
        results = [each.communicate(timeout=120) for each in workers]
        if editor is not None:
            editor.communicate(timeout=120)
    for worker, (_out, err) in zip(workers, results, strict=True):
        assert worker.returncode == 0, err
    assert editor is not None and editor.returncode == 0

    lines = editor_log.read_text().splitlines()
    saves = [line for line in lines if line.startswith("saved ")]
    lost = [line for line in lines if line.startswith("lost ")]
    operations = sum(len(log.read_text().splitlines()) for log in logs)
    assert len(saves) >= 10 and operations >= 10  # the race happened
    assert lost == [], f"{len(lost)} of {len(saves)} saves lost: {lost}"
    # The workers are gone: reconciliation reaps what they left; the last save is still there.
    mcpstage.reconcile(repo.wt)
    value = _config(repo)
    assert value["edit"] == len(saves)
    assert value["mcpServers"] == {"mine": {"command": "operator"}}
    assert porcelain(repo.wt) == "?? .cursor/mcp.json\n"  # the operator's own, untracked
