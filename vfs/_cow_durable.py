"""Durable checkpoints of ``cow_fs`` over a directory upper, kept beside its record.

Theory of operation
-------------------
A cow whose upper outlives the process (a given upper that is not a ``temp_fs``: the default
tree's session ``dir_fs``) keeps its checkpoints in the upper's reserved directory, next to its
record (``vfs._cow``), where nothing shows them through the tree:

``/.agentroot-cow/blobs/<sha256>``
    the bytes of a file as some checkpoint holds it, one file per distinct content (two
    checkpoints, or two files, with the same bytes share it).
``/.agentroot-cow/checkpoints/<number>.json``
    one checkpoint: its :class:`vfs.Checkpoint` fields, the cow's record then (``CowMeta``
    JSON), and the *manifest* of the upper then: path -> ``["file", mode, size, mtime_ns,
    sha256]``, ``["symlink", mode, target]``, ``["directory", mode]`` or ``["special", mode,
    special, rdev]``.

Order of writes: the blobs a checkpoint needs, then its file, written under a temporary name and
renamed into place. So a checkpoint exists exactly when its file does, and every blob it names
exists before it; a process killed in the middle leaves at most blobs nobody names (pruning
removes them). The kernel keeps what was renamed even when the process is killed, so SIGKILL
never loses a recorded checkpoint.

Cost: a checkpoint reads and stores only the files that changed since the last one: the upper
reports every change made through it (the cow notes the paths, its own copy-ups too), and
a path under a reported directory is walked. A process that starts over an upper with
checkpoints does not know what an earlier, killed one changed after its last checkpoint, so the
first checkpoint verb compares the whole upper with the newest manifest once, by kind, size,
mtime and mode. The manifest itself is written whole each time (the upper's entries, not the
tree's: the upper holds only what the session changed), which keeps every checkpoint readable on
its own and pruning a deletion of files.

Rewind records the state now unless a kept checkpoint holds it, then makes the upper the
manifest's: removes what the target lacks (deepest first), makes its directories (shallowest
first), and puts each file or symlink that differs in place as a new file renamed over the old
name (so a descriptor held keeps its old file), with the manifest's mode and mtime. Then it loads
the target's record and reports the changed names, as the in-memory rewind does
(``vfs._cow_checkpoints``). A rewind killed in the middle leaves the upper between the two
states, every checkpoint intact: rewinding again finishes it. ``checkpoint_changes``/``diff``
and ``fork`` build each checkpoint's upper in memory (a ``temp_fs`` read from the blobs); a fork
is an in-memory cow over the same lower.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from . import _cow_checkpoints
from ._capabilities import make_node
from ._checkpoints import (
    BEFORE_REWIND,
    CheckpointNotFoundError,
    Entries,
    changes_between,
    outermost,
    pruned,
    tally,
)
from ._cow_changes import read_bytes, render_between
from ._cow_meta import RESERVED, CowMeta, TreeChange
from ._paths import ROOT, is_under, parent_path
from ._temp import TempFileSystem
from ._types import Checkpoint, FileInfo, Kind, PosixFileSystem, Summary
from ._walk import walk

if TYPE_CHECKING:
    from ._cow import CowFileSystem

BLOBS = RESERVED + "/blobs"
CHECKPOINTS = RESERVED + "/checkpoints"
STAGE = RESERVED + "/stage"

Entry = list[Any]
Manifest = dict[str, Entry]


class Durable:
    """What a durable cow knows of its checkpoints (see the module docstring)."""

    __slots__ = ("dirty", "latest", "loaded", "newest", "records", "serial")

    def __init__(self) -> None:
        self.dirty: set[str] = set()
        self.records: dict[int, Checkpoint] = {}
        # The upper's manifest and record as last synced (the newest checkpoint's, or a rewind's
        # target): what changed since is ``dirty``.
        self.latest: tuple[Manifest, str] | None = None
        # The newest checkpoint's number, manifest and record, once read (``_newest``).
        self.newest: tuple[int, Manifest, str] | None = None
        self.loaded = False
        self.serial = 0


def _number_path(number: int) -> str:
    return f"{CHECKPOINTS}/{number}.json"


async def _exists(tree: PosixFileSystem, path: str) -> bool:
    return (await tree.lstat(path)).exists


async def _directory(tree: PosixFileSystem, path: str) -> None:
    if not await _exists(tree, RESERVED):
        await tree.mkdir(RESERVED, 0o700)
    if not await _exists(tree, path):
        await tree.mkdir(path, 0o700)


async def _stage(cow: CowFileSystem) -> str:
    await _directory(cow._upper, STAGE)
    durable = _state(cow)
    durable.serial += 1
    return f"{STAGE}/checkpoint-{durable.serial}"


def _state(cow: CowFileSystem) -> Durable:
    durable = cow._durable
    assert durable is not None
    return durable


def _load_file(text: str) -> tuple[Checkpoint, Manifest, str]:
    data = json.loads(text)
    added, modified, deleted, size = data["summary"]
    record = Checkpoint(
        int(data["number"]),
        data["turn"],
        data["label"],
        float(data["time"]),
        Summary(added, modified, deleted, size),
    )
    return record, data["manifest"], data["record"]


async def _read_checkpoint(cow: CowFileSystem, number: int) -> tuple[Checkpoint, Manifest, str]:
    return _load_file((await read_bytes(cow._upper, _number_path(number))).decode())


async def load(cow: CowFileSystem) -> Durable:
    """The checkpoints the upper holds, and what changed since the newest (once per process)."""
    durable = _state(cow)
    if durable.loaded:
        return durable
    upper = cow._upper
    numbers: list[int] = []
    if (await upper.lstat(CHECKPOINTS)).kind == "directory":
        async for entry in upper.list(CHECKPOINTS):
            name = entry.path.rsplit("/", 1)[1]
            if name.endswith(".json") and name[:-5].isdigit():
                numbers.append(int(name[:-5]))
    for number in sorted(numbers):
        record, manifest, meta = await _read_checkpoint(cow, number)
        durable.records[number] = record
        durable.latest = (manifest, meta)
    previous = {} if durable.latest is None else durable.latest[0]
    now = await _manifest_of(cow, [ROOT], {})
    for path in previous.keys() | now.keys():
        if not _same_stat(previous.get(path), now.get(path)):
            durable.dirty.add(path)
    durable.loaded = True
    return durable


def _same_stat(a: Entry | None, b: Entry | None) -> bool:
    if a is None or b is None:
        return a is b
    if a[0] == "file" and b[0] == "file":
        return a[1:4] == b[1:4]  # mode, size, mtime (b has no digest yet)
    return a == b


async def _entry(cow: CowFileSystem, path: str, info: FileInfo, digest: bool) -> Entry:
    upper = cow._upper
    mode = info.mode or 0
    if info.kind == "directory":
        return ["directory", mode]
    if info.kind == "symlink":
        return ["symlink", mode, await upper.readlink(path)]
    if info.special is not None:
        return ["special", mode, info.special, info.rdev]
    entry: Entry = ["file", mode, info.size, info.mtime_ns or 0]
    if digest:
        entry.append(await _store_blob(cow, path))
    return entry


async def _store_blob(cow: CowFileSystem, path: str) -> str:
    upper = cow._upper
    data = await read_bytes(upper, path)
    sha = hashlib.sha256(data).hexdigest()
    blob = f"{BLOBS}/{sha}"
    if not await _exists(upper, blob):
        await _directory(upper, BLOBS)
        stage = await _stage(cow)
        await upper.write(stage, data)
        await upper.rename(stage, blob)
    return sha


async def _manifest_of(cow: CowFileSystem, roots: Iterable[str], into: Manifest) -> Manifest:
    """The upper's entries at and beneath ``roots`` (files without their digest), into ``into``."""
    upper = cow._upper
    for root in roots:
        info = await upper.lstat(root)
        if root != ROOT and info.exists:
            into[root] = await _entry(cow, root, info, digest=False)
        if info.kind != "directory":
            continue
        async for found in walk(upper, root):
            if is_under(found.path, RESERVED):
                continue
            child = await upper.lstat(found.path)
            if child.exists:
                into[found.path] = await _entry(cow, found.path, child, digest=False)
    return into


async def _current(cow: CowFileSystem) -> Manifest:
    """The manifest of the upper now: the newest checkpoint's, with what changed since read
    again (files that changed get their bytes stored)."""
    durable = await load(cow)
    manifest: Manifest = {} if durable.latest is None else dict(durable.latest[0])
    roots = outermost(durable.dirty)
    chosen = set(roots)
    for path in [p for p in manifest if _beneath_any(p, chosen)]:
        del manifest[path]
    fresh = await _manifest_of(cow, roots, {})
    for path, entry in fresh.items():
        if entry[0] == "file":
            entry.append(await _store_blob(cow, path))
        manifest[path] = entry
    return manifest


def _beneath_any(path: str, roots: set[str]) -> bool:
    """Whether ``path`` is one of ``roots`` or beneath one (O(depth), not O(roots))."""
    probe = path
    while True:
        if probe in roots:
            return True
        if probe == ROOT:
            return False
        probe = parent_path(probe)


def _merged_kind(manifest: Manifest, meta: CowMeta, lower: Kind | None, path: str) -> Kind | None:
    entry = manifest.get(path)
    if entry is not None:
        return None if entry[0] == "special" else entry[0]
    return None if meta.hides(path) else lower


async def _summary(
    cow: CowFileSystem, old: tuple[Manifest, CowMeta], new: tuple[Manifest, CowMeta]
) -> Summary:
    paths = await _candidates(cow, old, new)
    lower = Entries(cow._lower)
    counted = []
    for path in paths:
        if path == ROOT:
            continue
        below = await lower.get(path)
        kind = below.kind if below.exists else None
        then = _merged_kind(old[0], old[1], kind, path)
        now = _merged_kind(new[0], new[1], kind, path)
        entry = new[0].get(path)
        size = entry[2] if entry is not None and entry[0] == "file" else below.size
        counted.append((then, now, size))
    return tally(counted)


async def _candidates(
    cow: CowFileSystem, old: tuple[Manifest, CowMeta], new: tuple[Manifest, CowMeta]
) -> set[str]:
    paths = {p for p in old[0].keys() | new[0].keys() if old[0].get(p) != new[0].get(p)}
    hidden = old[1].hidden ^ new[1].hidden
    paths |= hidden
    for path in hidden:
        if (await cow._lower.lstat(path)).kind == "directory":
            paths.update([entry.path async for entry in walk(cow._lower, path)])
    return paths


async def checkpoint(cow: CowFileSystem, label: str | None, turn: int | None) -> Checkpoint:
    async with cow._writing():
        return await _record(cow, label, turn)


async def _record(cow: CowFileSystem, label: str | None, turn: int | None) -> Checkpoint:
    durable = await load(cow)
    manifest = await _current(cow)
    meta = cow._meta.dumps()
    summary = await _summary(cow, await _newest(cow, durable), (manifest, cow._meta))
    number = max(durable.records, default=0) + 1
    record = Checkpoint(number, turn, label or None, time.time(), summary)
    text = json.dumps(
        {
            "number": number,
            "turn": turn,
            "label": record.label,
            "time": record.time,
            "summary": [summary.added, summary.modified, summary.deleted, summary.bytes],
            "record": meta,
            "manifest": manifest,
        },
        separators=(",", ":"),
    )
    upper = cow._upper
    with cow._quietly():
        await _directory(upper, CHECKPOINTS)
        stage = await _stage(cow)
        await upper.write(stage, text)
        await upper.rename(stage, _number_path(number))
    durable.records[number] = record
    durable.latest = (manifest, meta)
    durable.newest = (number, manifest, meta)
    durable.dirty.clear()
    return record


async def _newest(cow: CowFileSystem, durable: Durable) -> tuple[Manifest, CowMeta]:
    """The newest kept checkpoint's upper and record: what a new checkpoint's summary counts
    from, as for every tree (``vfs._checkpoints``), whatever a rewind made the upper since."""
    if not durable.records:
        return {}, CowMeta()
    number = max(durable.records)
    if durable.newest is None or durable.newest[0] != number:
        _, manifest, meta = await _read_checkpoint(cow, number)
        durable.newest = (number, manifest, meta)
    return durable.newest[1], CowMeta.loads(durable.newest[2])


async def checkpoints(cow: CowFileSystem) -> list[Checkpoint]:
    await cow._reading()
    durable = await load(cow)
    return [durable.records[n] for n in sorted(durable.records)]


def _known(durable: Durable, number: int) -> None:
    if number not in durable.records:
        raise CheckpointNotFoundError(number)


async def _view(cow: CowFileSystem, number: int, *, subscribe: bool = False) -> CowFileSystem:
    """An in-memory cow over the same lower showing checkpoint ``number``."""
    _, manifest, meta = await _read_checkpoint(cow, number)
    upper = TempFileSystem()
    for path in sorted(manifest):
        entry = manifest[path]
        if entry[0] == "directory":
            await upper.mkdir(path, entry[1])
        elif entry[0] == "symlink":
            await upper.symlink(path, entry[2])
        elif entry[0] == "special":
            await make_node(upper, path, entry[2], mode=entry[1], rdev=entry[3])
        else:
            await upper.write(path, await read_bytes(cow._upper, f"{BLOBS}/{entry[4]}"))
            await upper.setattr(path, mode=entry[1], mtime_ns=entry[3])
    return type(cow)._of_state(cow._lower_tree, upper, CowMeta.loads(meta), subscribe=subscribe)


async def _views(
    cow: CowFileSystem, a: int, b: int | None
) -> tuple[PosixFileSystem, PosixFileSystem, set[str]]:
    durable = await load(cow)
    _known(durable, a)
    if b is not None:
        _known(durable, b)
    _, old_manifest, old_meta = await _read_checkpoint(cow, a)
    if b is None:
        new_manifest = await _current(cow)
        new_meta = cow._meta
        new: PosixFileSystem = cow
    else:
        _, new_manifest, text = await _read_checkpoint(cow, b)
        new_meta = CowMeta.loads(text)
        new = await _view(cow, b)
    paths = await _candidates(
        cow, (old_manifest, CowMeta.loads(old_meta)), (new_manifest, new_meta)
    )
    paths = {path for path in paths if not is_under(path, RESERVED)}
    return await _view(cow, a), new, paths


async def checkpoint_changes(cow: CowFileSystem, a: int, b: int | None) -> list[TreeChange]:
    async with cow._writing():
        old, new, paths = await _views(cow, a, b)
        return await changes_between(old, new, paths)


async def checkpoint_diff(cow: CowFileSystem, a: int, b: int | None) -> str:
    async with cow._writing():
        old, new, paths = await _views(cow, a, b)
        return await render_between(old, new, await changes_between(old, new, paths))


async def rewind_replaces(cow: CowFileSystem, number: int) -> list[str]:
    """Where the upper (and record) now and checkpoint ``number``'s differ, and the lower's
    entries beneath a whiteout that differs: what :func:`rewind` may replace."""
    async with cow._writing():
        durable = await load(cow)
        _known(durable, number)
        now = await _current(cow)
        _, target, meta = await _read_checkpoint(cow, number)
        paths = await _candidates(cow, (now, cow._meta), (target, CowMeta.loads(meta)))
        return sorted(path for path in paths if path != ROOT and not is_under(path, RESERVED))


async def fork(cow: CowFileSystem, number: int) -> CowFileSystem:
    async with cow._writing():
        _known(await load(cow), number)
        tree = await _view(cow, number, subscribe=True)
        await _cow_checkpoints.checkpoint(tree, f"fork of {number}", None)
        return tree


async def rewind(cow: CowFileSystem, number: int) -> Checkpoint:
    async with cow._writing():
        durable = await load(cow)
        _known(durable, number)
        now = await _current(cow)
        meta_now = cow._meta.dumps()
        if not await _held(cow, durable, now, meta_now):
            await _record(cow, BEFORE_REWIND.format(number=number), None)
        _, target, meta = await _read_checkpoint(cow, number)
        target_meta = CowMeta.loads(meta)
        entries = {p for p in now.keys() | target.keys() if now.get(p) != target.get(p)}
        directories = {
            p for p in entries if _kind(now.get(p)) == _kind(target.get(p)) == "directory"
        }
        entries -= directories
        # A directory the upper made or dropped (a copy-up) is one in both merged views.
        before = Entries(cow)
        kinds = {path: (await before.get(path)).kind for path in entries}
        old_meta = cow._meta
        with cow._quietly():
            await _restore(cow, now, target)
        cow._meta = target_meta
        cow._invalidate_dirs()
        cow._epoch += 1
        cow._staged = False
        cow._saved = None
        await cow._save()
        durable.latest = (target, meta)
        durable.dirty.clear()
        after = Entries(cow)
        for path in sorted(entries):
            if kinds[path] == (await after.get(path)).kind == "directory":
                entries.discard(path)
                directories.add(path)
        changed = outermost(entries | (old_meta.hidden ^ target_meta.hidden))
        for path in changed:
            await cow._observers.emit(path, "entry")
        for path in sorted(directories - set(changed)):
            await cow._observers.emit(path, "metadata")
        return durable.records[number]


def _kind(entry: Entry | None) -> str | None:
    return None if entry is None else str(entry[0])


async def _held(cow: CowFileSystem, durable: Durable, manifest: Manifest, meta: str) -> bool:
    """Whether a kept checkpoint holds this state (the newest is checked first)."""
    if durable.latest is not None and durable.latest == (manifest, meta):
        return True
    for number in sorted(durable.records, reverse=True):
        _, kept, text = await _read_checkpoint(cow, number)
        if (kept, text) == (manifest, meta):
            return True
    return False


async def _restore(cow: CowFileSystem, now: Manifest, target: Manifest) -> None:
    """Make the upper hold ``target`` where it holds ``now`` (see the module docstring)."""
    upper = cow._upper
    for path in sorted(now, key=lambda p: (-p.count("/"), p)):
        then = target.get(path)
        if then is not None and then[0] == now[path][0]:
            continue
        if now[path][0] == "directory":
            await upper.rmdir(path)
        else:
            await upper.unlink(path)
    for path in sorted(target, key=lambda p: (p.count("/"), p)):
        entry = target[path]
        current = now.get(path)
        if current == entry or (current is not None and current[0] == entry[0] == "directory"):
            if current is not None and current[1] != entry[1]:
                await upper.setattr(path, mode=entry[1])
            continue
        kind = entry[0]
        if kind == "directory":
            await upper.mkdir(path, entry[1])
            continue
        stage = await _stage(cow)
        if kind == "symlink":
            await upper.symlink(stage, entry[2])
        elif kind == "special":
            await make_node(upper, stage, entry[2], mode=entry[1], rdev=entry[3])
        else:
            await upper.write(stage, await read_bytes(upper, f"{BLOBS}/{entry[4]}"))
            await upper.setattr(stage, mode=entry[1], mtime_ns=entry[3])
        await upper.rename(stage, path)


async def prune(cow: CowFileSystem, keep_last: int) -> list[int]:
    async with cow._writing():
        durable = await load(cow)
        gone = pruned([durable.records[n] for n in sorted(durable.records)], keep_last)
        upper = cow._upper
        with cow._quietly():
            for number in gone:
                await upper.unlink(_number_path(number))
                del durable.records[number]
            used: set[str] = set()
            for number in durable.records:
                _, manifest, _ = await _read_checkpoint(cow, number)
                used.update(e[4] for e in manifest.values() if e[0] == "file" and len(e) > 4)
            if durable.latest is not None:
                used.update(
                    e[4] for e in durable.latest[0].values() if e[0] == "file" and len(e) > 4
                )
            if (await upper.lstat(BLOBS)).kind == "directory":
                blobs = [entry.path async for entry in upper.list(BLOBS)]
                for blob in blobs:
                    if blob.rsplit("/", 1)[1] not in used:
                        await upper.unlink(blob)
        return gone
