"""Reviewing a mount's copy-on-write tree while it is mounted: the ``cow`` control requests
(``Controller`` without a socket, trio and asyncio) and ``mountd changes|diff|apply`` against real
daemons over real git repositories (partial and whole apply, protected paths, conflicts, a tree
without a copy-on-write layer, the kernel's view after apply)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import anyio
import pytest

import vfs
from mountd import _registry as registry
from mountd._control import Controller
from mountd.cli import main
from tests.mountd.mounting import cleared_afterwards
from vfs._cow import cow_fs
from vfs.turns import turn_root

from .sandbox_trees import git, manifest

BACKENDS = ("trio", "asyncio")
COMMAND = [sys.executable, "-m", "mountd"]
CONFIG = "git's config names commands git runs (core.hooksPath, core.fsmonitor, aliases, filters)"
HOOKS = "git's hooks: git runs what is there"


def run(backend: str, fn: Callable[[], Awaitable[None]]) -> None:
    anyio.run(fn, backend=backend)


# --- the control requests, without a socket -----------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_cow_changes_diff_and_apply(backend: str) -> None:
    async def body() -> None:
        lower = vfs.temp_fs(
            {"/a.txt": "a\n", "/b.txt": "b\n", "/d.txt": "d\n", "/run.sh": "echo\n"}
        )
        await lower.write("/.git/config", "[core]\n")
        cow = cow_fs(lower)
        root = turn_root(cow)
        controller = Controller(root, "/mnt")
        await root.write("/a.txt", "A\n")
        await root.rename("/b.txt", "/c.txt")
        await root.delete("/d.txt")
        await cow.setattr("/run.sh", mode=0o755)
        await root.write("/.git/config", "[core]\n\thooksPath = /x\n")  # no policy here

        listed = await controller.handle({"op": "cow", "action": "changes"})
        assert listed == {
            "ok": True,
            "cows": [{"prefix": "/", "lower": repr(lower)}],
            "changes": [
                change("/.git/config", "modified", refused=CONFIG),
                change("/a.txt", "modified"),
                change("/c.txt", "renamed", old="/b.txt"),
                change("/d.txt", "deleted"),
                change("/run.sh", "mode_changed", mode={"old": "0644", "new": "0755"}),
            ],
            "git_state": [],
        }
        diff = await controller.handle({"op": "cow", "action": "diff", "paths": ["/a.txt"]})
        assert diff == {
            "ok": True,
            "diff": "diff --git a/a.txt b/a.txt\n--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-a\n+A\n",
            "refused": [],
        }
        whole = await controller.handle({"op": "cow", "action": "diff"})
        assert whole["refused"] == [refusal("/.git/config", "modified", CONFIG)]
        everything = (await controller.handle({"op": "cow", "action": "diff"}))["diff"]
        assert "a/.git" not in everything  # git's own files are left out unless named
        assert "rename from b.txt\nrename to c.txt\n" in everything
        assert "old mode 100644\nnew mode 100755\n" in everything

        seen: list[vfs.Change] = []
        root.watch(seen.append)
        done = await controller.handle({"op": "cow", "action": "apply", "paths": ["/a.txt"]})
        assert done == {
            "ok": True,
            "applied": [applied("/a.txt", "modified")],
            "refused": [],
            "set_id_cleared": [],
        }
        assert await lower.read("/a.txt") == "A\n"
        assert (await lower.stat("/c.txt")).kind == "missing"  # not chosen
        # The view's bytes are the same; its times are the lower's now: watchers hear so.
        assert [(c.path, c.kind) for c in seen] == [("/a.txt", "metadata")]
        left = await controller.handle({"op": "cow", "action": "changes"})
        assert "/a.txt" not in [c["path"] for c in left["changes"]]

        refused = await controller.handle(
            {"op": "cow", "action": "apply", "paths": ["/.git/config"]}
        )
        assert refused == {
            "ok": False,
            "error": f"not applied: /.git/config is refused: {CONFIG}",
            "refused": [refusal("/.git/config", "modified", CONFIG)],
        }
        assert await lower.read("/.git/config") == "[core]\n"
        rest = await controller.handle({"op": "cow", "action": "apply"})
        assert rest == {
            "ok": True,
            "applied": [
                applied("/c.txt", "renamed", old="/b.txt"),
                applied("/d.txt", "deleted"),
                applied("/run.sh", "mode_changed"),
            ],
            "refused": [refusal("/.git/config", "modified", CONFIG)],
            "set_id_cleared": [],
        }
        assert [e.path async for e in lower.list("/")] == ["/.git", "/a.txt", "/c.txt", "/run.sh"]
        assert (await vfs.posix_view(lower).lstat("/run.sh")).mode == 0o755
        assert await lower.read("/.git/config") == "[core]\n"
        left = await controller.handle({"op": "cow", "action": "changes"})
        assert left["changes"] == [change("/.git/config", "modified", refused=CONFIG)]

        # A conflict: the lower changed after the copy-up. Nothing is written.
        await root.write("/c.txt", "from the agent\n")
        await root.write("/n.txt", "new\n")
        await lower.write("/c.txt", "from the host\n")
        conflict = await controller.handle({"op": "cow", "action": "apply"})
        assert conflict == {
            "ok": False,
            "error": "nothing applied: conflict: /c.txt changed in the lower tree since it was "
            "copied up (1 conflicting path)",
            "conflicts": ["/c.txt"],
            "applied": [],
        }
        assert await lower.read("/c.txt") == "from the host\n"
        assert (await lower.stat("/n.txt")).kind == "missing"

        # Files open for writing through the mount are not applied (nor anything with them).
        busy = Controller(root, "/mnt", open_for_writing=lambda: ["/n.txt", "/other"])
        assert await busy.handle({"op": "cow", "action": "apply", "paths": ["/n.txt"]}) == {
            "ok": False,
            "error": "nothing applied: /n.txt is open for writing through the mount; "
            "close it first",
            "busy": ["/n.txt"],
        }
        assert (await lower.stat("/n.txt")).kind == "missing"

    run(backend, body)


def change(
    path: str,
    kind: str,
    *,
    old: str | None = None,
    entry: str = "file",
    mode: dict[str, str] | None = None,
    refused: str | None = None,
    target: str | None = None,
) -> dict[str, object]:
    """A change as ``changes`` lists it."""
    listed = {**applied(path, kind, old=old, entry=entry), "mode": mode, "refused": refused}
    return {**listed, "target": target}


def refusal(
    path: str, kind: str, reason: str, *, old: str | None = None, entry: str = "file"
) -> dict[str, object]:
    """A refused change as ``apply`` and ``diff`` list it."""
    return {**applied(path, kind, old=old, entry=entry), "reason": reason}


def applied(
    path: str, kind: str, *, old: str | None = None, entry: str = "file"
) -> dict[str, object]:
    """A change as ``apply`` lists it."""
    return {"path": path, "kind": kind, "entry": entry, "from": old}


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_cow_below_the_root_speaks_the_served_trees_paths(backend: str, tmp_path: Path) -> None:
    async def body() -> None:
        lower = vfs.temp_fs({"/a": "a\n"})
        tree = vfs.union_fs({"/": vfs.temp_fs(), "/work": cow_fs(lower)})
        controller = Controller(tree, "/mnt")
        await tree.write("/work/a", "A\n")
        await tree.write("/work/b", "b\n")
        await tree.write("/elsewhere", "not in a cow\n")

        async def paths(action: str, chosen: list[str] | None) -> list[str]:
            request: dict[str, object] = {"op": "cow", "action": action}
            if chosen is not None:
                request["paths"] = chosen
            reply = await controller.handle(request)
            assert reply["ok"], reply
            key = "changes" if action == "changes" else "applied"
            return [c["path"] for c in reply[key]]

        assert await paths("changes", None) == ["/work/a", "/work/b"]
        assert await paths("changes", ["/"]) == ["/work/a", "/work/b"]  # above the prefix: all
        assert await paths("changes", ["/work/b/"]) == ["/work/b"]
        assert await paths("changes", ["/elsewhere"]) == []
        diff = await controller.handle({"op": "cow", "action": "diff", "paths": ["/work/b"]})
        assert diff["diff"] == (  # in the layer's own coordinates, as git apply takes it there
            "diff --git a/b b/b\nnew file mode 100644\n--- /dev/null\n+++ b/b\n@@ -0,0 +1 @@\n+b\n"
        )
        assert await paths("apply", ["/work/a"]) == ["/work/a"]
        assert await lower.read("/a") == "A\n"
        assert await paths("apply", ["/elsewhere"]) == []
        assert await paths("apply", None) == ["/work/b"]

        # A read-only lower cannot take the changes: the error says so, nothing is written.
        (tmp_path / "f").write_text("f\n")
        stuck = cow_fs(vfs.dir_fs(tmp_path, read_only=True))
        await stuck.write("/f", "F\n")
        reply = await Controller(stuck, "/ro").handle({"op": "cow", "action": "apply"})
        assert reply == {
            "ok": False,
            "error": f"nothing applied: the lower tree dir_fs({str(tmp_path)!r}, read_only=True) "
            "is read-only (serve it writable to apply)",
            "applied": [],
        }
        assert (tmp_path / "f").read_text() == "f\n"

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_cow_requests_answer_errors(backend: str) -> None:
    async def body() -> None:
        controller = Controller(turn_root(cow_fs(vfs.temp_fs())), "/mnt")
        cases: list[tuple[dict[str, object], str]] = [
            (
                {"op": "cow", "action": "undo"},
                "unknown cow action 'undo' (expected changes, diff or apply)",
            ),
            (
                {"op": "cow", "action": "diff", "paths": "/a"},
                "paths must be a list of absolute paths, not '/a'",
            ),
            (
                {"op": "cow", "action": "apply", "paths": ["a"]},
                "paths must be a list of absolute paths, not ['a']",
            ),
            (
                {"op": "cow", "action": "apply", "paths": ["/a\0b"]},
                "invalid path: /a\\0b: path contains a NUL byte",
            ),
        ]
        for request, error in cases:
            assert await controller.handle(request) == {"ok": False, "error": error}
        plain = Controller(turn_root(vfs.temp_fs()), "/plain")
        assert await plain.handle({"op": "cow", "action": "changes"}) == {
            "ok": False,
            "error": "/plain has no copy-on-write layer: its writes go straight to the tree, so "
            "there is nothing to review (the default `mountd mount` has one, and a spec gets "
            'one with type = "cow")',
        }

    run(backend, body)


def test_review_commands_without_a_daemon(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "mountd changes ./mnt" in out and "mountd apply ./mnt [PATH...]" in out
    assert main(["apply", "--help"]) == 0
    out = capsys.readouterr().out
    assert "inside any\n.git (nested repositories too) it writes only what git writes" in out
    assert "never a set-uid or set-gid bit" in out and "nothing is written (exit 1)" in out
    where = registry.canonical(tmp_path / "nothing")
    assert main(["changes", str(tmp_path / "nothing")]) == 1
    assert capsys.readouterr().err == (
        f"mountd: no control channel for {where} (is it served by `mountd mount`? "
        "see `mountd status`)\n"
    )
    assert main(["diff", "--json", "x"]) == 2  # diff has no --json
    assert main(["apply", "x", ""]) == 2
    assert capsys.readouterr().err.endswith("mountd: an empty PATH\n")


# --- through real mounts -------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def private_state(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each test gets its own state directory, so concurrent runs and real mounts do not mix."""
    runtime = tmp_path_factory.mktemp("runtime")
    runtime.chmod(0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))


def mountd(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*COMMAND, *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


@pytest.fixture
def mnt(tmp_path: Path) -> Iterator[Path]:
    """A mountpoint (not created); whatever a test leaves mounted there is cleared afterwards."""
    path = tmp_path / "mnt"
    with cleared_afterwards(path):
        yield path


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A small git repository: a few files, a script, a directory; one commit."""
    root = tmp_path / "repo"
    (root / "sub").mkdir(parents=True)
    for name in ("a", "b", "d"):
        (root / f"{name}.txt").write_text(f"{name}\n")
    (root / "sub" / "e.txt").write_text("e\n")
    (root / "run.sh").write_text("echo\n")
    for path in (root / "a.txt", root / "b.txt", root / "d.txt", root / "run.sh"):
        path.chmod(0o644)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "initial")
    return root


Review = Callable[..., "subprocess.CompletedProcess[str]"]


@pytest.fixture
def review(capsys: pytest.CaptureFixture[str]) -> Review:
    """``mountd changes|diff|apply`` in this process (a control-channel client; the daemon is
    another process), as a completed process."""

    def call(*args: str) -> subprocess.CompletedProcess[str]:
        code = main(list(args))
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(list(args), code, out, err)

    return call


def ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def view(root: Path) -> dict[str, list[object]]:
    """``manifest`` of a tree, without the mount's per-turn ``/tmp``."""
    return {k: v for k, v in manifest(root).items() if k != "/tmp" and not k.startswith("/tmp/")}


DIFF = """\
diff --git a/a.txt b/a.txt
--- a/a.txt
+++ b/a.txt
@@ -1 +1 @@
-a
+A
diff --git a/b.txt b/c.txt
rename from b.txt
rename to c.txt
diff --git a/d.txt b/d.txt
deleted file mode 100644
--- a/d.txt
+++ /dev/null
@@ -1 +0,0 @@
-d
diff --git a/dir/x b/dir/x
new file mode 100644
--- /dev/null
+++ b/dir/x
@@ -0,0 +1 @@
+x
diff --git a/new.txt b/new.txt
new file mode 100644
--- /dev/null
+++ b/new.txt
@@ -0,0 +1 @@
+new
diff --git a/run.sh b/run.sh
old mode 100644
new mode 100755
"""


@pytest.mark.mount
def test_review_and_apply_the_default_mount(repo: Path, mnt: Path, review: Review) -> None:
    ok(mountd("mount", "--daemon", str(mnt), cwd=repo))
    (mnt / "a.txt").write_text("A\n")
    (mnt / "b.txt").rename(mnt / "c.txt")
    (mnt / "d.txt").unlink()
    (mnt / "run.sh").chmod(0o755)
    (mnt / "new.txt").write_text("new\n")
    (mnt / "dir").mkdir()
    (mnt / "dir" / "x").write_text("x\n")
    git(mnt, "add", "new.txt")  # git's own files change too (index, objects)
    before = view(repo)

    listed = ok(review("changes", str(mnt))).stdout
    assert re.fullmatch(
        "M /a.txt\nR /c.txt \\(from /b.txt\\)\nD /d.txt\nA /dir/\nA /dir/x\nA /new.txt\n"
        "m /run.sh \\(mode 0644 -> 0755\\)\n/.git: [0-9]+ changes \\(git's own files\\)\n"
        "  index: stages 1 path: new.txt\n",
        listed,
    ), listed
    as_json = json.loads(ok(review("changes", "--json", str(mnt))).stdout)
    assert as_json["cows"] == [{"prefix": "/", "lower": f"dir_fs({str(repo)!r})"}]
    renamed = {
        "path": "/c.txt",
        "kind": "renamed",
        "entry": "file",
        "from": "/b.txt",
        "mode": None,
        "refused": None,
        "target": None,
    }
    assert renamed in as_json["changes"]
    assert "/.git/index" in [c["path"] for c in as_json["changes"]]
    diff = ok(review("diff", str(mnt))).stdout
    assert diff == DIFF
    checked = subprocess.run(
        ["git", "apply", "--check", "-"], cwd=repo, input=diff, capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stderr  # git takes it as it is
    assert ok(review("diff", str(mnt), "a.txt")).stdout == DIFF[: DIFF.index("diff --git a/b")]
    assert view(repo) == before  # reviewing writes nothing

    # A path with no change (a typo) applies nothing, and says so.
    typo = review("apply", str(mnt), "a.txt", "a.tx")
    assert typo.returncode != 0
    assert typo.stderr == (
        f"mountd: no change at /a.tx (see `mountd changes {mnt}`): nothing applied\n"
    )
    assert view(repo) == before

    # Apply one path (as the tree names it), then a directory through the mountpoint.
    done = ok(review("apply", str(mnt), "a.txt"))
    assert done.stdout == f"mountd: applied 1 change to the directory under {mnt}\n  M /a.txt\n"
    assert (repo / "a.txt").read_text() == "A\n"
    assert not (repo / "c.txt").exists() and (repo / "b.txt").exists()
    # The kernel serves the applied file's attributes as the host has them now (not cached).
    assert (mnt / "a.txt").stat().st_mtime_ns == (repo / "a.txt").stat().st_mtime_ns
    assert "/a.txt" not in ok(review("changes", str(mnt))).stdout
    done = ok(review("apply", str(mnt), str(mnt / "dir")))
    assert done.stdout.endswith("  A /dir/\n  A /dir/x\n")
    assert (repo / "dir" / "x").read_text() == "x\n"

    # Then the rest: the host is what the mount shows, and nothing is left to review.
    done = ok(review("apply", str(mnt)))
    assert done.stdout.startswith("mountd: applied ") and done.stderr == ""
    assert view(repo) == view(mnt)
    assert ok(review("changes", str(mnt))).stdout == "mountd: nothing changed\n"
    assert ok(review("diff", str(mnt))).stdout == ""
    status = git(repo, "--no-optional-locks", "status", "--porcelain")
    assert status == git(mnt, "--no-optional-locks", "status", "--porcelain")  # (no index refresh)
    assert "A  new.txt" in status

    # The mount goes on: new writes are changes again, and apply over applied paths works.
    (mnt / "c.txt").write_text("c again\n")
    assert ok(review("changes", str(mnt))).stdout == "M /c.txt\n"
    ok(review("apply", str(mnt), "/c.txt"))
    assert (repo / "c.txt").read_text() == "c again\n"

    # A file open for writing through the mount is not applied: its copy would be dropped.
    with (mnt / "c.txt").open("a") as handle:
        handle.write("more\n")
        handle.flush()
        refused = review("apply", str(mnt))
        assert (refused.returncode, refused.stderr) == (
            1,
            "mountd: nothing applied: /c.txt is open for writing through the mount; close it first\n",
        )
        assert (repo / "c.txt").read_text() == "c again\n"
    ok(review("apply", str(mnt)))
    assert (repo / "c.txt").read_text() == "c again\nmore\n"

    # A conflict: the host changed a file after the mount copied it. Nothing is written.
    (mnt / "a.txt").write_text("from the agent\n")
    (mnt / "n2.txt").write_text("new too\n")
    (repo / "a.txt").write_text("from the host\n")
    before = view(repo)
    refused = review("apply", str(mnt))
    assert (refused.returncode, refused.stdout, refused.stderr) == (
        1,
        "",
        "mountd: nothing applied: conflict: /a.txt changed in the lower tree since it was "
        "copied up (1 conflicting path)\n",
    )
    assert view(repo) == before
    assert ok(review("changes", str(mnt))).stdout == "M /a.txt\nA /n2.txt\n"
    assert (mnt / "a.txt").read_text() == "from the agent\n"
    ok(mountd("unmount", str(mnt)))


@pytest.mark.mount
def test_apply_never_writes_protected_paths(
    repo: Path, mnt: Path, tmp_path: Path, review: Review
) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_text(
        textwrap.dedent(
            """
            [root]
            type = "union"

            [root.mounts."/"]
            type = "temp"

            [root.mounts."/work"]
            type = "cow"
            lower = { type = "dir", path = "repo" }
            """
        )
    )
    ok(mountd("mount", "--daemon", str(spec), str(mnt), cwd=tmp_path))
    work = mnt / "work"
    config = (repo / ".git" / "config").read_text()
    (work / ".git" / "config").write_text(config + "[core]\n\thooksPath = /tmp/evil\n")
    (work / ".git" / "hooks" / "pre-commit").write_text("#!/bin/sh\nexit 0\n")
    (work / "a.txt").write_text("A\n")
    assert ok(review("changes", str(mnt))).stdout == (
        f"M /work/.git/config (refused: {CONFIG})\n"
        f"A /work/.git/hooks/pre-commit (refused: {HOOKS})\n"
        "M /work/a.txt\n"
    )

    refused = review("apply", str(mnt), "/work/.git/config")
    assert (refused.returncode, refused.stderr) == (
        1,
        f"mountd: not applied: /work/.git/config is refused: {CONFIG}\n",
    )
    refused = review("apply", str(mnt), str(work / ".git" / "hooks"))
    assert (refused.returncode, refused.stderr) == (
        1,
        f"mountd: not applied: /work/.git/hooks/pre-commit is refused: {HOOKS}\n",
    )
    done = ok(review("apply", str(mnt)))
    assert (
        done.stdout == f"mountd: applied 1 change to the directory under {mnt}\n  M /work/a.txt\n"
    )
    assert done.stderr == (
        "mountd: not applied (refused):\n"
        f"  M /work/.git/config: {CONFIG}\n"
        f"  A /work/.git/hooks/pre-commit: {HOOKS}\n"
    )
    assert (repo / "a.txt").read_text() == "A\n"
    assert (repo / ".git" / "config").read_text() == config
    assert not (repo / ".git" / "hooks" / "pre-commit").exists()
    kept = json.loads(ok(review("changes", "--json", str(mnt))).stdout)["changes"]
    assert [c["path"] for c in kept] == ["/work/.git/config", "/work/.git/hooks/pre-commit"]
    ok(mountd("unmount", str(mnt)))


@pytest.mark.mount
def test_a_tree_without_copy_on_write_answers_an_error(
    repo: Path, mnt: Path, tmp_path: Path, review: Review
) -> None:
    spec = tmp_path / "plain.toml"
    spec.write_text('[root]\ntype = "dir"\npath = "repo"\n')
    ok(mountd("mount", "--daemon", str(spec), str(mnt), cwd=tmp_path))
    where = registry.canonical(mnt)
    for command in ("changes", "diff", "apply"):
        refused = review(command, str(mnt))
        assert (refused.returncode, refused.stdout, refused.stderr) == (
            1,
            "",
            f"mountd: {where} has no copy-on-write layer: its writes go straight to the tree, so "
            "there is nothing to review (the default `mountd mount` has one, and a spec gets one "
            'with type = "cow")\n',
        )
    ok(mountd("unmount", str(mnt)))
