"""Where everything lives: the git shape of a worktree and the paths of the session files.

Theory of operation
-------------------
:func:`resolve` walks up from a path to the nearest directory holding a ``.git`` entry (the
worktree's top level) and reads the git shape the way git does, without running it:

- a plain repository: ``.git`` is the git directory, which is also the common directory;
- a linked worktree (``git worktree add``) or a submodule: ``.git`` is a file
  ``gitdir: <path>`` (absolute, or relative to the worktree), and that git directory's
  ``commondir`` file (relative to it) names the common directory when there is one.

``info/exclude`` is the common directory's, shared by every worktree of the repository, so each
worktree's marker block carries the worktree's id: ``.`` for the main worktree, the git
directory's path relative to the common directory (``worktrees/<name>``) for a linked one. The id
is the same whichever path the repository is seen through (the host disk or a mount).

An absolute ``gitdir:`` names a place outside the tree, so a worktree seen through a copy or a
copy-on-write mount would have its marker written into the *original's* ``info/exclude`` (on
the host, past the mount). Git records in the git directory which worktree it belongs to
(``<gitdir>/gitdir``, the path of that worktree's ``.git`` file); when that names an existing
``.git`` other than the one we came through, :func:`resolve` refuses (``RefusedError``) rather
than write there. A relative ``gitdir:`` resolves inside whatever tree the worktree is seen
through, so it is always followed.

The session files live in the worktree's ``.cursor/``: the config ``mcp.json`` (shared with the
operator), the lease manifest ``.fusion-mcp-state.json``, the main lock directory
``.fusion-mcp.lock`` and temporary entries ``.fusion-mcp-tmp.*``/``.fusion-mcp.lock.*``; every
name but ``mcp.json`` starts with ``.fusion-mcp``, which the marker block's patterns cover. The
bootstrap lock lives in the common directory (``mcpstage-bootstrap.lock``) and the cleanup intent
in the worktree's git directory (``mcpstage-cursor-cleanup``), both invisible to git.

:func:`config_is_tracked` is the one place that runs git (``git ls-files``), because only the
index knows whether ``.cursor/mcp.json`` is tracked.
"""

from __future__ import annotations

import os
import stat
import subprocess
from dataclasses import dataclass

from ._errors import RefusedError, UsageError

CURSOR = ".cursor"
CONFIG = "mcp.json"
FUSION_PREFIX = ".fusion-mcp"  # every session file but mcp.json starts so
STATE = ".fusion-mcp-state.json"
LOCK = ".fusion-mcp.lock"
TEMP_PREFIX = ".fusion-mcp-tmp."
BOOTSTRAP_LOCK = "mcpstage-bootstrap.lock"
EXCLUDE_TEMP_PREFIX = "exclude.mcpstage-tmp."
INTENT = "mcpstage-cursor-cleanup"
INTENT_TEMP_PREFIX = "mcpstage-cursor-cleanup.tmp."
GIT_TIMEOUT = 30.0


@dataclass(frozen=True)
class Shape:
    """A worktree's git shape and the paths the protocol uses in it."""

    worktree: str  # absolute top level
    git_dir: str  # the worktree's own git directory
    common_dir: str  # shared by all worktrees; holds info/exclude
    worktree_id: str  # "." (main) or e.g. "worktrees/wt"

    @property
    def linked(self) -> bool:
        return self.worktree_id != "."

    @property
    def cursor_dir(self) -> str:
        return os.path.join(self.worktree, CURSOR)

    @property
    def config_path(self) -> str:
        return os.path.join(self.worktree, CURSOR, CONFIG)

    @property
    def state_path(self) -> str:
        return os.path.join(self.worktree, CURSOR, STATE)

    @property
    def lock_path(self) -> str:
        return os.path.join(self.worktree, CURSOR, LOCK)

    @property
    def info_dir(self) -> str:
        return os.path.join(self.common_dir, "info")

    @property
    def exclude_path(self) -> str:
        return os.path.join(self.common_dir, "info", "exclude")

    @property
    def bootstrap_lock_path(self) -> str:
        return os.path.join(self.common_dir, BOOTSTRAP_LOCK)

    @property
    def intent_path(self) -> str:
        return os.path.join(self.git_dir, INTENT)


def _read_gitfile(path: str) -> str:
    with open(path, encoding="utf-8") as file:
        line = file.readline().strip()
    if not line.startswith("gitdir:"):
        raise UsageError(f"usage: {path} is not a gitdir file")
    return line[len("gitdir:") :].strip()


def resolve(path: str | os.PathLike[str]) -> Shape:
    """The git shape of the worktree containing ``path``; ``UsageError`` when there is none."""
    start = os.path.abspath(os.fspath(path))
    if not os.path.isdir(start):
        raise UsageError(f"usage: not a directory: {start}")
    top = start
    while not os.path.lexists(os.path.join(top, ".git")):
        parent = os.path.dirname(top)
        if parent == top:
            raise UsageError(f"usage: not inside a git worktree: {start}")
        top = parent
    dot_git = os.path.join(top, ".git")
    if os.path.isdir(dot_git):
        git_dir = dot_git
    elif os.path.isfile(dot_git):
        named = _read_gitfile(dot_git)
        git_dir = os.path.normpath(os.path.join(top, named))
    else:
        raise UsageError(f"usage: {dot_git} is neither a directory nor a gitdir file")
    if not os.path.isdir(git_dir):
        raise UsageError(f"usage: git directory {git_dir} (from {dot_git}) does not exist")
    if git_dir != dot_git and os.path.isabs(named):
        _check_owner(dot_git, git_dir)
    common_dir = git_dir
    commondir_file = os.path.join(git_dir, "commondir")
    if os.path.isfile(commondir_file):
        with open(commondir_file, encoding="utf-8") as file:
            common_dir = os.path.normpath(os.path.join(git_dir, file.read().strip()))
        if not os.path.isdir(common_dir):
            raise UsageError(f"usage: git common directory {common_dir} does not exist")
    worktree_id = os.path.relpath(git_dir, common_dir)
    return Shape(worktree=top, git_dir=git_dir, common_dir=common_dir, worktree_id=worktree_id)


def _check_owner(dot_git: str, git_dir: str) -> None:
    """Refuse an absolute gitdir that git records as another worktree's (see the docstring)."""
    try:
        with open(os.path.join(git_dir, "gitdir"), encoding="utf-8") as file:
            recorded = file.readline().strip()
    except (OSError, UnicodeDecodeError):
        return  # a submodule's git directory, or unreadable: nothing says it is another's
    if not recorded:
        return
    owner = os.path.normpath(os.path.join(git_dir, recorded))
    try:
        ours = os.path.samefile(owner, dot_git)
    except OSError:
        return  # the recorded worktree is gone (moved): git itself still uses this gitdir
    if not ours:
        raise RefusedError(
            f"refused: {dot_git} names {git_dir}, the git directory of "
            f"{os.path.dirname(owner)}: this worktree is a copy or a mount of that one, and "
            "staging would write outside it; make its gitdir: relative"
        )


def _git_env() -> dict[str, str]:
    # A hook's GIT_DIR/GIT_INDEX_FILE would point git elsewhere than the worktree we resolved.
    return {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}


def config_is_tracked(shape: Shape) -> bool:
    """Whether the index tracks ``.cursor/mcp.json`` (``RefusedError`` if git cannot tell)."""
    try:
        result = subprocess.run(
            ["git", "ls-files", "-z", "--", f"{CURSOR}/{CONFIG}"],
            cwd=shape.worktree,
            env=_git_env(),
            capture_output=True,
            timeout=GIT_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise RefusedError(f"refused: cannot run git in {shape.worktree}: {error}") from error
    if result.returncode != 0:
        message = result.stderr.decode(errors="replace").strip()
        raise RefusedError(f"refused: git cannot read {shape.worktree}: {message}")
    return bool(result.stdout)


def _kind(path: str) -> int | None:
    """``st_mode`` of ``path`` itself (one ``lstat``: no race between two checks), or ``None``."""
    try:
        return os.lstat(path).st_mode
    except FileNotFoundError:
        return None


def check_cursor_dir(shape: Shape) -> None:
    """Refuse a ``.cursor`` or ``mcp.json`` that is a symlink or of the wrong kind."""
    cursor = _kind(shape.cursor_dir)
    if cursor is not None and not stat.S_ISDIR(cursor):
        raise RefusedError(f"refused: {shape.cursor_dir} is not a plain directory")
    config = _kind(shape.config_path)
    if config is not None and not stat.S_ISREG(config):
        raise RefusedError(f"refused: {shape.config_path} is not a regular file")
