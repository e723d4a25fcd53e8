"""Whether a git index made in the sandbox is safe for git on the host to check out.

Theory of operation
-------------------
An index lists paths and the blob git writes at each when it checks the index out (``git
restore .``, ``git checkout -- .``, ``git checkout-index -a``: what "discard my changes" runs).
Git validates a path when it adds one to an index, not when it reads one back from its own, so
an index written byte by byte inside the sandbox can name ``../outside`` or
``.git/hooks/pre-commit``, and a later discard on the host writes there: a file outside the
project, or a hook that runs on the next commit. Apply writes ``.git/index`` (an agent's ``git
add`` lands in it), so before it does, :func:`index_refusal` reads the new index with git
itself (the same parser the host's git uses, in a scratch repository with no configuration)
and refuses it when git cannot read it, or when an entry's path is one git refuses to add
(:func:`unsafe_entry`: git's ``verify_path`` with ``core.protectNTFS`` and ``core.protectHFS``
on, the strictest of its platforms').
"""

from __future__ import annotations

import os
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
_SYMLINK_MODE = "120000"

UNREADABLE = "git cannot read this index"


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
    if mode == _SYMLINK_MODE and path.rsplit("/", 1)[-1].lower() in _NO_SYMLINK:
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


async def index_refusal(data: bytes) -> str | None:
    """Why the index ``data`` must not be applied (see the module docstring), or ``None``."""
    entries = await index_entries(data)
    if isinstance(entries, str):
        return entries
    for path, (mode, _) in entries.items():
        reason = unsafe_entry(path, mode)
        if reason is not None:
            return reason
    return None


async def index_entries(data: bytes) -> dict[str, tuple[str, str]] | str:
    """``path -> (mode, object id)`` of every stage-0 entry of the index ``data`` (a conflict's
    stages as ``path`` with the highest stage), read by git in a scratch repository with no
    configuration; or why git cannot read it."""
    with tempfile.TemporaryDirectory(prefix="agentroot-index-") as scratch:
        git_dir, index = _scratch_repository(scratch, data)
        # Nothing of the host's git set-up: no GIT_* variable, no system or global config.
        env = {
            "PATH": os.environ.get("PATH", os.defpath),
            "HOME": scratch,
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_INDEX_FILE": index,
        }
        try:
            done = await anyio.run_process(
                ["git", f"--git-dir={git_dir}", f"--work-tree={scratch}", "ls-files", "-z", "-s"],
                env=env,
                check=False,
            )
        except OSError as error:  # no git here: nothing can say the index is safe
            return f"{UNREADABLE}: {error}"
    if done.returncode != 0:
        detail = done.stderr.decode("utf-8", "replace").strip().splitlines()
        return f"{UNREADABLE}: {detail[-1]}" if detail else UNREADABLE
    entries: dict[str, tuple[str, str]] = {}
    for record in done.stdout.split(b"\0"):
        if not record:
            continue
        meta, _, raw = record.partition(b"\t")
        mode, object_id, _stage = meta.decode("ascii", "replace").split(" ", 2)
        entries[raw.decode("utf-8", "surrogateescape")] = (mode, object_id)
    return entries
