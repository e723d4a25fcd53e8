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

``HEAD``, a loose ref and ``packed-refs`` must be what git writes (:func:`ref_refusal`): an
object name, or ``ref: `` and a ref name (``HEAD``, and symbolic refs such as a remote's
``HEAD``); ``packed-refs`` its header, lines of an object name and a ref name, and peeled
``^`` lines after them. Any other content makes every later git command on the host fail
(an unreadable ``HEAD`` is not even a repository to git), and a ref name git refuses (its
``check-ref-format`` rules) is one git cannot name again.
"""

from __future__ import annotations

import hashlib
import os
import re
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


_OBJECT_NAME = r"(?:[0-9a-f]{40}|[0-9a-f]{64})"
_REF_VALUE = re.compile(rf"(?:{_OBJECT_NAME}|ref: (?P<target>[^\n]*))\n?")
_PACKED_LINE = re.compile(rf"(?:(?P<name>{_OBJECT_NAME}) (?P<ref>.*)|\^{_OBJECT_NAME})")
_PACKED_HEADER = "# pack-refs with:"
# What a ref name may not hold (git's check-ref-format): control characters, space, ~ ^ : ? *
# [ and backslash, "..", "@{", "//"; nor a component starting with "." or ending in ".lock".
_BAD_REF = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]|\.\.|@\{|//|(?:^|/)\.|\.lock(?:/|$)")


def valid_ref_name(name: str) -> bool:
    """Whether git accepts ``name`` as a full ref name (``refs/...``, or ``HEAD``)."""
    if name == "HEAD":
        return True
    return (
        name.startswith("refs/") and not name.endswith(("/", ".")) and _BAD_REF.search(name) is None
    )


def ref_refusal(relative: str, data: bytes) -> str | None:
    """Why ``HEAD``, the loose ref or ``packed-refs`` at ``relative`` (in its git directory)
    holding ``data`` must not be applied, or ``None`` (see the module docstring)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return f"{quoted(relative)}: not what git writes there (not text)"
    if relative == "packed-refs":
        return _packed_refs_refusal(text)
    if relative != "HEAD" and not valid_ref_name(relative):
        return f"{quoted(relative)}: a ref name git refuses"
    found = _REF_VALUE.fullmatch(text)
    target = found and found.group("target")
    if found is None or (target is not None and not valid_ref_name(target)):
        return f"{quoted(relative)}: not what git writes there (an object name or ref: NAME)"
    return None


def _packed_refs_refusal(text: str) -> str | None:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if lines and lines[0].startswith(_PACKED_HEADER):
        lines.pop(0)
    after_ref = False
    for number, line in enumerate(lines, start=1):
        found = _PACKED_LINE.fullmatch(line)
        peeled = found is not None and found.group("name") is None
        if (
            found is None
            or (peeled and not after_ref)
            or (not peeled and not valid_ref_name(found.group("ref")))
        ):
            return f"packed-refs: line {number} is not what git writes there"
        after_ref = not peeled
    return None
