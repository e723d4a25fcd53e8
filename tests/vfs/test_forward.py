"""Forwarding by construction: one table of the verbs, and wrappers that carry exactly the
capabilities of what they wrap.

For each wrapper (policy, audit, both, the sandbox root, the turn root's scratch slot) over each
kind of tree (temp_fs, dir_fs, cow_fs, union_fs, overlay_fs, host_fs, an eight-verb tree,
empty_fs), every optional capability the wrapped tree has is visible through the wrapper, none
it lacks is, and each one works there. The same holds for the open files the composers wrap
(union's prefixed file, cow's lower handle, overlay's read-only handle). The table itself is
checked against the protocols it is built from, so a verb or capability added to a protocol
without a row fails here.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import vfs
from mountd._sandbox import SystemEntry, sandbox_root
from vfs import _types
from vfs._audit import AuditLog, audited_fs
from vfs._capabilities import list_reusing_of
from vfs._forward import FILE_VERBS, TREE_VERBS, ForwardingFile, ForwardingTree, capabilities
from vfs._policy import policy_fs
from vfs.turns import turn_root

from .eightverb import EightVerbTree, run

SEED: dict[str, str | bytes] = {"/d/a.txt": "alpha\n", "/d/b.txt": "beta\n", "/top.txt": "top\n"}

FILE_PROTOCOLS = (_types.OpenFile, _types.StatsOpenFile)
# Every other protocol of the contract is something a tree may have.
TREE_PROTOCOLS = tuple(
    value
    for value in vars(_types).values()
    if isinstance(value, type)
    and getattr(value, "_is_protocol", False)
    and value.__module__.split(".")[0] == "vfs"  # defined in the contract, not imported
    and value not in FILE_PROTOCOLS
)


def _host(root: Path) -> Path:
    for path, text in SEED.items():
        target = root / path[1:]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(str(text))
    return root


TREES: dict[str, Callable[[Path], vfs.FileSystem]] = {
    "temp": lambda tmp: vfs.temp_fs(SEED),
    "dir": lambda tmp: vfs.dir_fs(str(_host(tmp / "host"))),
    "cow": lambda tmp: vfs.cow_fs(vfs.dir_fs(str(_host(tmp / "host")))),
    "union": lambda tmp: vfs.union_fs(
        {"/": vfs.temp_fs(SEED), "/x": vfs.dir_fs(str(_host(tmp / "host")))}
    ),
    "union-of-eight-verbs": lambda tmp: vfs.union_fs({"/": EightVerbTree(SEED)}),
    "overlay": lambda tmp: vfs.overlay_fs(
        [vfs.temp_fs(SEED), vfs.dir_fs(str(_host(tmp / "host")), read_only=True)]
    ),
    "host": lambda tmp: vfs.host_fs(vfs.InMemoryHostFiles(SEED, scope="s"), "s"),
    "eight-verb": lambda tmp: EightVerbTree(SEED),
    "empty": lambda tmp: vfs.empty_fs(),
}

ENTRIES = (SystemEntry("usr", "directory", "ro-bind"),)

WRAPPERS: dict[str, Callable[[vfs.FileSystem], vfs.PosixFileSystem]] = {
    "policy": lambda tree: policy_fs(tree, [("/secret/", "none"), ("/docs/", "read")]),
    "audit": lambda tree: audited_fs(tree, AuditLog(keep=16)),
    "audit+policy": lambda tree: audited_fs(
        policy_fs(tree, [("/secret/", "none")]), AuditLog(keep=16)
    ),
    "sandbox-root": lambda tree: sandbox_root(tree, ENTRIES),
}


def names(found: tuple[Any, ...]) -> set[str]:
    return {verb.name for verb in found}


# --- the table ---------------------------------------------------------------------------


def _members(protocol: type) -> set[str]:
    own = set(vars(protocol)) | set(getattr(protocol, "__annotations__", {}))
    return {
        name
        for name in own
        if not name.startswith("_")
        and (callable(vars(protocol).get(name)) or name not in vars(protocol))
    }


def test_the_protocols_are_found() -> None:
    known = {_types.FileSystem, _types.PosixFileSystem, _types.MakesLinks, _types.BuffersWrites}
    assert known <= set(TREE_PROTOCOLS)


@pytest.mark.parametrize(
    ("table", "protocols"), [(TREE_VERBS, TREE_PROTOCOLS), (FILE_VERBS, FILE_PROTOCOLS)]
)
def test_every_member_of_the_protocols_is_one_row(
    table: tuple[Any, ...], protocols: tuple[type, ...]
) -> None:
    rows = [(verb.name, verb.protocol) for verb in table]
    assert len(rows) == len(set(rows)), "one row per verb"
    declared = {(name, protocol) for protocol in protocols for name in _members(protocol)}
    # A verb is declared where it first appears (PosixFileSystem inherits FileSystem's).
    firsts = {
        (name, protocol)
        for name, protocol in declared
        if not any(name in _members(base) for base in protocol.__mro__[1:] if base in protocols)
    }
    assert set(rows) == firsts
    for verb in table:
        assert verb.optional == (
            verb.protocol not in (_types.FileSystem, _types.PosixFileSystem, _types.OpenFile)
        )


@pytest.mark.parametrize(
    ("base", "table"), [(ForwardingTree, TREE_VERBS), (ForwardingFile, FILE_VERBS)]
)
def test_the_bases_forward_every_contract_verb_with_its_signature(
    base: type, table: tuple[Any, ...]
) -> None:
    for verb in table:
        method = vars(base).get(verb.name)
        if verb.optional:
            assert method is None, f"{verb.name} is optional: only where the inner has it"
            continue
        assert method is not None, f"{base.__name__} does not forward {verb.name}"
        declared = inspect.signature(getattr(verb.protocol, verb.name))
        forwarded = inspect.signature(method)
        assert [(p.name, p.kind, p.default) for p in forwarded.parameters.values()] == [
            (p.name, p.kind, p.default) for p in declared.parameters.values()
        ]


def test_paths_name_parameters_and_open_writes_by_its_flags() -> None:
    by_name = {verb.name: verb for verb in TREE_VERBS}
    opening = by_name["open"]
    reading = (FILE, False, False, False, False, 0o644, None, None)
    assert not opening.changes(reading)
    assert opening.changes((FILE, False, True, False, False, 0o644, None, None))
    assert (
        opening.access(opening.paths[0], (FILE, True, False, False, False, 0, None, None))
        == "write"
    )
    assert by_name["rename"].path_values(("/a", "/b", False, False)) == ("/a", "/b")
    assert by_name["grep"].path_values((vfs.GrepQuery("x", "/d"),)) == ("/d",)
    assert [verb.name for verb in TREE_VERBS if verb.plain_look] == ["lstat", "readlink"]


FILE = "/d/a.txt"


# --- wrappers over every kind of tree -----------------------------------------------------


async def _check_capabilities_work(wrapper: Any, inner: Any, present: set[str]) -> None:
    """Each capability ``wrapper`` shows answers what ``inner``'s does."""
    if "buffers_writes" in present:
        assert wrapper.buffers_writes == inner.buffers_writes
    if "list_info" in present:
        assert await wrapper.list_info("/d") == await inner.list_info("/d")
    if "list_info_reusing" in present:
        assert await wrapper.list_info_reusing("/d", {}) == await inner.list_info_reusing("/d", {})
    if "read_bytes" in present:
        assert await wrapper.read_bytes(FILE) == await inner.read_bytes(FILE)
    if "watch" in present:
        seen: list[vfs.Change] = []
        unsubscribe = wrapper.watch(seen.append)
        try:
            await wrapper.write("/d/new.txt", "new")
        except vfs.ReadOnlyMountError:
            pass  # (overlay, empty)
        else:
            assert "/d/new.txt" in {change.path for change in seen}
        unsubscribe()
    if "link" in present:
        try:
            await wrapper.link(FILE, "/d/again.txt")
        except vfs.PathError:
            pass  # a tree that refuses here (read-only, EPERM) refuses through the wrapper too
        else:
            assert (await inner.lstat("/d/again.txt")).nlink == 2
    if "mknod" in present:
        try:
            await wrapper.mknod("/d/pipe", "fifo")
        except vfs.PathError:
            pass
        else:
            assert (await inner.lstat("/d/pipe")).special == "fifo"


@pytest.mark.parametrize("tree_kind", sorted(TREES))
@pytest.mark.parametrize("wrapper_kind", sorted(WRAPPERS))
def test_a_wrapper_has_exactly_the_capabilities_of_what_it_wraps(
    tmp_path: Path, wrapper_kind: str, tree_kind: str
) -> None:
    async def body() -> None:
        tree = TREES[tree_kind](tmp_path)
        inner = vfs.posix_view(tree)
        wrapper = WRAPPERS[wrapper_kind](tree)
        present = names(capabilities(TREE_VERBS, inner))
        assert names(capabilities(TREE_VERBS, tree)) <= present  # the view keeps the tree's
        assert names(capabilities(TREE_VERBS, wrapper)) == present
        assert isinstance(wrapper, vfs.PosixFileSystem)
        assert isinstance(wrapper, vfs.MakesLinks) == ("link" in present)
        assert isinstance(wrapper, vfs.ListsReusing) == ("list_info_reusing" in present)
        assert isinstance(wrapper, vfs.Watchable) == ("watch" in present)
        await _check_capabilities_work(wrapper, inner, present)

    run("trio", body)


def test_the_scratch_slot_has_what_a_temp_fs_has() -> None:
    async def body() -> None:
        root = turn_root(vfs.temp_fs(SEED))
        slot = root.mounts["/tmp"]
        assert names(capabilities(TREE_VERBS, slot)) == names(
            capabilities(TREE_VERBS, vfs.temp_fs())
        )
        assert slot.buffers_writes is False  # type: ignore[attr-defined]
        await root.write("/tmp/d/x.txt", "x")
        assert await slot.list_info_reusing("/d", {}) == await root.scratch.list_info_reusing(  # type: ignore[attr-defined]
            "/d", {}
        )
        turn = await root.begin_turn()
        assert await slot.list_info("/") == []  # type: ignore[attr-defined]
        await turn.end()

    run("trio", body)


# --- open files the composers wrap --------------------------------------------------------

FILE_WRAPPERS: dict[str, Callable[[vfs.FileSystem], tuple[vfs.PosixFileSystem, str]]] = {
    "union-prefix": lambda tree: (vfs.union_fs({"/m": tree}), "/m" + FILE),
    "cow-lower": lambda tree: (vfs.cow_fs(tree), FILE),
    "overlay": lambda tree: (vfs.overlay_fs([tree]), FILE),
}


@pytest.mark.parametrize("tree_kind", sorted(set(TREES) - {"empty"}))
@pytest.mark.parametrize("wrapper_kind", sorted(FILE_WRAPPERS))
def test_a_wrapped_open_file_has_exactly_the_capabilities_of_the_file(
    tmp_path: Path, wrapper_kind: str, tree_kind: str
) -> None:
    async def body() -> None:
        tree = TREES[tree_kind](tmp_path)
        plain = await vfs.posix_view(tree).open(FILE)
        composed, path = FILE_WRAPPERS[wrapper_kind](tree)
        wrapped = await composed.open(path)
        try:
            assert isinstance(wrapped, ForwardingFile)  # the composer's own handle
            present = names(capabilities(FILE_VERBS, plain))
            assert names(capabilities(FILE_VERBS, wrapped)) == present
            assert isinstance(wrapped, vfs.StatsOpenFile) == ("stat" in present)
            assert await wrapped.read(0, 100) == await plain.read(0, 100)
            if "stat" in present:
                info = await wrapped.stat()  # type: ignore[attr-defined]
                shown = await composed.lstat(path)
                assert (info.kind, info.size, info.mode, info.mtime_ns) == (
                    shown.kind,
                    shown.size,
                    shown.mode,
                    shown.mtime_ns,
                )
                assert info.file_id == shown.file_id
        finally:
            await wrapped.close()
            await plain.close()

    run("trio", body)


# --- list_info_reusing through the composers ----------------------------------------------


def test_the_default_mount_lists_reusing_what_it_knows(tmp_path: Path) -> None:
    """``mountd mount``'s default tree (a turn root over an audited union of a cow over the
    directory and a scratch /tmp) can list reusing, and answers what list_info does."""

    async def body() -> None:
        host = _host(tmp_path / "host")
        default = turn_root(
            audited_fs(
                vfs.union_fs({"/": vfs.cow_fs(vfs.dir_fs(str(host))), "/tmp": vfs.temp_fs()}),
                AuditLog(keep=16),
            )
        )
        assert isinstance(default, vfs.ListsReusing)
        await default.write("/tmp/t.txt", "t")
        for directory in ("/", "/d", "/tmp"):
            plain = [
                (entry.path.rsplit("/", 1)[1], info)
                for entry, info in await default.list_info(directory)
            ]
            assert await default.list_info_reusing(directory, {}) == plain
            assert await default.list_info_reusing(directory, dict(plain)) == plain

    run("trio", body)


def test_a_union_lists_reusing_only_where_a_mount_can(tmp_path: Path) -> None:
    assert list_reusing_of(vfs.union_fs({"/": vfs.temp_fs()})) is not None
    assert list_reusing_of(vfs.union_fs({"/": EightVerbTree(SEED)})) is None
    assert list_reusing_of(vfs.union_fs({"/": vfs.empty_fs(), "/t": vfs.temp_fs()})) is not None


def test_cow_lists_reusing_what_it_showed_and_only_for_the_same_file(tmp_path: Path) -> None:
    async def body() -> None:
        host = _host(tmp_path / "host")
        (host / "d" / "linked.txt").hardlink_to(host / "d" / "b.txt")
        cow = vfs.cow_fs(vfs.dir_fs(str(host)))
        assert isinstance(cow, vfs.ListsReusing)
        await cow.setattr("/d/a.txt", atime_ns=10**18, mtime_ns=10**18)  # times, not copied
        await cow.write("/d/new.txt", "new")  # upper
        await cow.unlink("/top.txt")  # a whiteout
        named = [(entry.path[3:], info) for entry, info in await cow.list_info("/d")]
        assert [name for name, _ in named] == ["a.txt", "b.txt", "linked.txt", "new.txt"]
        assert dict(named)["a.txt"].mtime_ns == 10**18
        assert await cow.list_info_reusing("/d", {}) == named
        assert await cow.list_info_reusing("/d", dict(named)) == named
        assert [name for name, _ in await cow.list_info_reusing("/", {})] == ["d"]
        # A FileInfo of another file (the host replaced it) is not answered for this one.
        stale = dict(named)
        (host / "d" / "b.txt").unlink()
        (host / "d" / "b.txt").write_text("replaced, longer\n")
        fresh = dict(await cow.list_info_reusing("/d", stale))
        assert fresh["b.txt"].size == len("replaced, longer\n")

    run("trio", body)
