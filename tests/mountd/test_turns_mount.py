"""Turns on a live mount, end to end: the issue's "Done means" over a real ``mountd`` daemon.

The daemon is started with the command line (``--daemon``) and driven with ``mountd turn`` and
its control channel; the test process plays the harness. The mount is looked at through both
faces: the kernel's (``ls``, ``cat``, and the synthesized Read/Grep/LS tools over
``dir_fs(MOUNTPOINT)``) and the served tree's own API (the ``tmp`` listing in ``turn status``).
Mount tests fail, never skip, when mounting fails.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

import vfs
from mountd import _control as control
from mountd import _registry as registry
from tests.mountd.mounting import cleared_afterwards
from vfs.tools import synthesize_tools
from vfs.turns import SpillScope, rewrite_tool_input

from ..vfs.turns.spills import BIG, fetch_result, spill

REPO = Path(__file__).resolve().parents[2]
COMMAND = [sys.executable, "-m", "mountd"]

pytestmark = [pytest.mark.mount, pytest.mark.timeout(120)]


@pytest.fixture(autouse=True)
def private_state(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    runtime = tmp_path_factory.mktemp("runtime")
    runtime.chmod(0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    return runtime


@pytest.fixture
def mnt(tmp_path: Path) -> Iterator[Path]:
    """A mountpoint; whatever a test leaves mounted there is cleared afterwards."""
    path = tmp_path / "mnt"
    with cleared_afterwards(path):
        yield path


@pytest.fixture
def harness(tmp_path: Path) -> Path:
    """The harness's working directory (outside the mount), where native tools spill."""
    path = tmp_path / "harness"
    path.mkdir()
    return path


def mountd(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*COMMAND, *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


def mount(mnt: Path, *args: str, cwd: Path = REPO) -> None:
    started = mountd("mount", "--daemon", *args, str(mnt), cwd=cwd)
    assert started.returncode == 0, started.stdout + started.stderr


def unmount(mnt: Path) -> None:
    stopped = mountd("unmount", str(mnt))
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr


def turn(mnt: Path, op: str, action: str | None = None, **more: object) -> dict[str, Any]:
    """One control request, straight to the daemon's socket (the command line is tested in
    ``test_the_default_mount_has_turns``; here it would only add interpreter start-ups)."""
    payload: dict[str, object] = {"op": op, **more}
    if action is not None:
        payload["action"] = action
    reply = control.request(registry.canonical(mnt), payload)
    assert reply["ok"], reply
    return reply


def ls(path: Path) -> list[str]:
    """``ls -A`` as another process sees the directory."""
    listed = subprocess.run(["ls", "-A", str(path)], capture_output=True, text=True, check=True)
    return listed.stdout.split()


def tools_over(mnt: Path, calls: list[tuple[str, dict[str, object]]]) -> list[vfs.tools.ToolResult]:
    """Synthesized tools over the tree the mount shows, invoked in order (in this process)."""

    async def main() -> list[vfs.tools.ToolResult]:
        tools = synthesize_tools(vfs.dir_fs(mnt, read_only=True), ["Read", "Grep", "LS"])
        return [await tools[name].invoke(arguments) for name, arguments in calls]

    return anyio.run(main)


def test_done_means_spill_through_a_live_turn(mnt: Path, harness: Path) -> None:
    mount(mnt, "--factory", "tests.mountd.turn_trees:notes")
    try:
        path = registry.canonical(mnt)
        begun = turn(mnt, "turn", "begin", cwd=str(harness))
        assert begun["turn"]["number"] == 1 and begun["turn"]["cwd"] == str(harness)
        assert ls(mnt / "tmp") == []  # the authored /tmp is shadowed
        assert (mnt / "notes.md").read_text() == "hello\n"

        # The native tool spills; the name is looked up (and found missing) before the copy, so
        # the kernel holds a negative entry that the adoption must invalidate.
        uuid, host = spill(harness)
        spilled = mnt / "tmp" / f"{uuid}.txt"
        assert not spilled.exists()
        reply = control.request(
            path, {"op": "adopt", "tool": "webFetch", "result": fetch_result(host)}
        )
        assert reply["ok"], reply
        assert reply["adopted"] == [uuid]
        assert reply["result"]["output_location"] == f"/tmp/{uuid}.txt"
        assert f"Use Read or Grep on /tmp/{uuid}.txt." in reply["result"]["content"]
        assert str(host) not in json.dumps(reply["result"])
        assert not host.exists()  # deleted after the copy

        # Through the mount: cat, and the synthesized Read and Grep, also given the host path.
        cat = subprocess.run(["cat", str(spilled)], capture_output=True, text=True, check=True)
        assert cat.stdout == BIG
        scope = SpillScope(str(harness), overlay=True)
        calls: list[tuple[str, dict[str, object]]] = []
        for given in (f"/tmp/{uuid}.txt", str(host)):
            calls.append(("Read", {"path": given, "offset": 777, "limit": 1}))
            calls.append(("Grep", {"pattern": "needle", "path": given}))
        results = tools_over(mnt, [(n, dict(rewrite_tool_input(n, a, scope))) for n, a in calls])
        for read, grep in zip(results[::2], results[1::2], strict=True):
            assert read.ok and read.content == "   777\tline 777: the fetched page says needle"
            assert grep.ok and f"/tmp/{uuid}.txt" in str(grep.content)
            assert "line 777: the fetched page says needle" in str(grep.content)

        # Changes since the turn began: the adopted spill (API) and a write through the mount.
        (mnt / "tmp" / "scratch.txt").write_text("by a shell")
        changes = turn(mnt, "changes")["changes"]
        assert {"path": f"/tmp/{uuid}.txt", "kinds": ["entry"], "via": ["api"]} in changes
        assert any(c["path"] == "/tmp/scratch.txt" and c["via"] == ["mount"] for c in changes)
        status = turn(mnt, "status")
        assert status["turn"]["number"] == 1
        assert status["tmp"] == sorted([f"/tmp/{uuid}.txt", "/tmp/scratch.txt"])

        # End the turn: /tmp is empty through both faces as soon as the command returns.
        ended = turn(mnt, "turn", "end")
        assert ended["turn"] == {**begun["turn"], "active": False}
        assert ls(mnt / "tmp") == []
        assert not spilled.exists()
        assert turn(mnt, "status")["tmp"] == []  # the served tree's own view
        listing, reread = tools_over(
            mnt, [("LS", {"path": "/tmp"}), ("Read", {"path": f"/tmp/{uuid}.txt"})]
        )
        assert listing.ok and listing.content == "/tmp/"
        assert (reread.ok, reread.error) == (False, f"not found: /tmp/{uuid}.txt")
        assert (mnt / "notes.md").read_text() == "hello\n"  # the authored tree stays

        # The next turn starts empty too, and adopting needs a turn.
        turn(mnt, "turn", "begin", cwd=str(harness))
        assert ls(mnt / "tmp") == []
        turn(mnt, "turn", "end")
        refused = control.request(path, {"op": "adopt", "tool": "webFetch", "result": "x"})
        assert refused == {"ok": False, "error": "no turn is active: begin one first"}
    finally:
        unmount(mnt)


def test_the_default_mount_has_turns(mnt: Path, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "a.txt").write_text("host file\n")
    mount(mnt, cwd=project)
    try:
        text = mountd("turn", "status", str(mnt))
        assert text.returncode == 0, text.stderr
        assert (
            text.stdout == f"{registry.canonical(mnt)}  no active turn (0 so far)\n  /tmp: empty\n"
        )
        (mnt / "tmp" / "between.txt").write_text("written between turns")
        assert ls(mnt / "tmp") == ["between.txt"]
        begun = mountd("turn", "begin", str(mnt), cwd=project)
        assert begun.stdout == (
            f"mountd: turn 1 began on {registry.canonical(mnt)} (spills from {project})\n"
        )
        assert ls(mnt / "tmp") == []  # a turn starts with an empty /tmp
        (mnt / "tmp" / "work").mkdir()
        (mnt / "tmp" / "work" / "out.txt").write_text("turn output")
        assert ls(mnt / "tmp" / "work") == ["out.txt"]
        changes = mountd("turn", "changes", str(mnt), "--json")
        assert [c["path"] for c in json.loads(changes.stdout)["changes"]] == [
            "/tmp/work",
            "/tmp/work/out.txt",
        ]
        ended = mountd("turn", "end", str(mnt))
        assert ended.stdout == (
            f"mountd: turn 1 ended on {registry.canonical(mnt)}; /tmp is empty; checkpoint 1\n"
        )
        assert ls(mnt / "tmp") == []
        assert not (mnt / "tmp" / "work" / "out.txt").exists()
        assert (mnt / "a.txt").read_text() == "host file\n"
        again = mountd("turn", "end", str(mnt))
        assert (again.returncode, again.stderr) == (1, "mountd: no turn is active\n")
    finally:
        unmount(mnt)


def test_a_spec_gets_turns_only_when_asked(mnt: Path, tmp_path: Path) -> None:
    (tmp_path / "spec.toml").write_text(
        textwrap.dedent(
            """
            [root]
            type = "union"
            [root.mounts."/"]
            type = "temp"
            [root.mounts."/tmp"]
            type = "temp"
            files = { "/README.md" = "scratch space" }
            """
        )
    )
    mount(mnt, "spec.toml", cwd=tmp_path)
    try:
        refused = mountd("turn", "begin", str(mnt))
        assert refused.returncode == 1
        assert refused.stderr == (
            f"mountd: {registry.canonical(mnt)} has no turns: serve it with `mountd mount "
            "--turns` (the default mount has them)\n"
        )
        assert ls(mnt / "tmp") == ["README.md"]
        assert turn(mnt, "status")["turns"] is False
    finally:
        unmount(mnt)
    mount(mnt, "--turns", "spec.toml", cwd=tmp_path)
    try:
        assert ls(mnt / "tmp") == []  # the spec's /tmp is shadowed by the turn scratch
        turn(mnt, "turn", "begin")
        turn(mnt, "turn", "end")
    finally:
        unmount(mnt)


def test_turn_without_a_daemon_is_a_clear_error(tmp_path: Path) -> None:
    result = mountd("turn", "status", str(tmp_path))
    assert result.returncode == 1
    assert result.stderr.startswith(f"mountd: no control channel for {tmp_path}")
    usage = mountd("turn", "status", str(tmp_path), "--cwd", "/x")
    assert (usage.returncode, usage.stderr) == (2, "mountd: --cwd goes with `turn begin` only\n")
