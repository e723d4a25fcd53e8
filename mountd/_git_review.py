"""What changes to git's own files mean: the refs a command moved, the paths its index stages.

Theory of operation
-------------------
Apply takes git's own files (objects, refs, logs, ``packed-refs``, ``index``, ``HEAD``) so that
a command's commits and ``git add`` land, and a review counts them on one line. But they carry
what no file diff shows: a branch that is not checked out moved to a commit the command made
(a later checkout, merge or push takes it), an index staging bytes the work tree does not hold
(a later commit takes them, a ``git restore .`` writes them). So the review names them:
:func:`git_state_lines` answers one line per ref whose value changed (``HEAD`` included), old
and new (``HEAD`` and ``MERGE_HEAD``-like files too), and one naming the paths whose staged
entry changed. Everything is read from the files
themselves, in the host directory (the lower) and in the layer: loose refs, ``packed-refs`` and
``HEAD`` as text, the index by git in a scratch repository (:mod:`mountd._git_index`); git is
never run in the layer, whose config the command may have written.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from vfs import CowFileSystem, PosixFileSystem, TreeChange, posix_view
from vfs.lowlevel import quoted, read_file_bytes

from ._git_index import index_entries

GIT_DIR = "/.git"
# HEAD and the *_HEAD files beside it (MERGE_HEAD: a commit's second parent; ORIG_HEAD, ...)
_HEAD_FILE = re.compile(r"(?:[A-Z_]+_)?HEAD")
_SHOWN_PATHS = 10  # staged paths named on the line; the rest are counted


async def git_state_lines(cow: CowFileSystem, changes: Iterable[TreeChange]) -> list[str]:
    """What the layer's applied changes under ``/.git`` do to refs and the index (see the
    module docstring), one line each, for a reviewer."""
    refs: set[str] = set()
    packed = index = False
    for change in changes:
        for path in (change.path, change.old_path):
            if path is None or not path.startswith(GIT_DIR + "/"):
                continue
            relative = path[len(GIT_DIR) + 1 :]
            if _HEAD_FILE.fullmatch(relative) or (
                relative.startswith("refs/") and change.entry == "file"
            ):
                refs.add(relative)
            elif relative == "packed-refs":
                packed = True
            elif relative == "index":
                index = True
    before, after = posix_view(cow.lower), cow
    if packed:
        old, new = await _packed(before), await _packed(after)
        refs |= {name for name in old.keys() | new.keys() if old.get(name) != new.get(name)}
    lines = []
    for name in sorted(refs, key=lambda ref: (ref != "HEAD", ref)):
        was, now = await _ref(before, name), await _ref(after, name)
        if was == now:
            continue
        if was is None:
            lines.append(f"{quoted(name)}: made, {_short(now)}")
        elif now is None:
            lines.append(f"{quoted(name)}: deleted (was {_short(was)})")
        else:
            lines.append(f"{quoted(name)}: {_short(was)} -> {_short(now)}")
    if index:
        lines.extend(await _staged(before, after))
    return lines


async def _read(tree: PosixFileSystem, path: str) -> bytes | None:
    if (await tree.lstat(path)).kind != "file":
        return None
    return await read_file_bytes(tree, path)


async def _packed(tree: PosixFileSystem) -> dict[str, str]:
    data = await _read(tree, f"{GIT_DIR}/packed-refs")
    found: dict[str, str] = {}
    for line in (data or b"").decode("utf-8", "replace").splitlines():
        if line.startswith(("#", "^")):
            continue
        value, _, name = line.partition(" ")
        if name:
            found[name] = value
    return found


async def _ref(tree: PosixFileSystem, name: str) -> str | None:
    """What ref ``name`` holds in ``tree`` (an object id, or ``ref: other``), if anything."""
    data = await _read(tree, f"{GIT_DIR}/{name}")
    if data is not None:
        return data.decode("utf-8", "replace").strip()
    return (await _packed(tree)).get(name)


def _short(value: str | None) -> str:
    if value is None:
        return "nothing"
    return quoted(value if value.startswith("ref:") else value[:12])


async def _staged(before: PosixFileSystem, after: PosixFileSystem) -> list[str]:
    old_data = await _read(before, f"{GIT_DIR}/index")
    new_data = await _read(after, f"{GIT_DIR}/index")
    if new_data is None:
        return ["index: deleted"]
    old = await index_entries(old_data) if old_data is not None else {}
    new = await index_entries(new_data)
    if isinstance(new, str) or isinstance(old, str):
        return [f"index: {new if isinstance(new, str) else old}"]
    changed = sorted(path for path in old.keys() | new.keys() if old.get(path) != new.get(path))
    if not changed:
        return []
    named = ", ".join(quoted(path) for path in changed[:_SHOWN_PATHS])
    more = len(changed) - _SHOWN_PATHS
    rest = f" and {more} more" if more > 0 else ""
    return [f"index: stages {len(changed)} path{'s' if len(changed) != 1 else ''}: {named}{rest}"]
