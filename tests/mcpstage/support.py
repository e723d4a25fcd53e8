"""Helpers for the mcpstage tests: a real repository with a linked worktree, snapshots, the CLI.

Theory of operation
-------------------
:func:`make_template` builds, once per session on the host, a git repository ``repo/`` (one
commit) and a linked worktree ``wt/`` made by ``git worktree add``, whose ``.git`` file is then
rewritten to a *relative* ``gitdir:`` so the pair works wherever it is copied or mounted (git
resolves a relative gitdir against the worktree; ``commondir`` is relative already). Each test
works in a fresh copy (:class:`Repo`), made with plain file operations through the place under
test (a tmpfs directory, or a ``mountd`` mount of a copy-on-write root whose lower holds the
template).

:func:`snapshot` records everything an operator could see of a worktree: every entry under it
(kind, bytes, link target) plus the common ``info/exclude``; two snapshots compare with ``==``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
GIT_ID = ("-c", "user.name=mcpstage tests", "-c", "user.email=tests@mcpstage.invalid")


def git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    return subprocess.run(
        ["git", *GIT_ID, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=check,
        timeout=60,
    )


def make_template(where: Path) -> Path:
    """``where/tpl`` holding ``repo/`` and its linked worktree ``wt/``; returns ``where/tpl``."""
    tpl = where / "tpl"
    repo = tpl / "repo"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    shutil.rmtree(repo / ".git" / "hooks", ignore_errors=True)  # fewer files to copy
    (repo / "README.md").write_text("# repo\n")
    (repo / "src").mkdir()
    (repo / "src" / "app.py").write_text("print('hi')\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "initial")
    git(repo, "worktree", "add", "-q", "-b", "side", str(tpl / "wt"))
    (tpl / "wt" / ".git").write_text("gitdir: ../repo/.git/worktrees/wt\n")
    return tpl


@dataclass(frozen=True)
class Repo:
    """A fresh copy of the template: the main worktree and a linked one."""

    root: Path
    mounted: bool

    @property
    def main(self) -> Path:
        return self.root / "repo"

    @property
    def wt(self) -> Path:
        return self.root / "wt"

    @property
    def exclude(self) -> Path:
        return self.main / ".git" / "info" / "exclude"

    def config(self, worktree: Path | None = None) -> Path:
        return (worktree or self.wt) / ".cursor" / "mcp.json"

    def state(self, worktree: Path | None = None) -> Path:
        return (worktree or self.wt) / ".cursor" / ".fusion-mcp-state.json"


def copy_template(template: Path, dest: Path, mounted: bool) -> Repo:
    shutil.copytree(template, dest, symlinks=True)
    return Repo(dest, mounted)


Snapshot = Mapping[str, object]


def snapshot(repo: Repo, worktree: Path | None = None) -> dict[str, object]:
    """Every entry of the worktree (kind and bytes) plus ``info/exclude`` (see module doc)."""
    top = worktree or repo.wt
    result: dict[str, object] = {}
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames.sort()
        rel_dir = os.path.relpath(dirpath, top)
        if rel_dir != ".":
            result[rel_dir + "/"] = "dir"
        if rel_dir == "." and ".git" in dirnames:
            dirnames.remove(".git")  # the main worktree's git directory: git's, not ours
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, top)
            if os.path.islink(path):
                result[rel] = ("link", os.readlink(path))
            else:
                result[rel] = Path(path).read_bytes()
    result["<info/exclude>"] = repo.exclude.read_bytes() if repo.exclude.exists() else None
    return result


def cli(
    *args: str, env: Mapping[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m mcpstage ARGS`` in a child process."""
    full_env = {k: v for k, v in os.environ.items() if k != "MCPSTAGE_CRASH_AT"}
    full_env["PYTHONPATH"] = str(REPO_ROOT)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "mcpstage", *args],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def porcelain(worktree: Path) -> str:
    return git(worktree, "status", "--porcelain", "--untracked-files=all").stdout


def leaked(worktree: Path, status: str | None = None) -> list[str]:
    """Session files ``git status`` shows: any ``.fusion-mcp*`` entry, or ``mcp.json`` while it
    holds a fusion server (an operator's own untracked config, shown when no session runs, is
    not one)."""
    status = porcelain(worktree) if status is None else status
    shown = []
    for line in status.splitlines():
        path = line[3:]
        if (
            ".fusion-mcp" in path
            or path.endswith(".cursor/")
            or (path.endswith(".cursor/mcp.json") and _has_fusion(worktree / path))
        ):
            shown.append(line)
    return shown


def _has_fusion(path: Path) -> bool:
    try:
        return b"fusion-custom-tools-" in path.read_bytes()
    except OSError:
        return False
