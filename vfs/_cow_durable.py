"""Durable checkpoints of ``cow_fs`` over a directory upper, kept beside its record.

Theory of operation
-------------------
A cow whose upper outlives the process (a given upper that is not a ``temp_fs``: the default
tree's session ``dir_fs``) keeps its checkpoints in the upper's reserved directory, next to its
record (``vfs._cow``), where nothing shows them through the tree:

``/.agentroot-cow/packs/<token>``, ``/.agentroot-cow/blobs/<name>``
    the bytes of files as some checkpoint holds them, each distinct content once (two
    checkpoints, or two files, with the same bytes share it): a checkpoint's small files in one
    pack, a large file streamed into a blob of its own with its holes kept (``vfs._blobs``).
``/.agentroot-cow/checkpoints/<number>.json``
    one checkpoint: its :class:`vfs.Checkpoint` fields, the cow's record then (``CowMeta``
    JSON), and the *manifest* of the upper then: path -> ``["file", mode, size, mtime_ns,
    sha256, pack, offset]`` (a loose blob's: ``["file", mode, size, mtime_ns, name]``),
    ``["symlink", mode, target]``, ``["directory", mode]`` or ``["special", mode,
    special, rdev]``; either whole (``"manifest"``) or as the ``"changes"`` (path -> entry, or
    ``null`` for removed) from the checkpoint named ``"base"``, the one the tree grew from.
``/.agentroot-cow/checkpoints/base``
    the number of the checkpoint last rewound to and the highest number given then, until the
    next checkpoint (a summary counts from it, across a restart too; a checkpoint numbered
    after it makes it stale, should a kill have kept it).
``/.agentroot-cow/checkpoints/last``
    the highest number a checkpoint was given, written when a prune removes that checkpoint:
    numbers are never given twice.

Order of writes: the pack and blobs a checkpoint needs, then its file, written under a temporary name and
renamed into place. So a checkpoint exists exactly when its file does, and every store file it
names exists before it; a process killed in the middle leaves at most store files nobody names
(pruning removes them). The kernel keeps what was renamed even when the process is killed, so SIGKILL
never loses a recorded checkpoint.

Cost: a checkpoint reads and stores only the files that changed since the last one: the upper
reports every change made through it (the cow notes the paths, its own copy-ups too), and
a path under a reported directory is walked. A process that starts over an upper with
checkpoints does not know what an earlier, killed one changed after its last checkpoint, so the
first checkpoint verb compares the whole upper with the newest manifest once, by kind, size,
mtime and mode. A checkpoint writes only the manifest's changes, on the checkpoint the tree grew
from: a chain that ends in a whole manifest, written again whole when resolving the chain would
read more than two whole manifests' worth (:data:`MAX_CHAIN` files, or more changes than the
manifest has entries), so a turn's checkpoint costs what the turn changed, not the size of the
upper. Pruning a checkpoint first writes the ones resting on it again (on its base, or whole),
each renamed into place, so every chain is whole at every moment.

Rewind records the state now unless a kept checkpoint holds it, then makes the upper the
manifest's: removes what the target lacks (deepest first), makes its directories (shallowest
first), and puts each file or symlink that differs in place as a new file renamed over the old
name (so a descriptor held keeps its old file), with the manifest's mode and mtime. Then it loads
the target's record and reports the changed names, as the in-memory rewind does
(``vfs._cow_checkpoints``). A rewind killed in the middle leaves the upper between the two
states, every checkpoint intact: rewinding again finishes it. ``checkpoint_changes``/``diff``
and ``fork`` build each checkpoint's upper in memory (a ``temp_fs`` read from the blobs); a fork
is an in-memory cow over the same lower. ``vfs._cow_fork`` writes a checkpoint out as a new
durable upper instead, sharing the store (:data:`STORES`) by hard links.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from . import _cow_checkpoints
from ._blobs import SMALL, Blobs, Tail, store_files
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
PACKS = RESERVED + "/packs"
CHECKPOINTS = RESERVED + "/checkpoints"
STAGE = RESERVED + "/stage"
BASE = CHECKPOINTS + "/base"  # the number rewound to, until the next checkpoint
LAST = CHECKPOINTS + "/last"  # the highest number given, once its checkpoint is pruned
STORES = (BLOBS, PACKS)
"""The store's directories of files named by their content: never written once named, only
removed by a prune, so a fork shares them (``vfs._cow_fork``)."""

Entry = list[Any]
Manifest = dict[str, Entry]
Changes = dict[str, Entry | None]  # what changed from one manifest to the next (None: removed)

MAX_CHAIN = 32  # checkpoint files read to resolve one manifest, at most


class Durable:
    """What a durable cow knows of its checkpoints (see the module docstring)."""

    __slots__ = (
        "based",
        "blobs",
        "dirty",
        "highest",
        "latest",
        "latest_meta",
        "latest_number",
        "links",
        "loaded",
        "records",
        "serial",
        "stores",
        "touched",
    )

    def __init__(self) -> None:
        self.based = False  # whether BASE names the state the upper grew from
        self.blobs: Blobs | None = None
        self.stores = False  # whether the reserved directories are known to exist
        self.dirty: set[str] = set()  # changed, and what is beneath them
        self.touched: set[str] = set()  # only their own attributes changed (if directories)
        self.records: dict[int, Checkpoint] = {}
        # The manifest and record the upper grew from: the newest checkpoint's, or the one
        # rewound to since (BASE); a summary counts from it.
        self.latest: tuple[Manifest, str] | None = None
        self.latest_number: int | None = None  # the checkpoint that holds ``latest``
        self.latest_meta: CowMeta | None = None  # ``latest``'s record, parsed (once)
        self.highest = 0  # the highest number given
        # Each checkpoint's place in its chain: (the checkpoint its changes apply to, or None
        # for a whole manifest; how many files to read to resolve it; how many changes they
        # hold in all, besides the whole manifest).
        self.links: dict[int, tuple[int | None, int, int]] = {}
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
    durable = _state(cow)
    if not durable.stores:
        for directory in (BLOBS, PACKS, CHECKPOINTS, STAGE):
            await _directory(cow._upper, directory)
        durable.stores = True
    durable.serial += 1
    return f"{STAGE}/checkpoint-{durable.serial}"


def _blobs(cow: CowFileSystem) -> Blobs:
    durable = _state(cow)
    if durable.blobs is None:
        durable.blobs = Blobs(cow._upper, BLOBS, PACKS, lambda: _stage(cow))
    return durable.blobs


def _state(cow: CowFileSystem) -> Durable:
    durable = cow._durable
    assert durable is not None
    return durable


def _record_of(data: dict[str, Any]) -> Checkpoint:
    added, modified, deleted, size = data["summary"]
    return Checkpoint(
        int(data["number"]),
        data["turn"],
        data["label"],
        float(data["time"]),
        Summary(added, modified, deleted, size),
    )


async def _read_file(cow: CowFileSystem, number: int) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(await read_bytes(cow._upper, _number_path(number)))
    return data


def _applied(manifest: Manifest, changes: Changes) -> Manifest:
    """``manifest`` with ``changes`` made (a new dict)."""
    result = dict(manifest)
    _apply(result, changes)
    return result


def _apply(manifest: Manifest, changes: Changes) -> None:
    for path, entry in changes.items():
        if entry is None:
            manifest.pop(path, None)
        else:
            manifest[path] = entry


async def _read_checkpoint(cow: CowFileSystem, number: int) -> tuple[Checkpoint, Manifest, str]:
    """Checkpoint ``number``: its record, its whole manifest (its chain resolved), its cow
    record."""
    data = await _read_file(cow, number)
    chain = [data]
    while chain[-1].get("base") is not None:
        chain.append(await _read_file(cow, int(chain[-1]["base"])))
    manifest: Manifest = chain[-1]["manifest"]
    for link in reversed(chain[:-1]):
        _apply(manifest, link["changes"])
    return _record_of(data), manifest, data["record"]


def _entries_of(data: dict[str, Any]) -> Iterable[Entry]:
    """The entries a checkpoint file holds (its manifest's, or its changes' made)."""
    entries = data["manifest"] if data.get("base") is None else data["changes"]
    return (entry for entry in entries.values() if entry is not None)


def _tails(entries: Iterable[Entry]) -> Iterable[Tail]:
    """What the file entries among ``entries`` say of their bytes."""
    return (entry[4:] for entry in entries if entry[0] == "file" and len(entry) > 4)


def _link(durable: Durable, data: dict[str, Any]) -> None:
    base = data.get("base")
    if base is None:
        durable.links[int(data["number"])] = (None, 1, 0)
    else:
        _, depth, size = durable.links[int(base)]
        durable.links[int(data["number"])] = (int(base), depth + 1, size + len(data["changes"]))


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
        data = await _read_file(cow, number)
        durable.records[number] = _record_of(data)
        _link(durable, data)  # (a base always has a smaller number)
        _blobs(cow).learn(_tails(_entries_of(data)))
    grew_from = max(numbers, default=None)
    durable.highest = max(numbers, default=0)
    durable.highest = max([durable.highest, *await _read_note(upper, LAST)])
    note = await _read_note(upper, BASE)
    if note:
        rewound, then = note[0], note[-1] if len(note) > 1 else durable.highest
        if rewound in durable.records and then == durable.highest:
            grew_from = rewound
        durable.based = True  # (removed by the next checkpoint, stale or not)
    if grew_from is not None:
        _, manifest, meta = await _read_checkpoint(cow, grew_from)
        durable.latest = (manifest, meta)
        durable.latest_number = grew_from
    previous = {} if durable.latest is None else durable.latest[0]
    now = await _manifest_of(cow, [ROOT], {})
    for path in previous.keys() | now.keys():
        if not _same_stat(previous.get(path), now.get(path)):
            durable.dirty.add(path)
    durable.loaded = True
    return durable


async def _read_note(upper: PosixFileSystem, path: str) -> list[int]:
    """The numbers a note (``BASE``, ``LAST``) holds; none when it is missing or not numbers."""
    if not await _exists(upper, path):
        return []
    words = (await read_bytes(upper, path)).decode().split()
    return [int(word) for word in words] if all(word.isdigit() for word in words) else []


async def _write_note(cow: CowFileSystem, path: str, *numbers: int) -> None:
    """Write a note whole (staged, renamed into place)."""
    stage = await _stage(cow)
    await cow._upper.write(stage, " ".join(map(str, numbers)))
    await cow._upper.rename(stage, path)


def _same_stat(a: Entry | None, b: Entry | None) -> bool:
    if a is None or b is None:
        return a is b
    if a[0] == "file" and b[0] == "file":
        return a[1:4] == b[1:4]  # mode, size, mtime (b has no digest yet)
    return a == b


async def _entry(cow: CowFileSystem, path: str, info: FileInfo) -> Entry:
    """The manifest entry of ``path`` (a file's without its blob name yet)."""
    upper = cow._upper
    mode = info.mode or 0
    if info.kind == "directory":
        return ["directory", mode]
    if info.kind == "symlink":
        return ["symlink", mode, await upper.readlink(path)]
    if info.special is not None:
        return ["special", mode, info.special, info.rdev]
    return ["file", mode, info.size, info.mtime_ns or 0]


async def _manifest_of(cow: CowFileSystem, roots: Iterable[str], into: Manifest) -> Manifest:
    """The upper's entries at and beneath ``roots`` (files without their digest), into ``into``."""
    upper = cow._upper
    for root in roots:
        info = await upper.lstat(root)
        if root != ROOT and info.exists:
            into[root] = await _entry(cow, root, info)
        if info.kind != "directory":
            continue
        list_info = getattr(upper, "list_info", None)
        if list_info is None:
            async for found in walk(upper, root):
                if is_under(found.path, RESERVED):
                    continue
                child = await upper.lstat(found.path)
                if child.exists:
                    into[found.path] = await _entry(cow, found.path, child)
            continue
        pending = [root]  # one listing with attributes per directory, not an lstat per entry
        while pending:
            for found, child in await list_info(pending.pop()):
                if found.path == RESERVED:
                    continue
                into[found.path] = await _entry(cow, found.path, child)
                if child.kind == "directory":
                    pending.append(found.path)
    return into


async def _current(cow: CowFileSystem) -> Manifest:
    """The manifest of the upper now (a new dict; see :func:`_changes`)."""
    base, changes = await _changes(cow)
    return _applied(base, changes)


async def _changes(cow: CowFileSystem) -> tuple[Manifest, Changes]:
    """The manifest the upper grew from (the durable state's own: not to be changed) and what
    changed since: the paths beneath what was reported read again (files that changed get
    their bytes stored). O(what changed), unless a directory changed: then O(beneath it)."""
    durable = await load(cow)
    base: Manifest = {} if durable.latest is None else durable.latest[0]
    upper = cow._upper
    touched: list[str] = []  # directories whose own entry changed, not what is beneath them
    for path in sorted(durable.touched - durable.dirty):
        if path != ROOT and not _beneath_any(path, durable.dirty):
            if (await upper.lstat(path)).kind == "directory":
                touched.append(path)
            else:  # a file's attributes come with its bytes: read it as changed
                durable.dirty.add(path)
    roots = outermost(durable.dirty)
    if any(root == ROOT or _kind(base.get(root)) == "directory" for root in roots):
        chosen = set(roots)
        removed = [path for path in base if _beneath_any(path, chosen)]
    else:  # only names that were not directories: nothing beneath them to drop
        removed = [root for root in roots if root in base]
    fresh, read = await _fresh(cow, roots)
    for path in touched:
        if not _beneath_any(path, set(roots)):
            fresh[path] = await _entry(cow, path, await upper.lstat(path))
    files = [(path, entry) for path, entry in fresh.items() if entry[0] == "file"]
    if files:
        await _stage(cow)  # the store's directories exist
        stored = [(path, entry[2], read.get(path)) for path, entry in files]
        tails = await _blobs(cow).store(stored)
        for (_, entry), tail in zip(files, tails, strict=True):
            entry.extend(tail)
    changes: Changes = {path: None for path in removed if path not in fresh}
    changes.update((path, entry) for path, entry in fresh.items() if base.get(path) != entry)
    return base, changes


async def _fresh(cow: CowFileSystem, roots: list[str]) -> tuple[Manifest, dict[str, bytes]]:
    """The upper's entries at and beneath ``roots``, and the bytes of the small files among
    the roots where the upper reads them with their attributes (``read_entries``)."""
    read_entries = getattr(cow._upper, "read_entries", None)
    if read_entries is None:
        return await _manifest_of(cow, roots, {}), {}
    fresh: Manifest = {}
    read: dict[str, bytes] = {}
    directories = []
    for root, (info, data) in zip(roots, read_entries(roots, SMALL), strict=True):
        if root == ROOT or info.kind == "directory":
            directories.append(root)
        elif info.exists:
            fresh[root] = await _entry(cow, root, info)
            if data is not None:
                read[root] = data
    return await _manifest_of(cow, directories, fresh), read


def _beneath_any(path: str, roots: set[str]) -> bool:
    """Whether ``path`` is one of ``roots`` or beneath one (O(depth), not O(roots))."""
    probe = path
    while True:
        if probe in roots:
            return True
        if probe == ROOT:
            return False
        probe = parent_path(probe)


def _merged_kind(entry: Entry | None, meta: CowMeta, lower: Kind | None, path: str) -> Kind | None:
    if entry is not None:
        return _upper_kind(entry)
    return None if meta.hides(path) else lower


def _upper_kind(entry: Entry) -> Kind | None:
    return None if entry[0] == "special" else entry[0]


async def _summary(
    cow: CowFileSystem, base: Manifest, changes: Changes, old_meta: CowMeta, new_meta: CowMeta
) -> Summary:
    """What changed from ``base`` (and ``old_meta``) by ``changes`` (and ``new_meta``)."""
    paths = set(changes) | await _hidden_between(cow, old_meta, new_meta)
    lower = Entries(cow._lower)
    counted = []
    for path in paths:
        if path == ROOT:
            continue
        before, after = base.get(path), changes.get(path, base.get(path))
        if before is not None and after is not None:  # both in the upper: no lower to ask
            then, now = _upper_kind(before), _upper_kind(after)
            size = after[2] if after[0] == "file" else 0
        else:
            below = await lower.get(path)
            kind = below.kind if below.exists else None
            then = _merged_kind(before, old_meta, kind, path)
            now = _merged_kind(after, new_meta, kind, path)
            size = after[2] if after is not None and after[0] == "file" else below.size
        counted.append((then, now, size))
    return tally(counted)


async def _candidates(
    cow: CowFileSystem, old: tuple[Manifest, CowMeta], new: tuple[Manifest, CowMeta]
) -> set[str]:
    paths = {p for p in old[0].keys() | new[0].keys() if old[0].get(p) != new[0].get(p)}
    return paths | await _hidden_between(cow, old[1], new[1])


async def _hidden_between(cow: CowFileSystem, old: CowMeta, new: CowMeta) -> set[str]:
    """The paths one record hides and the other does not, and the lower's beneath them."""
    hidden = old.hidden ^ new.hidden
    paths = set(hidden)
    for path in hidden:
        if (await cow._lower.lstat(path)).kind == "directory":
            paths.update([entry.path async for entry in walk(cow._lower, path)])
    return paths


def _latest_meta(durable: Durable) -> CowMeta:
    """The record the upper grew from (parsed once, then kept as copied at each checkpoint)."""
    if durable.latest is None:
        return CowMeta()
    if durable.latest_meta is None:
        durable.latest_meta = CowMeta.loads(durable.latest[1])
    return durable.latest_meta


async def checkpoint(cow: CowFileSystem, label: str | None, turn: int | None) -> Checkpoint:
    async with cow._writing():
        return await _record(cow, label, turn)


async def _record(
    cow: CowFileSystem, label: str | None, turn: int | None, summary: Summary | None = None
) -> Checkpoint:
    """Take a checkpoint (``summary``: what it says it holds, else what changed since the last
    one)."""
    durable = await load(cow)
    base, changes = await _changes(cow)
    meta = cow._meta.dumps()
    if summary is None:
        old_meta = _latest_meta(durable)
        summary = await _summary(cow, base, changes, old_meta, cow._meta)
    number = durable.highest + 1
    record = Checkpoint(number, turn, label or None, time.time(), summary)
    link = durable.latest_number
    if link is not None:
        _, depth, size = durable.links[link]
        if depth >= MAX_CHAIN or size + len(changes) > max(64, len(base)):
            link = None  # resolving it would cost more than reading two whole manifests
    with cow._quietly():
        stage = await _stage(cow)
        if link is None:
            data = await write_checkpoint(cow._upper, record, meta, _applied(base, changes), stage)
        else:
            data = await write_checkpoint(cow._upper, record, meta, None, stage, (link, changes))
        if durable.based:
            await cow._upper.unlink(BASE)
            durable.based = False
    durable.records[number] = record
    durable.highest = number
    _link(durable, data)
    if durable.latest is None:
        durable.latest = (_applied({}, changes), meta)
    else:
        _apply(base, changes)  # the durable state's own dict: now the new manifest
        durable.latest = (base, meta)
    durable.latest_meta = cow._meta.copy()
    durable.latest_number = number
    durable.dirty.clear()
    durable.touched.clear()
    return record


async def write_checkpoint(
    upper: PosixFileSystem,
    record: Checkpoint,
    meta: str,
    manifest: Manifest | None,
    stage: str,
    link: tuple[int, Changes] | None = None,
) -> dict[str, Any]:
    """Write checkpoint ``record`` (the cow's record ``meta`` then, and the upper's whole
    ``manifest`` or, as ``link``, the checkpoint it differs from and how) into ``upper``:
    under the temporary name ``stage``, renamed into place (its blobs are there already).
    Answers what was written."""
    summary = record.summary
    data: dict[str, Any] = {
        "number": record.number,
        "turn": record.turn,
        "label": record.label,
        "time": record.time,
        "summary": [summary.added, summary.modified, summary.deleted, summary.bytes],
        "record": meta,
    }
    if link is None:
        data["manifest"] = manifest
    else:
        data["base"], data["changes"] = link
    await _directory(upper, CHECKPOINTS)
    await upper.write(stage, json.dumps(data, separators=(",", ":")))
    await upper.rename(stage, _number_path(record.number))
    return data


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
    small = await _small_files(cow, manifest.items())
    for path in sorted(manifest):
        entry = manifest[path]
        if entry[0] == "directory":
            await upper.mkdir(path, entry[1])
        elif entry[0] == "symlink":
            await upper.symlink(path, entry[2])
        elif entry[0] == "special":
            await make_node(upper, path, entry[2], mode=entry[1], rdev=entry[3])
        else:
            await _put_file(cow, upper, path, entry, small.get(path))
            await upper.setattr(path, mode=entry[1], mtime_ns=entry[3])
    return type(cow)._of_state(cow._lower_tree, upper, CowMeta.loads(meta), subscribe=subscribe)


async def view_of(cow: CowFileSystem, number: int) -> CowFileSystem:
    """Checkpoint ``number`` as a cow of its own (``CowFileSystem.checkpoint_view``)."""
    _known(await load(cow), number)
    return await _view(cow, number)


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
        with cow._quietly():
            # (with the highest number given then: a checkpoint taken after it, whose removal
            # of this note a kill prevented, makes the note stale)
            await _write_note(cow, BASE, number, durable.highest)
        durable.based = True
        durable.latest = (target, meta)
        durable.latest_meta = target_meta.copy()
        durable.latest_number = number
        durable.dirty.clear()
        durable.touched.clear()
        after = Entries(cow)
        for path in sorted(entries):
            if kinds[path] == (await after.get(path)).kind == "directory":
                entries.discard(path)
                directories.add(path)
        changed = outermost(entries | (old_meta.hidden ^ target_meta.hidden))
        await cow._observers.emit_all(
            [(path, "entry") for path in changed]
            + [(path, "metadata") for path in sorted(directories - set(changed))]
        )
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
    small = await _small_files(
        cow, ((path, entry) for path, entry in target.items() if now.get(path) != entry)
    )
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
            await _put_file(cow, upper, stage, entry, small.get(path))
            await upper.setattr(stage, mode=entry[1], mtime_ns=entry[3])
        await upper.rename(stage, path)


async def _small_files(
    cow: CowFileSystem, entries: Iterable[tuple[str, Entry]]
) -> dict[str, bytes]:
    """The bytes of the small files among ``entries`` (path, entry), read in one batch."""
    wanted = [(path, entry) for path, entry in entries if entry[0] == "file" and entry[2] < SMALL]
    found = await _blobs(cow).read_many([(entry[2], entry[4:]) for _, entry in wanted])
    return {path: data for (path, _), data in zip(wanted, found, strict=True)}


async def _put_file(
    cow: CowFileSystem, tree: PosixFileSystem, path: str, entry: Entry, data: bytes | None
) -> None:
    """Make a new file at ``path`` in ``tree`` holding the bytes of the file ``entry`` (``data``
    when they were read already)."""
    if data is not None:
        await tree.write(path, data)
        return
    target = await tree.open(path, write=True, create=True, exclusive=True, mode=0o600)
    try:
        await _blobs(cow).copy_into(entry[2], entry[4:], target)
    finally:
        await target.close()


async def _unlink_checkpoint(cow: CowFileSystem, durable: Durable, number: int) -> None:
    """Remove checkpoint ``number``; the checkpoints whose changes apply to it are written
    again first, on its base (or whole), so every chain stays whole at every moment."""
    upper = cow._upper
    base = durable.links[number][0]
    resting = [n for n, (on, _, _) in durable.links.items() if on == number]
    if resting:
        gone = await _read_file(cow, number)
        for other in sorted(resting):
            data = await _read_file(cow, other)
            record = durable.records[other]
            if base is None:  # the removed one was whole: so is this one now
                manifest = _applied(gone["manifest"], data["changes"])
                data = await write_checkpoint(
                    upper, record, data["record"], manifest, await _stage(cow)
                )
            else:
                changes = {**gone["changes"], **data["changes"]}
                data = await write_checkpoint(
                    upper, record, data["record"], None, await _stage(cow), (base, changes)
                )
            _link(durable, data)
    if number == durable.highest:
        await _write_note(cow, LAST, number)
    await upper.unlink(_number_path(number))
    del durable.records[number]
    del durable.links[number]
    if durable.latest_number == number:
        durable.latest_number = None  # the state is kept in memory; the next one is whole


async def prune(cow: CowFileSystem, keep_last: int) -> list[int]:
    async with cow._writing():
        durable = await load(cow)
        gone = pruned([durable.records[n] for n in sorted(durable.records)], keep_last)
        upper = cow._upper
        with cow._quietly():
            for number in gone:  # (ascending: a base before what rests on it)
                await _unlink_checkpoint(cow, durable, number)
            used: set[tuple[str, str] | None] = set()
            for number in durable.records:
                used.update(map(store_files, _tails(_entries_of(await _read_file(cow, number)))))
            if durable.latest is not None:
                used.update(map(store_files, _tails(durable.latest[0].values())))
            for kind, directory in (("blob", BLOBS), ("pack", PACKS)):
                if (await upper.lstat(directory)).kind != "directory":
                    continue
                for found in [entry.path async for entry in upper.list(directory)]:
                    name = found.rsplit("/", 1)[1]
                    if (kind, name) not in used:
                        await upper.unlink(found)
                        _blobs(cow).forget(kind, name)
        return gone
