"""Whether git's objects and reflogs made in the sandbox are what their names say.

Theory of operation
-------------------
A loose object's name is the hash of its content, and git does not check that when it reads
one: a file at ``objects/ab/cdef...`` holding other bytes changes what an existing commit or
file means (git show, checkout, stash and clone take it), unseen by any diff. A pack is named
by its index, which maps object names to places in it; git trusts that map too. So apply
refuses an added loose object whose content does not hash to its name
(:func:`loose_object_refusal`), and a pack index that git's own ``verify-pack``, which
recomputes every object's name, rejects (:func:`pack_refusal`). (Apply never deletes objects
or packs, and never rewrites one in place: see :data:`mountd._apply_rules.GIT_RULES`.)

A reflog is appended to by git in a normal session; a rewritten one changes what ``git stash
pop``, ``@{1}`` and ``git reflog`` name, unseen: :func:`reflog_refusal` refuses a reflog whose
new content does not start with its old one.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import zlib

from vfs.lowlevel import quoted

from ._git_index import isolated_git

_HASHES = {40: hashlib.sha1, 64: hashlib.sha256}


def loose_object_refusal(relative: str, data: bytes) -> str | None:
    """Why the loose object at ``relative`` (``objects/ab/cdef...``, in its git directory)
    holding ``data`` must not be applied, or ``None``."""
    name = "".join(relative.lower().split("/")[1:3])
    make = _HASHES.get(len(name))
    if make is None:
        return f"{quoted(relative)}: not the name of a loose object"
    try:
        content = zlib.decompress(data)
    except zlib.error:
        return f"{quoted(relative)}: not a loose object (its content is not zlib data)"
    if make(content).hexdigest() != name:
        return f"{quoted(relative)}: its content is not the object its name says (forged)"
    return None


async def pack_refusal(index: bytes, pack: bytes) -> str | None:
    """Why a pack index ``index`` and its pack ``pack`` must not be applied, as git's
    ``verify-pack`` (in a scratch directory, with no configuration) finds them, or ``None``."""
    with tempfile.TemporaryDirectory(prefix="agentroot-pack-") as scratch:
        base = os.path.join(scratch, "pack-check")
        _write(base + ".idx", index)
        _write(base + ".pack", pack)
        try:
            done = await isolated_git(["verify-pack", base + ".idx"], home=scratch)
        except OSError as error:
            return f"git cannot check this pack: {error}"
    if done.returncode != 0:
        detail = done.stderr.decode("utf-8", "replace").strip().splitlines()
        return "git's verify-pack rejects this pack" + (f": {detail[-1]}" if detail else "")
    return None


def _write(path: str, data: bytes) -> None:
    with open(path, "wb") as file:
        file.write(data)


def reflog_refusal(relative: str, old: bytes | None, new: bytes) -> str | None:
    """Why the reflog at ``relative`` changed from ``old`` to ``new`` must not be applied."""
    if old is None or new.startswith(old):
        return None
    return (
        f"{quoted(relative)}: a reflog rewritten, not appended to (it changes what git stash "
        "pop and @{N} name)"
    )
