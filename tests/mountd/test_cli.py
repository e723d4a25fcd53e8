"""The ``mountd`` command line, run as a subprocess; mount tests touch the mount with plain os
calls from this process, never from the daemon's."""

from __future__ import annotations

import errno
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mountd import _registry as registry
from mountd.cli import main
from tests.mountd.mounting import cleared_afterwards

COMMAND = [sys.executable, "-m", "mountd"]


@pytest.fixture(autouse=True)
def private_state(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Each test gets its own state directory, so concurrent runs and real mounts do not mix."""
    runtime = tmp_path_factory.mktemp("runtime")
    runtime.chmod(0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    return runtime


def mountd(
    *args: str, cwd: Path | None = None, timeout: float = 40
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*COMMAND, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )


def mounted_here(path: Path) -> registry.MountEntry | None:
    return registry.mount_at(registry.canonical(path))


def wait_for(predicate: Any, timeout: float = 10.0) -> bool:
    return registry.wait_until(predicate, timeout)


@pytest.fixture
def mnt(tmp_path: Path) -> Iterator[Path]:
    """A mountpoint (not created); whatever a test leaves mounted there is cleared afterwards."""
    path = tmp_path / "mount point"  # mountinfo escapes the space as \040
    with cleared_afterwards(path):
        yield path


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A host directory with a spec that serves it next to an in-memory /tmp."""
    root = tmp_path / "project"
    (root / "src").mkdir(parents=True)
    (root / "src" / "hello.txt").write_text("hello from the host\n")
    (root / "spec.toml").write_text(
        textwrap.dedent(
            """
            [root]
            type = "union"

            [root.mounts."/"]
            type = "dir"
            path = "src"
            read_only = true

            [root.mounts."/tmp"]
            type = "temp"
            files = { "/README.md" = "scratch space" }
            """
        )
    )
    return root


# --- without a mount (in process: no mount, no daemon) ------------------------------------------


def run_main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_help_explains_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_main(capsys, "--help")
    assert code == 0
    for text in ("mountd mount ./mnt", "mountd status", "mountd unmount ./mnt", "Exit status"):
        assert text in out
    code, out, _ = run_main(capsys, "mount", "--help")
    assert code == 0
    for text in (
        "[SPEC] MOUNTPOINT",
        "--daemon",
        "--factory",
        "--allow-other",
        "--read-only",
        "--cache-timeout",
        "writable in-memory /tmp",
        "docs/spec.md",
    ):
        assert text in out
    assert "--ready-fd" not in out
    assert run_main(capsys, "unmount", "--help")[0] == 0
    assert "--json" in run_main(capsys, "status", "--help")[1]


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_main(capsys)
    assert code == 2
    assert "COMMAND" in err
    code, _, err = run_main(capsys, "mount", "--cache-timeout", "soon", "x")
    assert code == 2
    assert "mountd: argument --cache-timeout: not a number of seconds: 'soon'" in err
    assert run_main(capsys, "mount", "a", "b", "c") == (
        2,
        "",
        "mountd: too many arguments: a b c (expected [SPEC] MOUNTPOINT)\n",
    )
    assert run_main(capsys, "mount", "--factory", "m:f", "spec.toml", "mnt") == (
        2,
        "",
        "mountd: give either SPEC or --factory, not both\n",
    )


def test_malformed_spec_fails_before_mounting(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, mnt: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "spec.toml").write_text(
        '[root]\ntype = "union"\n[root.mounts."/tmp"]\ntype = "tmpp"\n'
    )
    assert run_main(capsys, "mount", "--daemon", "spec.toml", str(mnt)) == (
        2,
        "",
        'mountd: spec.toml: root.mounts."/tmp".type: unknown layer type "tmpp" (expected one of:'
        ' temp, dir, empty, union, overlay, host, cow, s3; did you mean "temp"?)\n',
    )
    assert not mnt.exists()  # nothing touched, nothing mounted
    assert mounted_here(mnt) is None


def test_bad_factory_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, mnt: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    (tmp_path / "cli_bad_trees.py").write_text("x = 1\n")
    cases = {
        "nocolon": "mountd: --factory nocolon: expected package.module:function\n",
        "missing_mod:f": "mountd: --factory missing_mod:f: cannot import missing_mod: "
        "No module named 'missing_mod'\n",
        "cli_bad_trees:nope": "mountd: --factory cli_bad_trees:nope: cli_bad_trees has no attribute nope\n",
        "cli_bad_trees:x": "mountd: --factory cli_bad_trees:x: x is not callable\n",
    }
    for reference, message in cases.items():
        assert run_main(capsys, "mount", "--factory", reference, str(mnt)) == (2, "", message)
    assert not mnt.exists()
    sys.modules.pop("cli_bad_trees", None)


def test_unmount_of_nothing_is_a_clear_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert run_main(capsys, "unmount", str(tmp_path)) == (
        1,
        "",
        f"mountd: nothing of ours is mounted at {tmp_path} (see `mountd status`)\n",
    )


def test_status_json_lists_only_our_fstype(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_main(capsys, "status", "--json")
    assert code == 0
    assert {row["mountpoint"] for row in json.loads(out)} == {
        entry.mountpoint for entry in registry.our_mounts()
    }


def status_of(path: Path) -> dict[str, Any] | None:
    result = mountd("status", "--json")
    assert result.returncode == 0, result.stderr
    rows = [
        row for row in json.loads(result.stdout) if row["mountpoint"] == registry.canonical(path)
    ]
    assert len(rows) <= 1
    return rows[0] if rows else None


# --- with a mount ------------------------------------------------------------------------------


def state_of(path: Path) -> registry.MountState | None:
    return registry.read_state(registry.canonical(path))


@pytest.mark.mount
def test_daemon_mount_status_unmount(project: Path, mnt: Path) -> None:
    started = mountd("mount", "--daemon", "spec.toml", str(mnt), cwd=project)
    assert started.returncode == 0, started.stdout + started.stderr
    assert started.stdout.startswith(
        f"mountd: {mnt} is live: union(/ = dir {project}/src (read-only)"
    )
    assert started.stdout.endswith(f"; stop with `mountd unmount {mnt}`\n")
    assert mounted_here(mnt) is not None  # live as soon as the command returned

    assert (mnt / "hello.txt").read_text() == "hello from the host\n"
    assert (mnt / "tmp" / "README.md").read_text() == "scratch space"
    (mnt / "tmp" / "new.txt").write_text("written through the mount")
    assert (mnt / "tmp" / "new.txt").read_text() == "written through the mount"
    assert sorted(os.listdir(mnt / "tmp")) == ["README.md", "new.txt"]

    # The daemon refreshes its counters in the state file about once a second.
    assert wait_for(
        lambda: (
            (state_of(mnt) or registry.MountState("", "", "", 0, 0, 0)).counters.get("read", 0) > 0
        )
    )
    row = status_of(mnt)
    assert row is not None
    assert (row["state"], row["spec"]) == ("live", str(project / "spec.toml"))
    assert row["counters"]["read"] > 0
    pid = row["pid"]
    assert registry.process_alive(pid, None)
    text = mountd("status").stdout
    assert f"{mnt}  live  pid {pid}  up 0m" in text
    assert (
        f"  spec: {project}/spec.toml\n  tree: union(/ = dir {project}/src (read-only), /tmp = temp (1 file))\n  ops:  "
        in text
    )

    second = mountd("mount", "--daemon", "spec.toml", str(mnt), cwd=project)
    assert (second.returncode, second.stderr) == (
        1,
        f"mountd: {mnt} is already mounted (pid {pid}); run `mountd unmount {mnt}` first\n",
    )

    stopped = mountd("unmount", str(mnt))
    assert (stopped.returncode, stopped.stdout) == (
        0,
        f"mountd: unmounted {mnt} (daemon pid {pid} exited)\n",
    )
    assert mounted_here(mnt) is None
    assert not registry.process_alive(pid, None)
    assert state_of(mnt) is None


@pytest.mark.mount
def test_default_root_is_cwd_under_copy_on_write_with_writable_tmp(
    project: Path, mnt: Path
) -> None:
    started = mountd("mount", "--daemon", str(mnt), cwd=project / "src")
    assert started.returncode == 0, started.stdout + started.stderr
    assert started.stdout.startswith(
        f"mountd: {mnt} is live: {project}/src under copy-on-write as its root (changes kept in "
    )
    assert ", with a writable in-memory /tmp (pid " in started.stdout
    assert (mnt / "hello.txt").read_text() == "hello from the host\n"
    (mnt / "new.txt").write_text("in the copy")  # the directory itself is never written
    (mnt / "hello.txt").write_text("changed in the copy")
    assert (mnt / "new.txt").read_text() == "in the copy"
    assert not (project / "src" / "new.txt").exists()
    assert (project / "src" / "hello.txt").read_text() == "hello from the host\n"
    (mnt / "tmp" / "scratch.txt").write_text("scratch")
    assert (mnt / "tmp" / "scratch.txt").read_text() == "scratch"
    assert not (project / "src" / "tmp").exists()
    os.link(mnt / "hello.txt", mnt / "linked.txt")  # copied up, then linked in the copy
    assert os.stat(mnt / "linked.txt").st_ino == os.stat(mnt / "hello.txt").st_ino
    assert (mnt / "linked.txt").read_text() == "changed in the copy"
    # FIFOs and device nodes live in the copy too (made in its upper; devices only emulated).
    os.mkfifo(mnt / "pipe", 0o600)
    os.mknod(mnt / "null", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    assert os.lstat(mnt / "null").st_rdev == os.makedev(1, 3)
    reader = subprocess.Popen(["cat", str(mnt / "pipe")], stdout=subprocess.PIPE)
    with open(mnt / "pipe", "wb") as writer:
        writer.write(b"through the pipe")
    assert reader.communicate(timeout=30)[0] == b"through the pipe"
    assert sorted(os.listdir(project / "src")) == ["hello.txt"]
    assert os.stat(project / "src" / "hello.txt").st_nlink == 1
    state = state_of(mnt)
    assert state is not None
    assert state.spec == "default"
    assert mountd("unmount", str(mnt)).returncode == 0
    assert mounted_here(mnt) is None


@pytest.mark.mount
def test_async_factory_mounted_read_only(tmp_path: Path, mnt: Path) -> None:
    (tmp_path / "trees.py").write_text(
        "import vfs\n\nasync def later():\n    return vfs.temp_fs({'/g.txt': 'from an async factory'})\n"
    )
    started = mountd(
        "mount", "--daemon", "--read-only", "--factory", "trees:later", str(mnt), cwd=tmp_path
    )
    assert started.returncode == 0, started.stdout + started.stderr
    assert (mnt / "g.txt").read_text() == "from an async factory"
    with pytest.raises(OSError) as error:
        (mnt / "g.txt").write_text("a writable tree, mounted read-only")
    assert error.value.errno == errno.EROFS
    state = state_of(mnt)
    assert state is not None
    assert state.spec == "factory trees:later"
    assert mountd("unmount", str(mnt)).returncode == 0


@pytest.mark.mount
def test_daemon_failure_is_reported_with_its_log(tmp_path: Path, mnt: Path) -> None:
    (tmp_path / "trees.py").write_text("def broken():\n    raise ValueError('no tree today')\n")
    result = mountd("mount", "--daemon", "--factory", "trees:broken", str(mnt), cwd=tmp_path)
    assert result.returncode == 1
    assert "ValueError: no tree today" in result.stderr  # the child's traceback, from its log
    assert result.stderr.endswith(
        "mountd: the daemon exited with status 1 before the mount was live; "
        f"nothing is mounted at {mnt}\n"
    )
    assert mounted_here(mnt) is None
    assert not mnt.exists()  # the directory it made for the mount is gone too


@pytest.mark.parametrize("daemon", [False, True], ids=["foreground", "daemon"])
def test_a_failed_mount_leaves_the_mountpoint_as_it_found_it(
    tmp_path: Path, mnt: Path, daemon: bool
) -> None:
    (tmp_path / "trees.py").write_text("def broken():\n    raise ValueError('no tree today')\n")
    flags = ["--daemon"] if daemon else []
    made = mountd("mount", *flags, "--factory", "trees:broken", str(mnt), cwd=tmp_path)
    assert made.returncode == 1
    assert not mnt.exists()
    mnt.mkdir()  # one that was there stays
    kept = mountd("mount", *flags, "--factory", "trees:broken", str(mnt), cwd=tmp_path)
    assert kept.returncode == 1
    assert mnt.is_dir()


@pytest.mark.mount
def test_a_tree_whose_root_cannot_be_read_is_not_mounted(tmp_path: Path, mnt: Path) -> None:
    (tmp_path / "trees.py").write_text(
        "import vfs\n"
        "from vfs.lowlevel import ForwardingTree\n"
        "class Denied(ForwardingTree):\n"
        "    def __init__(self):\n"
        "        self._forward_to(vfs.temp_fs())\n"
        "    def list(self, prefix='/'):\n"
        "        raise PermissionError(13, 'Access Denied')\n"
        "def denied():\n"
        "    return Denied()\n"
    )
    done = mountd("mount", "--factory", "trees:denied", str(mnt), cwd=tmp_path)
    assert (done.returncode, done.stderr) == (
        1,
        "mountd: factory trees:denied: the tree's root cannot be listed: [Errno 13] Access "
        "Denied (for a remote store: its credentials, endpoint and bucket)\n",
    )
    assert not mnt.exists()


def test_a_file_is_not_a_mountpoint(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("data\n")
    result = mountd("mount", str(afile), cwd=tmp_path)
    assert (result.returncode, result.stderr) == (
        1,
        f"mountd: mountpoint is not a directory: {afile}\n",
    )
    assert afile.read_text() == "data\n"


def test_a_directory_that_holds_files_is_not_a_mountpoint(tmp_path: Path) -> None:
    mnt = tmp_path / "full"
    mnt.mkdir()
    (mnt / "mine").write_text("data\n")
    result = mountd("mount", str(mnt), cwd=tmp_path)
    assert (result.returncode, result.stderr) == (
        1,
        f"mountd: {mnt} is not empty: the mount would hide what it holds; mount on an empty "
        "directory\n",
    )
    assert (mnt / "mine").read_text() == "data\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="gives a symlink to another user: needs root")
def test_a_symlink_another_user_planted_in_tmp_is_not_a_mountpoint(
    tmp_path: Path, mnt: Path
) -> None:
    # Root's `mountd mount /tmp/agentroot` over another user's /tmp/agentroot -> /etc/x had
    # made /etc/x and mounted the project there.
    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    protected = tmp_path / "root-only"
    protected.mkdir(mode=0o700)
    planted = shared / "agentroot"
    planted.symlink_to(protected / "made-by-root")
    os.lchown(planted, 4242, 4242)
    result = mountd("mount", "--daemon", str(planted), cwd=tmp_path)
    assert (result.returncode, result.stderr) == (
        1,
        f"mountd: {planted}: {planted} is a symlink another user made in a directory anyone "
        "can write; mount on the directory it leads to by its own path, if you mean it\n",
    )
    assert not (protected / "made-by-root").exists()
    os.lchown(planted, os.geteuid(), os.getegid())  # one of the caller's own is followed
    assert registry.untrusted_link(planted) is None
    os.lchown(planted, 4242, 4242)
    shared.chmod(0o777)  # (the kernel's rule, and this one, cover sticky directories only)
    assert registry.untrusted_link(planted) is None


def test_another_user_s_state_directory_is_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = tmp_path / "runtime"
    (runtime / "agentroot-mountd").mkdir(parents=True)
    os.chown(runtime / "agentroot-mountd", 4242, 4242)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    result = mountd("status")
    assert result.returncode == 1
    assert "is not a directory owned by uid" in result.stderr


def start_foreground(project: Path, mnt: Path, *, ignore_sigint: bool) -> subprocess.Popen[str]:
    """`mountd mount` in the foreground; returns once it printed its start line. With
    ``ignore_sigint`` it starts with SIGINT ignored, as `cmd &` in a non-interactive shell does."""
    prefix = ["sh", "-c", 'trap "" INT; exec "$@"', "sh"] if ignore_sigint else []
    process = subprocess.Popen(
        [*prefix, *COMMAND, "mount", "spec.toml", str(mnt)],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    expected = f"(pid {process.pid}); stop with Ctrl-C or `mountd unmount {mnt}`\n"
    if not (line.startswith(f"mountd: {mnt} is live: ") and line.endswith(expected)):
        process.kill()
        _, err = process.communicate()
        pytest.fail(f"unexpected start line {line!r}; stderr: {err}")
    return process


@pytest.mark.mount
@pytest.mark.parametrize(
    "signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda s: s.name
)
def test_signals_unmount_cleanly(project: Path, mnt: Path, signum: signal.Signals) -> None:
    process = start_foreground(project, mnt, ignore_sigint=signum == signal.SIGINT)
    try:
        assert (mnt / "hello.txt").read_text() == "hello from the host\n"
        assert state_of(mnt) is not None
        process.send_signal(signum)
        out, err = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, err
    assert out == f"mountd: unmounted {mnt} ({signum.name})\n"
    assert mounted_here(mnt) is None
    assert state_of(mnt) is None


@pytest.mark.mount
def test_sigkill_leaves_a_dead_mount_that_unmount_and_mount_clear(project: Path, mnt: Path) -> None:
    def start_and_kill() -> int:
        started = mountd("mount", "--daemon", "spec.toml", str(mnt), cwd=project)
        assert started.returncode == 0, started.stdout + started.stderr
        state = state_of(mnt)
        assert state is not None
        os.kill(state.pid, signal.SIGKILL)
        assert wait_for(lambda: not registry.process_alive(state.pid, None))
        return state.pid

    pid = start_and_kill()
    assert mounted_here(mnt) is not None
    with pytest.raises(OSError) as error:
        os.statvfs(mnt)
    assert error.value.errno in (errno.ENOTCONN, errno.ECONNABORTED)
    text = mountd("status").stdout
    assert f"{mnt}  dead  pid {pid}\n" in text
    assert f"its daemon is gone; clear it with `mountd unmount {mnt}`" in text

    cleared = mountd("unmount", str(mnt))
    assert (cleared.returncode, cleared.stdout) == (0, f"mountd: cleared the dead mount at {mnt}\n")
    assert mounted_here(mnt) is None
    assert state_of(mnt) is None

    start_and_kill()
    again = mountd("mount", "--daemon", "spec.toml", str(mnt), cwd=project)
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stderr == f"mountd: cleared a dead mount at {mnt}\n"
    assert (mnt / "hello.txt").read_text() == "hello from the host\n"
    assert mountd("unmount", str(mnt)).returncode == 0
    assert mounted_here(mnt) is None


@pytest.mark.parametrize(("seconds", "kept"), [("0", False), ("0.5", True), ("300", True)])
def test_a_cache_timeout_of_zero_also_stops_keeping_written_pages(seconds: str, kept: bool) -> None:
    from mountd.cli import _options, _parser

    options = _options(_parser().parse_args(["mount", "--cache-timeout", seconds, "mnt"]))
    assert options.attr_timeout == float(seconds)
    assert options.keep_written_pages is kept
