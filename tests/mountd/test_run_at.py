"""``mountd run --at DIR``: a tree with its own ``bin/``, ``lib/``, ``etc/`` runs at ``DIR``.

Without ``--at`` such a tree is refused (the sandbox needs those names at ``/``), and the refusal
points at the option. With it, the tree is served at ``DIR`` on a read-only root of bubblewrap's
own: the command starts in ``DIR``, the project's ``bin/tool`` and the host's ``/bin/sh`` both
work, the repository policy still guards ``.git/hooks``, and ``--apply`` writes back what changed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mountd._bwrap import Sandbox, bwrap_args
from mountd._identity import SandboxUser
from mountd._sandbox import SystemEntry, sandbox_dir

from .sandbox_trees import git, manifest
from .test_run import mountd_run, private_state

__all__ = ["private_state"]  # the autouse fixture: every run gets its own state directory

ENTRIES = (
    SystemEntry("bin", "symlink", "none", "usr/bin"),
    SystemEntry("etc", "directory", "etc"),
    SystemEntry("lib", "directory", "ro-bind"),
    SystemEntry("proc", "directory", "proc"),
    SystemEntry("tmp", "directory", "tmpfs"),
    SystemEntry("usr", "directory", "ro-bind"),
)


USER = SandboxUser(1000, 1000, 1000, 1000, "agent", switch=False)


def test_bwrap_args_at_a_directory() -> None:
    sandbox = Sandbox("/m", ENTRIES, ("true",), USER, cwd="/work", at="/work")
    argv, command = bwrap_args(sandbox, {}, 9)
    assert argv[:3] == ["--bind", "/m", "/work"]
    assert command == ["true"]
    joined = " ".join(argv)
    assert "--symlink usr/bin /bin" in joined  # made on bubblewrap's root, not answered
    assert "--ro-bind /lib /lib" in joined and "--tmpfs /tmp" in joined
    last_mount = max(i for i, word in enumerate(argv) if word == "--remount-ro")
    assert argv[last_mount : last_mount + 2] == ["--remount-ro", "/"]
    assert argv[argv.index("--chdir") + 1] == "/work"
    at_root, _ = bwrap_args(Sandbox("/m", ENTRIES, ("true",), USER), {}, 9)
    assert "--symlink usr/bin /bin" not in " ".join(at_root)  # the sandbox root answers it
    assert "/" not in [at_root[i + 1] for i, word in enumerate(at_root) if word == "--remount-ro"]
    landlocked = Sandbox("/m", ENTRIES, ("true",), USER, cwd="/work", at="/work", landlock_abi=6)
    assert bwrap_args(landlocked, {}, 9)[1] == [
        "/usr/bin/python3", "-I", "-S", "/etc/agentroot/landlock.py", "--abi", "6",
        "--write", "/work", "--write", "/tmp", "--write", "/dev", "--", "true",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "expected"),
    [("/work", "/work"), ("/srv/a/../b/", "/srv/b"), ("/", "/"), ("/usrx", "/usrx")],
)
def test_sandbox_dir(text: str, expected: str) -> None:
    assert sandbox_dir(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("work", "--at work: give an absolute directory, e.g. --at /work"),
        (
            "/usr/src",
            "--at /usr/src: inside /usr, which the sandbox provides; choose a directory "
            "elsewhere, e.g. --at /work",
        ),
        (
            "/tmp/x",
            "--at /tmp/x: inside /tmp, which the sandbox provides; choose a directory "
            "elsewhere, e.g. --at /work",
        ),
        (
            "/x/../lib",
            "--at /x/../lib: inside /lib, which the sandbox provides; choose a directory "
            "elsewhere, e.g. --at /work",
        ),
    ],
)
def test_sandbox_dir_refusals(text: str, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        sandbox_dir(text)
    assert str(caught.value) == message


def system_like_repo(root: Path) -> Path:
    """A repository whose root holds bin/, lib/ and etc/, as many real projects do."""
    (root / "bin").mkdir(parents=True)
    (root / "lib").mkdir()
    (root / "etc").mkdir()
    tool = root / "bin" / "tool"
    tool.write_text('#!/bin/sh\necho "tool: $(cat lib/greeting.txt)"\n')
    tool.chmod(0o755)
    (root / "lib" / "greeting.txt").write_text("hello\n")
    (root / "etc" / "app.conf").write_text("level = 1\n")
    (root / "README.md").write_text("# tools\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "initial")
    return root


AGENT = r"""
set -e
test "$(pwd)" = /work
./bin/tool
sed -i 's/level = 1/level = 2/' etc/app.conf
echo world > lib/greeting.txt
rm README.md
if echo pwned > .git/hooks/pre-commit; then exit 9; fi
if echo lost > /outside.txt; then exit 8; fi
git add -A
git commit -q -m "agent at /work"
./bin/tool
ls -A /
"""


@pytest.mark.mount
def test_run_at_a_directory_serves_a_tree_with_system_names(tmp_path: Path) -> None:
    repo = system_like_repo(tmp_path / "repo")
    refused = mountd_run("--", "true", cwd=repo)
    assert refused.returncode == 2
    assert refused.stderr == (
        "mountd: the tree holds /bin, /etc, /lib at its root, which the sandbox needs for the "
        "host's /bin, /etc, /lib; run it at a directory of its own instead: `mountd run --at "
        "/work ...` (or serve it below / with a spec's union mount)\n"
    )
    before = manifest(repo)
    done = mountd_run("--at", "/work", "--apply", "--", "sh", "-c", AGENT, cwd=repo)
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    assert out[:2] == ["tool: hello", "tool: world"]
    assert "work" in out[2:] and "README.md" not in out[2:] and "outside.txt" not in out[2:]
    summary = done.stderr[done.stderr.index("mountd run: the command") :].splitlines()
    assert summary[1:4] == ["  D /README.md", "  M /etc/app.conf", "  M /lib/greeting.txt"]
    assert re.fullmatch(r"  /\.git: \d+ changes \(git's own files\)", summary[4])
    assert "  open /.git/hooks/pre-commit" in summary
    after = manifest(repo)
    assert (repo / "etc" / "app.conf").read_text() == "level = 2\n"
    assert not (repo / "README.md").exists()
    assert after["/bin/tool"] == before["/bin/tool"]
    assert git(repo, "log", "--format=%s") == "agent at /work\ninitial\n"
    assert git(repo, "status", "--porcelain") == ""
    assert not (repo / ".git" / "hooks" / "pre-commit").exists()


@pytest.mark.mount
def test_options_after_the_spec(tmp_path: Path) -> None:
    """``--at DIR`` and ``--audit FILE`` take their values wherever they stand before ``--``."""
    repo = system_like_repo(tmp_path / "repo")
    spec = tmp_path / "spec.toml"
    spec.write_text(f'[root]\ntype = "cow"\nlower = {{ type = "dir", path = "{repo}" }}\n')
    audit = tmp_path / "audit.jsonl"
    done = mountd_run(
        str(spec),
        "--at",
        "/srv/p",
        "--audit",
        str(audit),
        "--",
        "sh",
        "-c",
        "pwd; touch x",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "/srv/p\n"
    assert "  A /x" in done.stderr
    assert audit.exists()
    usage = mountd_run(str(spec), "--at", "--", "true", cwd=tmp_path)
    assert (usage.returncode, usage.stderr) == (
        2,
        "mountd: argument --at: expected one argument\n",
    )
