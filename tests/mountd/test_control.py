"""The control channel without a mount: ``Controller`` answers (trio and asyncio), and the JSON-line
socket server and client talk to each other (trio)."""

from __future__ import annotations

import os
import stat
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
import trio

import vfs
from mountd import _control as control
from mountd._control import ControlError, Controller
from vfs.turns import turn_root

BACKENDS = ("trio", "asyncio")


def run(backend: str, fn: Callable[[], Awaitable[None]]) -> None:
    anyio.run(fn, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_turn_begin_end_status_and_changes(backend: str, tmp_path: Path) -> None:
    async def body() -> None:
        origin = object()  # stands for the Mount
        root = turn_root(vfs.temp_fs({"/a.txt": "a"}))
        controller = Controller(root, "/mnt", origin=origin, counters={"lookup": 3})
        controller.start()
        status = await controller.handle({"op": "status"})
        assert status == {
            "ok": True,
            "mountpoint": "/mnt",
            "pid": os.getpid(),
            "turns": True,
            "turn": None,
            "turns_begun": 0,
            "counters": {"lookup": 3},
            "tmp": [],
            "checkpoints": {"kept": 0, "last": None},
        }
        begun = await controller.handle({"op": "turn", "action": "begin", "cwd": str(tmp_path)})
        assert begun["ok"] and begun["turn"]["number"] == 1 and begun["turn"]["active"]
        assert begun["turn"]["cwd"] == str(tmp_path)
        await root.write("/tmp/api.txt", "x")
        token = vfs.change_origin.set(origin)
        try:
            await root.write("/a.txt", "through the mount")
        finally:
            vfs.change_origin.reset(token)
        status = await controller.handle({"op": "status"})
        assert status["turn"]["number"] == 1 and status["tmp"] == ["/tmp/api.txt"]
        changes = await controller.handle({"op": "changes"})
        assert changes["ok"] and changes["turn"] == 1 and not changes["truncated"]
        assert changes["changes"] == [
            {"path": "/a.txt", "kinds": ["content"], "via": ["mount"]},
            {"path": "/tmp/api.txt", "kinds": ["entry"], "via": ["api"]},
        ]
        ended = await controller.handle({"op": "turn", "action": "end"})
        assert ended["ok"] and ended["turn"] == {**begun["turn"], "active": False}
        assert ended["checkpoint"]["number"] == 1 and ended["checkpoint"]["turn"] == 1
        # The first: everything is new in it; /tmp is no part of it.
        assert ended["checkpoint"]["summary"] == {
            "added": 1,
            "modified": 0,
            "deleted": 0,
            "bytes": len("through the mount"),
        }
        assert (await controller.handle({"op": "status"}))["tmp"] == []
        again = await controller.handle({"op": "turn", "action": "begin", "cwd": str(tmp_path)})
        assert again["turn"]["number"] == 2
        assert (await controller.handle({"op": "changes"}))["changes"] == []  # since this turn
        controller.close()

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_requests_answer_errors(backend: str) -> None:
    async def body() -> None:
        controller = Controller(turn_root(vfs.temp_fs()), "/mnt")
        cases: list[tuple[Any, str]] = [
            ([], "a request is a JSON object with an 'op'"),
            (
                {"op": "dance"},
                "unknown op 'dance' (expected turn, status, changes, adopt, cow or checkpoint)",
            ),
            ({"op": "checkpoint", "action": "rewind", "number": 9}, "no checkpoint 9"),
            (
                {"op": "checkpoint", "action": "rewind", "number": "1"},
                "number is a checkpoint number, not '1'",
            ),
            ({"op": "checkpoint", "label": 3}, "a label is a non-empty string, not 3"),
            (
                {"op": "checkpoint", "action": "undo"},
                "unknown checkpoint action 'undo' (expected take, list, diff, rewind, fork or prune)",
            ),
            (
                {"op": "turn", "action": "pause"},
                "unknown turn action 'pause' (expected begin or end)",
            ),
            ({"op": "turn", "action": "end"}, "no turn is active"),
            (
                {"op": "turn", "action": "begin", "cwd": "rel"},
                "cwd must be an absolute path, not 'rel'",
            ),
            (
                {"op": "adopt", "tool": "webFetch", "result": "x"},
                "no turn is active: begin one first",
            ),
        ]
        for request, error in cases:
            assert await controller.handle(request) == {"ok": False, "error": error}
        await controller.handle({"op": "turn", "action": "begin"})
        assert await controller.handle({"op": "turn", "action": "begin"}) == {
            "ok": False,
            "error": "turn 1 is active; end it first",
        }
        assert await controller.handle({"op": "adopt", "result": "x"}) == {
            "ok": False,
            "error": "adopt needs 'tool' (webSearch or webFetch) and 'result'",
        }

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_tree_without_turns_has_status_and_changes_only(backend: str) -> None:
    async def body() -> None:
        tree = vfs.temp_fs()
        controller = Controller(tree, "/mnt")
        controller.start()
        status = await controller.handle({"op": "status"})
        assert status["turns"] is False and status["turn"] is None and "tmp" not in status
        await tree.write("/x", "y")
        changes = await controller.handle({"op": "changes"})
        assert changes["changes"] == [{"path": "/x", "kinds": ["entry"], "via": ["api"]}]
        refused = await controller.handle({"op": "turn", "action": "begin"})
        assert refused == {
            "ok": False,
            "error": "/mnt has no turns: serve it with `mountd mount --turns` "
            "(the default mount has them)",
        }

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_request_the_tree_fails_answers_the_error_and_the_next_is_served(backend: str) -> None:
    async def body() -> None:
        tree = vfs.temp_fs()
        await tree.write("/f", "f")

        async def fail(*args: object, **kwargs: object) -> object:
            raise OSError(24, "Too many open files")

        tree.checkpoints = fail  # type: ignore[method-assign]
        controller = Controller(tree, "/mnt")
        controller.start()
        reply = await controller.handle({"op": "checkpoint", "action": "list"})
        assert reply == {"ok": False, "error": "checkpoint failed: [Errno 24] Too many open files"}
        taken = await controller.handle({"op": "checkpoint"})
        assert taken["ok"] is True and taken["checkpoint"]["number"] == 1

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_change_log_is_capped(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(control, "MAX_CHANGES", 3)

    async def body() -> None:
        tree = vfs.temp_fs()
        controller = Controller(tree, "/mnt")
        controller.start()
        for n in range(5):
            await tree.write(f"/f{n}", "x")
        changes = await controller.handle({"op": "changes"})
        assert [c["path"] for c in changes["changes"]] == ["/f0", "/f1", "/f2"]
        assert changes["truncated"] is True

    run(backend, body)


def test_the_socket_speaks_json_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    mountpoint = "/some/mount"
    path = control.socket_path(mountpoint)
    path.parent.mkdir(mode=0o700)
    path.touch()  # a leftover that is not a socket is refused, never replaced

    async def main() -> None:
        root = turn_root(vfs.temp_fs())
        with pytest.raises(OSError, match="not a socket, refusing to replace it"):
            await control.serve_control(Controller(root, mountpoint), path)
        path.unlink()
        async with trio.open_nursery() as nursery:
            served = await nursery.start(control.serve_control, Controller(root, mountpoint), path)
            assert served == path
            assert stat.S_IMODE(path.stat().st_mode) == 0o600

            def client() -> None:
                assert control.request(mountpoint, {"op": "turn", "action": "begin"})["ok"]
                assert control.request(mountpoint, {"op": "status"})["turn"]["number"] == 1
                import socket

                with socket.socket(socket.AF_UNIX) as raw, control._address(path) as address:
                    raw.connect(address)
                    raw.sendall(b'not json\n{"op": "status"}\n\n')
                    reader = raw.makefile("rb")
                    assert reader.readline().startswith(b'{"ok": false, "error": "not JSON: ')
                    assert b'"ok": true' in reader.readline()

            await trio.to_thread.run_sync(client)
            nursery.cancel_scope.cancel()
        assert not path.exists()  # removed on the way out

    trio.run(main)
    with pytest.raises(ControlError, match="no control channel for /some/mount"):
        control.request(mountpoint, {"op": "status"})


def test_a_socket_path_longer_than_sun_path_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = tmp_path / ("x" * 120)
    (runtime / "agentroot-mountd").mkdir(parents=True, mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    path = control.socket_path("/m")
    assert len(os.fsencode(path)) > control.MAX_SOCKET_PATH

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(control.serve_control, Controller(vfs.temp_fs(), "/m"), path)
            assert stat.S_ISSOCK(path.stat().st_mode)
            reply = await trio.to_thread.run_sync(control.request, "/m", {"op": "status"})
            assert reply["ok"] and reply["mountpoint"] == "/m"
            nursery.cancel_scope.cancel()

    trio.run(main)
