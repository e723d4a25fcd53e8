"""Changes as data for ``cow_fs``: what differs from the lower tree, as a list, a diff, or writes.

Theory of operation
-------------------
:func:`compute_changes` compares the merged view with the lower tree, looking only where the
copy-on-write tree can differ: every upper entry (compared with the lower's entry at the same
path, by kind, bytes and mode) and the lower entries beneath hidden paths (deleted unless the upper
holds them again). Content is compared, never timestamps, so a file changed and changed back is
no change. An upper path whose recorded origin is another lower path that the merged view no longer
has is ``renamed`` (its old path is then not also ``deleted``). Directories are listed when they are
added, deleted, renamed or change mode; a directory that merely holds changes is not. FIFOs,
sockets and device nodes made in the upper are not changes (git tracks none of them).

:func:`render_diff` turns changes into a git-style unified diff (``diff --git a/x b/x`` headers,
``new file mode``, ``deleted file mode``, ``rename from/to``, ``old/new mode``), with
``difflib`` hunks for text and ``Binary files a/x and b/x differ`` for bytes that are not UTF-8
text (or hold a NUL in the first 8 KiB). Symlinks show their target, as git does; directories are
not shown (git does not track them).

:func:`apply_changes` writes changes into a target (the lower by default), always through
:func:`writer_view`: a host directory's strict view (``dir_fs``'s strict mode: no symlink followed
in any component, no mount point crossed, no set-id bit set), any other tree as it is. It first
checks every change, writing nothing when one fails: :func:`unsafe_paths` (a change whose path in
the target, as it is now, goes through a symlink or a mount point, unless that symlink is itself
replaced by a directory this apply makes) raises :class:`CowRefusedError` naming all of them; then
:class:`CowConflictError` names all conflicts, where the target is not what the tree shadowed:
against the lower, the recorded (kind, size, mtime) must match, or the content hash recorded at
copy-up; against another target, its content must hash to what the lower held (recorded at
copy-up, or read from the lower while it is unchanged). Then it writes: removals (files, then
directories deepest first), new directories (shallowest first), files and symlinks, modes. A file
is never written in place: its bytes go to a new file in the same directory (fsynced), which is
renamed over the old name, so a hard link's other names (another repository's object, say) keep
their bytes; a mode change of a file with other names is such a copy too. Every mode written has
its set-id bits (``0o6000``) cleared. A replaced file keeps its owner and group, and a new entry
gets the owner of its directory, when the process runs as root. Applied to the lower, the tree then
forgets what it applied: upper entries equal to the lower are dropped and whiteouts with nothing
left to hide are cleared, all without changing the merged view's names and bytes; the applied
paths' times are now the lower's, so each is reported as a ``metadata`` change. A set-id bit left
out stays a ``mode_changed`` change.

Applying a checkpoint (``apply(checkpoint=N)``) is the same function with another *source*:
the changes, the bytes and the bases checked are those of checkpoint N's view over the same lower
(``CowFileSystem.checkpoint_view``), while the live tree is the one that forgets. The lower then
changes under the live tree where the checkpoint differs from it, so before writing, the live
tree holds what it shows at every path written (``CowFileSystem._hold_shown``: a copy-up, or a
whiteout where it shows nothing); afterwards it differs from the lower by whatever it holds that
the checkpoint did not.

The checks and the writes are two steps: a host program that swaps a directory for a symlink in
between makes the strict view's write fail (``UnsafePathError``), never follow it; what was
written before that stays.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import secrets
import stat
from collections.abc import Callable, Collection, Iterable
from typing import TYPE_CHECKING

from ._capabilities import open_file_info
from ._content import looks_binary
from ._cow_meta import RESERVED, CowConflictError, CowRefusedError, Stamp, TreeChange
from ._dir import DirFileSystem
from ._errors import UnsafePathError
from ._paths import ROOT, is_under, join_path, normalize_path, parent_path, quoted, split_path
from ._policy import PolicyFileSystem
from ._posix_view import posix_view
from ._reading import copy_sparse, read_chunks
from ._types import FileInfo, FileSystem, Kind, OpenFile, PosixFileSystem

if TYPE_CHECKING:
    from ._cow import CowFileSystem

_CHUNK = 1 << 20
DIFF_BYTES = 8 << 20
"""A file larger than this is not read whole for a review: a diff says it differs, as of a
binary file, and an apply does not hash it afterwards (a sparse file of gigabytes costs nothing
to make in the tree, and must cost little to review)."""

CHANGED_IN_LOWER = "changed in the lower tree since it was copied up"
DIFFERS_IN_TARGET = "differs in the target tree from the lower tree"
EXISTS_IN_TARGET = "already exists in the target tree"

SET_ID_BITS = stat.S_ISUID | stat.S_ISGID
"""Never written by apply: a set-user-ID file the agent made would run as its host owner."""


def without_set_id(mode: int) -> int:
    """The permission bits apply writes for ``mode``: its own, less the set-id bits."""
    return mode & 0o7777 & ~SET_ID_BITS


def select(changes: list[TreeChange], paths: Iterable[str] | None) -> list[TreeChange]:
    """The changes at or beneath ``paths`` (either path of a rename); all when ``None``."""
    if paths is None:
        return changes
    if isinstance(paths, str):
        paths = [paths]
    chosen = [normalize_path(path) for path in paths]
    return [
        change
        for change in changes
        if any(
            is_under(change.path, path)
            or (change.old_path is not None and is_under(change.old_path, path))
            for path in chosen
        )
    ]


# --------------------------------------------------------------------------------------------
# Listing


async def compute_changes(cow: CowFileSystem) -> list[TreeChange]:
    """Every path whose merged state differs from the lower's, sorted by path."""
    upper = cow._upper
    lower = cow._lower
    meta = cow._meta
    uppers: dict[str, FileInfo] = {}
    await _walk(upper, ROOT, uppers, skip=_reserved)
    # FIFOs, sockets and device nodes are no change (git tracks none): one that took a lower
    # file's name leaves that file deleted.
    uppers = {path: info for path, info in uppers.items() if info.special is None}
    beneath: dict[str, FileInfo] = {}  # lower entries at or beneath hidden paths
    for hidden in meta.hidden_roots():
        info = await lower.lstat(hidden)
        if info.exists:
            beneath[hidden] = info
            if info.kind == "directory":
                await _walk(lower, hidden, beneath, skip=_reserved)

    found: list[TreeChange] = []
    claimed: set[str] = set()
    for path in sorted(uppers):
        info = uppers[path]
        old = await lower.lstat(path)
        if old.exists and old.kind == info.kind:
            if info.kind != "directory" and not await same_content(upper, path, lower, path, info):
                found.append(TreeChange(path, "modified", info.kind))
            elif info.mode is not None and old.mode is not None and info.mode != old.mode:
                found.append(TreeChange(path, "mode_changed", info.kind))
            continue
        if old.exists:
            found.append(TreeChange(path, "modified", info.kind))
            continue
        origin = meta.origins.get(path)
        if (
            origin is not None
            and origin != path
            and origin not in claimed
            and origin not in uppers
            and meta.hides(origin)
            and (await lower.lstat(origin)).kind == info.kind
        ):
            claimed.add(origin)
            found.append(TreeChange(path, "renamed", info.kind, origin))
            continue
        found.append(TreeChange(path, "added", info.kind))
    for path, info in beneath.items():
        if path not in uppers and path not in claimed:
            found.append(TreeChange(path, "deleted", info.kind))
    found.sort(key=lambda change: change.path)
    return found


def _reserved(path: str) -> bool:
    return is_under(path, RESERVED)


async def _walk(
    tree: PosixFileSystem,
    directory: str,
    into: dict[str, FileInfo],
    *,
    skip: Callable[[str], bool],
) -> None:
    """``lstat`` of every entry beneath ``directory`` (not itself), depth first (a directory
    before what it holds). Without recursion: an agent's tree may be deeper than Python's
    recursion limit."""
    pending = [iter([entry async for entry in tree.list(directory)])]
    while pending:
        entry = next(pending[-1], None)
        if entry is None:
            pending.pop()
            continue
        if skip(entry.path):
            continue
        info = await tree.lstat(entry.path)
        if not info.exists:
            continue
        into[entry.path] = info
        if info.kind == "directory":
            pending.append(iter([entry async for entry in tree.list(entry.path)]))


async def same_content(
    a: PosixFileSystem, a_path: str, b: PosixFileSystem, b_path: str, info: FileInfo
) -> bool:
    if info.kind == "symlink":
        return await a.readlink(a_path) == await b.readlink(b_path)
    if info.size != (await b.lstat(b_path)).size:
        return False
    first = await a.open(a_path)
    try:
        second = await b.open(b_path)
        try:
            return await _same_bytes(first, second, info.size)
        finally:
            await second.close()
    finally:
        await first.close()


async def _same_bytes(first: OpenFile, second: OpenFile, size: int) -> bool:
    """Whether two open files of ``size`` bytes hold the same bytes, compared a piece at a time
    (a file may be far larger than memory: a sparse one), only where they hold data when both
    say where that is and say the same (holes read as zeros in both)."""
    spans = [(0, size)]
    first_extents = getattr(first, "data_extents", None)
    second_extents = getattr(second, "data_extents", None)
    if first_extents is not None and second_extents is not None:
        known = first_extents(size)
        if known == second_extents(size):
            spans = known
    for start, end in spans:
        offset = start
        while offset < end:
            want = min(_CHUNK, end - offset)
            chunk = await first.read(offset, want)
            if chunk != await second.read(offset, want):
                return False
            if not chunk:
                return offset >= size
            offset += len(chunk)
    return True


async def read_bytes(tree: PosixFileSystem, path: str) -> bytes:
    """Every byte of a file, through a handle (``read`` would decode text)."""
    file = await tree.open(path)
    try:
        chunks: list[bytes] = []
        offset = 0
        while True:
            chunk = await file.read(offset, _CHUNK)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            offset += len(chunk)
    finally:
        await file.close()


async def _digest(tree: PosixFileSystem, path: str, kind: Kind) -> str:
    if kind == "symlink":
        return hashlib.sha256(
            (await tree.readlink(path)).encode("utf-8", "surrogateescape")
        ).hexdigest()
    digest = hashlib.sha256()
    file = await tree.open(path)
    try:
        async with contextlib.aclosing(read_chunks(file, _CHUNK)) as chunks:
            async for chunk in chunks:
                digest.update(chunk)
    finally:
        await file.close()
    return digest.hexdigest()


# --------------------------------------------------------------------------------------------
# Diff


async def render_diff(cow: CowFileSystem, changes: list[TreeChange]) -> str:
    return await render_between(cow._lower, cow._upper, changes)


async def render_between(
    lower: PosixFileSystem, upper: PosixFileSystem, changes: list[TreeChange]
) -> str:
    """The git-style diff of ``changes``: from what ``lower`` holds at each change's old path
    to what ``upper`` holds at its path (two states of one tree, or a cow's two layers)."""
    parts: list[str] = []
    for change in changes:
        old_path = change.old_path or change.path
        old: tuple[str, int | None, bytes] | None = None
        new: tuple[str, int | None, bytes] | None = None
        same = change.kind == "mode_changed"  # the bytes are the same: not read
        if change.kind != "added":
            info = await lower.lstat(old_path)
            if info.kind in ("file", "symlink"):
                old = (info.kind, info.mode, await _payload(lower, old_path, info, same))
        if change.kind != "deleted":
            info = await upper.lstat(change.path)
            if info.kind in ("file", "symlink"):
                new = (info.kind, info.mode, await _payload(upper, change.path, info, same))
        if old is None and new is None:
            continue  # a directory
        parts.append(file_diff(old_path if old else change.path, change.path, old, new))
    return "".join(parts)


async def _payload(tree: PosixFileSystem, path: str, info: FileInfo, same: bool) -> bytes:
    """What the diff shows of the entry at ``path``: a link's target, a file's bytes; ``b""``
    when ``same`` (only the mode changed), and a placeholder no text file holds (so the diff
    says the file differs, as a binary one) past :data:`DIFF_BYTES`, never read."""
    if info.kind == "symlink":
        return (await tree.readlink(path)).encode("utf-8", "surrogateescape")
    if same:
        return b""
    if info.size > DIFF_BYTES:
        return b"\0" + str(info.size).encode() + b" bytes, not shown"
    return await read_bytes(tree, path)


def git_mode(kind: str, mode: int | None) -> str:
    if kind == "symlink":
        return "120000"
    return "100755" if mode is not None and mode & 0o111 else "100644"


def file_diff(
    old_path: str,
    new_path: str,
    old: tuple[str, int | None, bytes] | None,
    new: tuple[str, int | None, bytes] | None,
) -> str:
    """The git-style diff of one path: ``old``/``new`` are ``(kind, mode, bytes)`` or absent."""
    a = quoted("a" + old_path)
    b = quoted("b" + new_path)
    lines = [f"diff --git {a} {b}\n"]
    if old is None and new is not None:
        lines.append(f"new file mode {git_mode(new[0], new[1])}\n")
    elif new is None and old is not None:
        lines.append(f"deleted file mode {git_mode(old[0], old[1])}\n")
    elif old is not None and new is not None:
        if git_mode(*old[:2]) != git_mode(*new[:2]):
            lines.append(f"old mode {git_mode(*old[:2])}\nnew mode {git_mode(*new[:2])}\n")
        if old_path != new_path:
            lines.append(f"rename from {quoted(old_path[1:])}\nrename to {quoted(new_path[1:])}\n")
    old_bytes = b"" if old is None else old[2]
    new_bytes = b"" if new is None else new[2]
    if old is not None and new is not None and old_bytes == new_bytes:
        return "".join(lines)
    from_name = a if old is not None else "/dev/null"
    to_name = b if new is not None else "/dev/null"
    old_text = _text(old_bytes)
    new_text = _text(new_bytes)
    if old_text is None or new_text is None:
        lines.append(f"Binary files {from_name} and {to_name} differ\n")
        return "".join(lines)
    if not old_text and not new_text:
        return "".join(lines)
    import difflib  # (only a diff needs it: not imported by every process that loads vfs)

    hunks = list(difflib.unified_diff(_lines(old_text), _lines(new_text), from_name, to_name, n=3))
    for line in hunks:
        if line.endswith("\n"):
            lines.append(line)
        else:
            lines.append(line + "\n\\ No newline at end of file\n")
    return "".join(lines)


def _text(data: bytes) -> str | None:
    if looks_binary(data):
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _lines(text: str) -> list[str]:
    """Lines split at ``\\n`` only, each keeping its newline (the last may have none)."""
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


# --------------------------------------------------------------------------------------------
# Apply


def writer_view(tree: FileSystem) -> PosixFileSystem:
    """What apply writes ``tree`` through: a host directory's strict view (see
    :class:`vfs._dir.DirFileSystem`), also under a policy of its own (a spec's ``dir`` layer
    with ``policy``: the same policy over the strict view), any other tree's POSIX view."""
    if isinstance(tree, DirFileSystem):
        return tree if tree.strict else tree.strict_view()
    if isinstance(tree, PolicyFileSystem) and isinstance(tree.tree, DirFileSystem):
        return PolicyFileSystem(writer_view(tree.tree), tree.policy)
    return posix_view(tree)


async def apply_changes(
    cow: CowFileSystem,
    paths: Iterable[str] | None,
    target: FileSystem | None,
    only: Collection[TreeChange] | None = None,
    source: CowFileSystem | None = None,
) -> list[TreeChange]:
    """See :meth:`CowFileSystem.apply`; the caller holds the tree's lock. ``source`` is the
    tree whose changes are applied (a checkpoint's view over the same lower), else ``cow``."""
    source = cow if source is None else source
    to_lower = target is None or target is cow._lower_tree or target is cow._lower
    dest = writer_view(cow._lower_tree if to_lower or target is None else target)
    changes = select(await compute_changes(source), paths)
    if only is not None:
        wanted = set(only)
        changes = [change for change in changes if change in wanted]
    if not changes:
        return []
    unsafe = await unsafe_paths(dest, changes)
    if unsafe:
        first = min(unsafe)
        raise CowRefusedError(first, unsafe[first], tuple(sorted(unsafe)))
    await _check(source, changes, dest, to_lower)
    with cow._quietly():
        if to_lower and source is not cow:
            # The lower changes under ``cow`` too: it keeps showing what it shows there.
            for path in sorted(_touched(changes), key=lambda p: (p.count("/"), p)):
                await cow._hold_shown(path)
        await _write_back(source, changes, dest)
        if to_lower:
            await _forget_applied(cow, changes)
    cow._invalidate_dirs()
    await cow._save()
    if to_lower:
        # The view's bytes and names are what they were, but the applied entries now show the
        # lower's (new) times: watchers must drop cached attributes (a mount tells the kernel).
        for path in sorted({c.path for c in changes if c.kind != "deleted"}):
            await cow._observers.emit(path, "metadata")
    return changes


async def unsafe_paths(dest: PosixFileSystem, changes: list[TreeChange]) -> dict[str, str]:
    """The paths (either path of a rename) of ``changes`` that apply may not touch in ``dest``
    as it is now, each with why: an ancestor is a symlink (unless one of ``changes`` makes a
    directory there: the link is removed first), or the path or an ancestor is a mount point.

    Each ancestor is looked at with ``lstat`` from the root down, so each answer is about that
    very entry; ``dest`` is a :func:`writer_view`, whose own resolution refuses the same.
    """
    replaced = {
        change.path
        for change in changes
        if change.entry == "directory" and change.kind in ("added", "modified", "renamed")
    }
    seen: dict[str, FileInfo | str] = {}  # path -> its lstat, or why it is unsafe

    async def look(path: str) -> FileInfo | str:
        found = seen.get(path)
        if found is None:
            try:
                found = await dest.lstat(path)
            except UnsafePathError as error:
                if error.errno != errno.EXDEV:
                    raise
                found = f"the target's {quoted(path)} is a mount point (apply never crosses one)"
            seen[path] = found
        return found

    async def problem(path: str) -> str | None:
        probe = ROOT
        for name in split_path(path):
            probe = join_path(probe, name)
            found = await look(probe)
            if isinstance(found, str):
                return found
            if probe == path or not found.exists:
                return None
            if found.kind == "symlink":
                if probe in replaced:
                    return None  # removed, then made a directory holding only what apply writes
                return f"the target's {quoted(probe)} is a symlink (apply never follows one)"
        return None

    unsafe: dict[str, str] = {}
    for change in changes:
        for path in (change.path, change.old_path):
            if path is not None and path not in unsafe:
                why = await problem(path)
                if why is not None:
                    unsafe[path] = why
    return unsafe


async def _check(
    cow: CowFileSystem, changes: list[TreeChange], dest: PosixFileSystem, to_lower: bool
) -> None:
    """Raise :class:`CowConflictError` for every change the target no longer allows."""
    conflicts: dict[str, str] = {}
    removed = {c.path for c in changes if c.kind == "deleted"}
    removed.update(c.old_path for c in changes if c.kind == "renamed" and c.old_path)

    async def shadowed(path: str, kind: Kind) -> None:
        """``path`` must still be what the tree shadowed there."""
        now = await dest.lstat(path)
        base = cow._meta.bases.lookup(path)
        if kind == "directory" or (base is not None and base.kind == "directory"):
            if now.kind != "directory":
                conflicts[path] = CHANGED_IN_LOWER if to_lower else DIFFERS_IN_TARGET
            return
        if base is None or now.kind != base.kind:
            conflicts[path] = CHANGED_IN_LOWER if to_lower else DIFFERS_IN_TARGET
            return
        if to_lower:
            if base.same_as(now):
                return
            if base.digest is not None and await _digest(dest, path, now.kind) == base.digest:
                return
            conflicts[path] = CHANGED_IN_LOWER
            return
        want = base.digest
        if want is None:
            lower_now = await cow._lower.lstat(path)
            if not base.same_as(lower_now):
                conflicts[path] = CHANGED_IN_LOWER
                return
            want = await _digest(cow._lower, path, base.kind)
        if await _digest(dest, path, now.kind) != want:
            conflicts[path] = DIFFERS_IN_TARGET

    async def vacant(path: str, kind: Kind) -> None:
        """``path`` must be free in the target (or already hold exactly the new entry)."""
        now = await dest.lstat(path)
        if not now.exists or path in removed:
            return
        if now.kind == kind == "directory":
            return
        if now.kind == kind and await same_content(cow._upper, path, dest, path, now):
            return
        conflicts[path] = EXISTS_IN_TARGET

    async def emptied(path: str) -> None:
        """A target directory that goes must hold nothing this apply does not remove."""
        if (await dest.lstat(path)).kind != "directory":
            return
        async for entry in dest.list(path):
            if entry.path not in removed:
                conflicts.setdefault(
                    entry.path, CHANGED_IN_LOWER if to_lower else DIFFERS_IN_TARGET
                )

    for change in changes:
        if change.kind == "deleted":
            await shadowed(change.path, change.entry)
            await emptied(change.path)
        elif change.kind == "renamed":
            assert change.old_path is not None
            await shadowed(change.old_path, change.entry)
            await emptied(change.old_path)
            await vacant(change.path, change.entry)
        elif change.kind == "added":
            await vacant(change.path, change.entry)
        else:
            now = await dest.lstat(change.path)
            await shadowed(change.path, now.kind if now.exists else change.entry)
            if now.kind == "directory" and change.entry != "directory":
                await emptied(change.path)
    if conflicts:
        first = min(conflicts)
        raise CowConflictError(first, conflicts[first], tuple(sorted(conflicts)))


async def _write_back(cow: CowFileSystem, changes: list[TreeChange], dest: PosixFileSystem) -> None:
    upper = cow._upper
    gone: list[tuple[str, Kind]] = []  # entries to remove from the target
    made: list[TreeChange] = []  # entries to create or overwrite
    for change in changes:
        if change.kind == "deleted":
            gone.append((change.path, change.entry))
        elif change.kind == "renamed":
            assert change.old_path is not None
            gone.append((change.old_path, change.entry))
            made.append(change)
        elif change.kind in ("added", "modified"):
            made.append(change)
    for change in made:
        now = await dest.lstat(change.path)
        if now.exists and (now.kind != change.entry or change.entry == "symlink"):
            gone.append((change.path, now.kind))  # replaced by another kind (or a new link)
    for path, _ in sorted(gone, key=lambda item: item[0], reverse=True):
        info = await dest.lstat(path)
        if not info.exists:
            continue
        if info.kind == "directory":
            await dest.rmdir(path)
        else:
            await dest.unlink(path)
    for change in sorted(made, key=lambda c: c.path):
        info = await upper.lstat(change.path)
        if info.kind == "directory":
            if (await dest.lstat(change.path)).kind != "directory":
                await _make_dirs(dest, change.path, info.mode)
        elif info.kind == "symlink":
            await _make_dirs(dest, parent_path(change.path), None)
            uid, gid = await _new_owner(dest, change.path)
            await dest.symlink(change.path, await upper.readlink(change.path), uid=uid, gid=gid)
        else:
            await _make_dirs(dest, parent_path(change.path), None)
            await _replace_file(dest, change.path, upper, info.mode)
        await _same_mode(dest, upper, change.path, info)
    for change in changes:
        if change.kind == "mode_changed":
            await _same_mode(dest, upper, change.path, await upper.lstat(change.path))


async def _make_dirs(dest: PosixFileSystem, path: str, mode: int | None) -> None:
    if path == ROOT or (await dest.lstat(path)).kind == "directory":
        return
    await _make_dirs(dest, parent_path(path), None)
    uid, gid = await _new_owner(dest, path)
    await dest.mkdir(path, without_set_id(0o755 if mode is None else mode), uid=uid, gid=gid)


async def _new_owner(dest: PosixFileSystem, path: str) -> tuple[int | None, int | None]:
    """The owner a new entry at ``path`` gets: its directory's, when we may give it away."""
    if os.geteuid() != 0:
        return None, None
    parent = await dest.lstat(parent_path(path))
    return parent.uid, parent.gid


async def _replace_file(
    dest: PosixFileSystem, path: str, source: PosixFileSystem, mode: int | None
) -> None:
    """Copy the file at ``path`` in ``source`` to a new file beside ``path`` in ``dest`` and
    rename it over ``path``: the old file (and every other name it has) is never written. An
    old file's owner stays, as root. The copy streams, its holes kept (``copy_sparse``)."""
    old = await dest.lstat(path)
    if old.kind == "file" and os.geteuid() == 0:
        uid, gid = old.uid, old.gid
    else:
        uid, gid = await _new_owner(dest, path)
    temp = join_path(parent_path(path), f".agentroot-apply-{secrets.token_hex(6)}.tmp")
    bits = without_set_id(0o644 if mode is None else mode)
    handle = await dest.open(
        temp, write=True, create=True, exclusive=True, mode=bits, uid=uid, gid=gid
    )
    try:
        try:
            reading = await source.open(path)
            try:
                info = await open_file_info(reading) or await source.lstat(path)
                await copy_sparse(reading, handle, info.size)
            finally:
                await reading.close()
            await handle.fsync()
        finally:
            await handle.close()
        await dest.rename(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            await dest.unlink(temp)
        raise


async def _same_mode(
    dest: PosixFileSystem, upper: PosixFileSystem, path: str, info: FileInfo
) -> None:
    if info.kind == "symlink" or info.mode is None:
        return
    mode = without_set_id(info.mode)
    now = await dest.lstat(path)
    if now.mode is None or now.mode == mode:
        return
    if now.kind == "file" and (now.nlink or 1) > 1:
        # A chmod would change every name of the file: give this name a copy of its own.
        await _replace_file(dest, path, upper, mode)
    else:
        await dest.setattr(path, mode=mode)


def _touched(changes: Iterable[TreeChange]) -> set[str]:
    """Every path ``changes`` write in the target (both paths of a rename)."""
    return {path for c in changes for path in (c.path, c.old_path) if path is not None}


async def _forget_applied(cow: CowFileSystem, changes: list[TreeChange]) -> None:
    """After writing into the lower: drop what now merely repeats the lower (view unchanged)."""
    meta = cow._meta
    upper = cow._upper
    lower = cow._lower
    touched = _touched(changes)
    # The lower holds the applied state now: that is what the tree shadows from here on.
    for path in touched:
        info = await lower.lstat(path)
        if not info.exists:
            meta.bases[path] = None
            continue
        # (a large file is not read again: its stamp's size and time tell later changes)
        read = info.kind == "symlink" or (info.kind == "file" and info.size <= DIFF_BYTES)
        digest = await _digest(lower, path, info.kind) if read else None
        meta.bases[path] = Stamp.of(info, digest)
        if (await upper.lstat(path)).exists:
            meta.copied(path, info)
    # Whiteouts with nothing left to hide (or only what the upper holds again) go.
    for hidden in sorted(meta.hidden, key=lambda p: (-p.count("/"), p)):
        if not any(is_under(hidden, t) or is_under(t, hidden) for t in touched):
            continue
        low = await lower.lstat(hidden)
        up = await upper.lstat(hidden)
        if low.exists:
            if not up.exists or up.kind != low.kind:
                continue
            if low.kind == "directory" and not await _covered(upper, lower, hidden):
                continue
        meta.hidden.discard(hidden)
    # Upper entries equal to the lower beneath them go, deepest first.
    candidates = set(touched)
    for path in touched:
        probe = path
        while probe != ROOT:
            probe = parent_path(probe)
            candidates.add(probe)
    candidates.discard(ROOT)
    for path in sorted(candidates, key=lambda p: (-p.count("/"), p)):
        up = await upper.lstat(path)
        if not up.exists:
            if not meta.hides(path):
                meta.bases.pop(path, None)
            continue
        if meta.hides(path):
            continue
        low = await lower.lstat(path)
        if low.kind != up.kind or low.mode != up.mode:
            continue
        if up.kind == "directory":
            if [entry async for entry in upper.list(path)]:
                continue
            await upper.rmdir(path)
        else:
            if not await same_content(upper, path, lower, path, up):
                continue
            await upper.unlink(path)
        meta.forget_upper(path, subtree=False)
        meta.bases.pop(path, None)


async def _covered(upper: PosixFileSystem, lower: PosixFileSystem, directory: str) -> bool:
    """Whether every lower entry beneath ``directory`` is in the upper with the same kind."""
    async for entry in lower.list(directory):
        if (await upper.lstat(entry.path)).kind != entry.kind:
            return False
        if entry.kind == "directory" and not await _covered(upper, lower, entry.path):
            return False
    return True
