"""Whether a git index made in the sandbox is safe for git on the host to check out.

Theory of operation
-------------------
An index lists paths and the blob git writes at each when it checks the index out (``git
restore .``, ``git checkout -- .``, ``git checkout-index -a``: what "discard my changes" runs).
Git validates a path when it adds one to an index, not when it reads one back from its own, so
an index written byte by byte inside the sandbox can name ``../outside`` or
``.git/hooks/pre-commit``, and a later discard on the host writes there: a file outside the
project, or a hook that runs on the next commit. Apply writes ``.git/index`` (an agent's ``git
add`` lands in it), so before it does, :func:`judged_entries` reads the new index with git
itself (the same parser the host's git uses, in a scratch repository with no configuration)
and refuses it when git cannot read it, when an entry's path is one git refuses to add
(:func:`unsafe_entry`: git's ``verify_path`` with ``core.protectNTFS`` and ``core.protectHFS``
on, the strictest of its platforms'), or when it is a sparse index (an entry standing for a
whole tree, which git expands later from objects this review never lists). What else an index
carries could lie about its entries (its cached trees, which the next commit takes for every
directory it does not touch), so apply never writes the index it was given but the one git
rebuilds from its entries alone (:func:`rebuilt_index`). (A staged symlink is judged against the
work tree by :mod:`mountd._apply_rules`.)
"""

from __future__ import annotations

import os
import subprocess
import tempfile

import anyio

# Code points HFS+ ignores in names, so ".g\u200cit" is ".git" there (git's is_hfs_dotgit).
_IGNORED_BY_HFS = dict.fromkeys(
    map(
        ord,
        "\u200c\u200d\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u206a\u206b\u206c\u206d"
        "\u206e\u206f\ufeff",
    )
)
# Files git refuses as symlinks in a tree it checks out (it would follow them out of the tree).
_NO_SYMLINK = frozenset({".gitmodules", ".gitattributes", ".gitignore", ".mailmap"})
SYMLINK_MODE = "120000"

UNREADABLE = "git cannot read this index"


async def isolated_git(
    args: list[str], *, home: str, env: dict[str, str] | None = None, stdin: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    """``git ARGS`` with nothing of the host's set-up (no GIT_* variable, no system or global
    configuration, ``home`` as its HOME): how agentroot asks git about files a sandbox made.
    ``OSError`` when there is no git."""
    isolated = {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": home,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        **(env or {}),
    }
    return await anyio.run_process(["git", *args], input=stdin, env=isolated, cwd=home, check=False)


def unsafe_entry(path: str, mode: str) -> str | None:
    """Why git would refuse to add an index entry at ``path`` (as stored in the index, relative
    to the work tree) with ``mode`` (octal text), or ``None``."""
    if not path or path.startswith("/"):
        return f"the index names {path!r}, not a path inside the work tree"
    if "\\" in path:
        return f"the index names {path!r}: a backslash is a directory separator on Windows"
    for name in path.split("/"):
        if name in ("", ".", ".."):
            return f"the index names {path!r}, which leaves the work tree"
        folded = name.translate(_IGNORED_BY_HFS).lower().rstrip(" .")
        if folded in (".git", "git~1") or folded.startswith(".git:"):
            return f"the index names {path!r}, inside a git directory"
    if mode == SYMLINK_MODE and path.rsplit("/", 1)[-1].lower() in _NO_SYMLINK:
        return f"the index makes {path!r} a symlink, which git refuses to follow"
    return None


def _scratch_repository(scratch: str, index_data: bytes) -> tuple[str, str]:
    """An empty repository in ``scratch`` and the index file to read with it."""
    git_dir = os.path.join(scratch, "git")
    os.makedirs(os.path.join(git_dir, "objects"))
    os.makedirs(os.path.join(git_dir, "refs"))
    with open(os.path.join(git_dir, "HEAD"), "w") as head:
        head.write("ref: refs/heads/main\n")
    index = os.path.join(scratch, "index")
    with open(index, "wb") as file:
        file.write(index_data)
    return git_dir, index


async def judged_entries(data: bytes) -> dict[str, tuple[str, str]] | str:
    """The entries of the index ``data`` (as :func:`index_entries`), or why it must not be
    applied (see the module docstring)."""
    with tempfile.TemporaryDirectory(prefix="agentroot-index-") as scratch:
        entries = await _Scratch(scratch, data).entries(sparse=True)
    if isinstance(entries, str):
        return entries
    for path, (mode, _) in entries.items():
        if mode == _TREE_MODE:
            return (
                f"a sparse index: its entry {path!r} stands for a tree git expands later, "
                "unseen by this review"
            )
        reason = unsafe_entry(path, mode)
        if reason is not None:
            return reason
    return entries


async def rebuilt_index(data: bytes) -> bytes:
    """The index ``data`` as git makes it from its entries alone (path, mode, object, stage):
    what apply writes. Everything else an index can carry is left behind: its cached trees
    (the TREE extension, which the next commit takes for every directory it does not touch,
    whatever the entries say), the untracked cache, the fsmonitor token, a split index's link,
    the skip-worktree and assume-unchanged flags, the files' recorded times (so the host's git
    looks at every file once, by its content). ``OSError`` when git cannot make it."""
    with tempfile.TemporaryDirectory(prefix="agentroot-index-") as scratch:
        git = _Scratch(scratch, data)
        listed = await git.run("ls-files", "-z", "-s")
        if listed.stdout:
            made = await git.run(
                "update-index", "-z", "--index-info", stdin=listed.stdout, on="rebuilt"
            )
        else:  # (update-index writes nothing for no entries)
            made = await git.run("read-tree", "--empty", on="rebuilt")
        if listed.returncode != 0 or made.returncode != 0:
            why = (listed.stderr + made.stderr).decode("utf-8", "replace").strip()
            raise OSError(f"git could not rebuild the index: {why}")
        return await anyio.Path(git.rebuilt).read_bytes()


async def index_entries(data: bytes) -> dict[str, tuple[str, str]] | str:
    """``path -> (mode, object id)`` of every entry of the index ``data`` (a conflict's stages
    as ``path`` with the highest stage), read by git in a scratch repository with no
    configuration; or why git cannot read it."""
    with tempfile.TemporaryDirectory(prefix="agentroot-index-") as scratch:
        return await _Scratch(scratch, data).entries(sparse=False)


_TREE_MODE = "040000"


class _Scratch:
    """An empty repository in ``scratch`` with the index to judge (and one rebuilt from its
    entries), and git run there with nothing of the host's set-up: no GIT_* variable, no
    configuration."""

    def __init__(self, scratch: str, data: bytes) -> None:
        self.git_dir, self.index = _scratch_repository(scratch, data)
        self.rebuilt = self.index + ".rebuilt"  # made from the entries alone: no cached trees
        self.scratch = scratch

    async def run(
        self, *args: str, stdin: bytes | None = None, on: str = "index"
    ) -> subprocess.CompletedProcess[bytes]:
        return await isolated_git(
            [f"--git-dir={self.git_dir}", f"--work-tree={self.scratch}", *args],
            home=self.scratch,
            env={"GIT_INDEX_FILE": self.index if on == "index" else self.rebuilt},
            stdin=stdin,
        )

    async def entries(self, *, sparse: bool) -> dict[str, tuple[str, str]] | str:
        try:
            done = await self.run("ls-files", "-z", "-s", *(["--sparse"] if sparse else []))
        except OSError as error:  # no git here: nothing can say the index is safe
            return f"{UNREADABLE}: {error}"
        detail = done.stderr.decode("utf-8", "replace").strip().splitlines()
        if done.returncode != 0 or detail:  # (a sparse entry's tree git could not expand, ...)
            return f"{UNREADABLE}: {detail[-1]}" if detail else UNREADABLE
        entries: dict[str, tuple[str, str]] = {}
        for record in done.stdout.split(b"\0"):
            if not record:
                continue
            meta, _, raw = record.partition(b"\t")
            mode, object_id, _stage = meta.decode("ascii", "replace").split(" ", 2)
            entries[raw.decode("utf-8", "surrogateescape")] = (mode, object_id)
        return entries
