"""Trees and repositories for the sandbox tests (``test_run.py``), importable by mount children.

``git_repo`` makes a real git repository on the host; ``manifest`` describes a directory (kind,
mode, content hash or link target of every entry) so two trees can be compared byte for byte;
``repository_in_memory`` is a mount builder: a host repository copied into ``temp_fs``, under the
repository policy, audited into a JSON-lines file; ``default_mount`` builds the tree ``mountd
mount`` serves by default (``default_mount_recording_opens``: and records which files the mount
opened).
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import vfs
from vfs._audit import AuditLog, audited_fs
from vfs._forward import ForwardingTree, Verb
from vfs._policy import policy_fs, repository_policy

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Agent",
    "GIT_AUTHOR_EMAIL": "agent@example.invalid",
    "GIT_COMMITTER_NAME": "Agent",
    "GIT_COMMITTER_EMAIL": "agent@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
}

# Run inside the sandbox by /usr/bin/python3: the same description as ``manifest`` below.
MANIFEST_SCRIPT = r"""
import hashlib, json, os, stat, sys
out = {}
for dirpath, dirnames, filenames in os.walk("."):
    for name in dirnames + filenames:
        path = os.path.join(dirpath, name)
        rel = "/" + os.path.relpath(path, ".")
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            out[rel] = ["link", os.readlink(path)]
        elif stat.S_ISDIR(st.st_mode):
            out[rel] = ["dir", stat.S_IMODE(st.st_mode)]
        else:
            with open(path, "rb") as handle:
                out[rel] = ["file", stat.S_IMODE(st.st_mode), hashlib.sha256(handle.read()).hexdigest()]
json.dump(out, sys.stdout, sort_keys=True)
"""


def git_env() -> dict[str, str]:
    return {**os.environ, **GIT_ENV}


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=git_env(), capture_output=True, text=True, check=True
    )
    return done.stdout


def git_repo(root: Path, *, packages: int = 5, modules: int = 15) -> Path:
    """A repository with ``packages * modules`` modules, docs, a unittest suite, a script, a
    binary file, a symlink and a ``.gitignore``; one commit on ``main``."""
    root.mkdir(parents=True)
    for p in range(1, packages + 1):
        for m in range(1, modules + 1):
            module = root / "src" / f"pkg{p}" / f"mod{m}.py"
            module.parent.mkdir(parents=True, exist_ok=True)
            module.write_text(f"VALUE = {p * 100 + m}\n\n\ndef f(x):\n    return x + VALUE\n")
    for name in "abcdefghij":
        (root / "docs").mkdir(exist_ok=True)
        (root / "docs" / f"{name}.md").write_text(f"# {name}\n\nsome text about {name}\n")
    (root / "tests").mkdir()
    (root / "tests" / "test_values.py").write_text(
        "import sys, unittest\nsys.path.insert(0, 'src')\n\n\n"
        "class Values(unittest.TestCase):\n"
        "    def test_value(self):\n"
        "        from pkg1 import mod1\n"
        "        self.assertEqual(mod1.f(1), 102)\n"
    )
    (root / "scripts").mkdir()
    script = root / "scripts" / "run-tests.sh"
    script.write_text("#!/bin/sh\nexec python3 -m unittest discover -s tests -q\n")
    script.chmod(0o755)
    (root / "data.bin").write_bytes(bytes(range(256)) * 4)
    (root / "README.md").write_text("# project\n")
    (root / "readme-link").symlink_to("README.md")
    (root / ".gitignore").write_text("__pycache__/\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "initial")
    return root


def manifest(root: Path) -> dict[str, list[object]]:
    """``MANIFEST_SCRIPT``'s description of ``root``, computed here."""
    out: dict[str, list[object]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            rel = "/" + path.relative_to(root).as_posix()
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ["link", os.readlink(path)]
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ["dir", stat.S_IMODE(st.st_mode)]
            else:
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                out[rel] = ["file", stat.S_IMODE(st.st_mode), digest]
    return out


def repository_in_memory(host: str, audit: str) -> vfs.FileSystem:
    """Mount builder: the files of the repository at ``host`` in a ``temp_fs``, under the
    repository policy, every change and denial appended to ``audit``."""
    files: dict[str, str | bytes] = {}
    for dirpath, _, filenames in os.walk(host):
        for name in filenames:
            path = os.path.join(dirpath, name)
            files["/" + os.path.relpath(path, host)] = Path(path).read_bytes()
    tree = policy_fs(vfs.temp_fs(files), repository_policy())
    return audited_fs(tree, AuditLog(audit))


def default_mount(host: str, upper: str) -> vfs.FileSystem:
    """Mount builder: what ``mountd mount`` serves without a spec over the directory ``host``
    (copy-on-write, the repository policy, an audit log beside ``upper``, the turn root's
    /tmp), its changes in ``upper``."""
    from mountd._run import default_tree
    from vfs.turns import turn_root

    tree = default_tree(host, Path(upper))[0]
    return turn_root(audited_fs(tree, AuditLog(upper + ".audit.jsonl")))


class _OpenRecorder(ForwardingTree):
    """A tree that appends the path of every ``open`` and ``read`` of it to a file (one line
    each): which files' bytes a mount of it fetched, since the mount opens a file before it
    reads it."""

    def __init__(self, inner: vfs.FileSystem, log: str) -> None:
        self._log = log
        self._forward_to(inner)

    def _around(self, verb: Verb, args: tuple[Any, ...]) -> Awaitable[Any]:
        if verb.name in ("open", "read"):
            with open(self._log, "a") as log:
                log.write(f"{args[0]}\n")
        return verb.call(self._inner, args)  # type: ignore[no-any-return]


def default_mount_recording_opens(host: str, upper: str, log: str) -> vfs.FileSystem:
    """:func:`default_mount` recording every path opened or read through it in ``log``."""
    return _OpenRecorder(default_mount(host, upper), log)
