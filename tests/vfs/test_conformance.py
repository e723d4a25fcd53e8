"""The conformance suite (``tests/vfs/conformance.py``) over every composition, on trio and asyncio.

Each composition is a factory that builds a fresh tree seeded with given files, and the
capabilities that decide which rules it runs. Multi-mount unions spread the seed across mounts
so that the very same expectations hold through mount points; the split overlay puts decoys in
the lower layer under every file the upper layer holds, so any leak of a shadowed file shows.
Every composition x rule x backend is its own test id (``temp-grep_max_results-trio``).
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest

import vfs
from vfs._content import encode_contents

from .conformance import (
    RULES,
    Capabilities,
    Files,
    Harness,
    Rule,
    Subject,
    check_filesystem,
    rules_for,
)
from .dict_tree import DictTree

BACKENDS = ["trio", "asyncio"]


@dataclass(frozen=True)
class Composition:
    name: str
    caps: Capabilities
    build: Callable[[Path, Files], Awaitable[Subject]]


def write_host_tree(root: Path, files: Files) -> Path:
    """Seed a host directory with ``files`` (contract paths below ``root``)."""
    root.mkdir(parents=True)
    for path, contents in files.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(encode_contents(contents))
    return root


def spread(files: Files, candidates: list[str]) -> dict[str, dict[str, str | bytes]]:
    """Split ``files`` across ``/`` and every candidate prefix that is a directory of the seed
    (longest prefix wins); each part holds child-relative paths."""
    dirs = {p.rsplit("/", i)[0] for p in files for i in range(1, p.count("/"))}
    mounts = ["/", *(prefix for prefix in candidates if prefix in dirs)]
    parts: dict[str, dict[str, str | bytes]] = {mount: {} for mount in mounts}
    for path, contents in files.items():
        mount = max(
            (m for m in mounts if m == "/" or path.startswith(m + "/")), key=len, default="/"
        )
        parts[mount][path if mount == "/" else path[len(mount) :]] = contents
    return parts


MOUNT_CANDIDATES = ["/src", "/src/nested", "/docs", "/agent", "/img"]


async def build_temp(tmp: Path, files: Files) -> Subject:
    return Subject(vfs.temp_fs(dict(files)))


async def build_empty(tmp: Path, files: Files) -> Subject:
    assert not files, "empty_fs holds no files"
    return Subject(vfs.empty_fs())


async def build_union_single(tmp: Path, files: Files) -> Subject:
    return Subject(vfs.union_fs({"/": vfs.temp_fs(dict(files))}))


async def build_union_multi(tmp: Path, files: Files) -> Subject:
    parts = spread(files, MOUNT_CANDIDATES)
    return Subject(vfs.union_fs({mount: vfs.temp_fs(part) for mount, part in parts.items()}))


async def build_union_mixed(tmp: Path, files: Files) -> Subject:
    """Mounts alternate between temp_fs, dir_fs and a user's 8-verb tree."""
    parts = spread(files, MOUNT_CANDIDATES)
    mounts: dict[str, vfs.FileSystem] = {}
    for index, (mount, part) in enumerate(sorted(parts.items())):
        if index % 3 == 0:
            mounts[mount] = vfs.temp_fs(part)
        elif index % 3 == 1:
            mounts[mount] = vfs.dir_fs(write_host_tree(tmp / f"m{index}", part))
        else:
            mounts[mount] = DictTree(part)
    return Subject(vfs.union_fs(mounts))


async def build_overlay(tmp: Path, files: Files) -> Subject:
    return Subject(vfs.overlay_fs([vfs.temp_fs(), vfs.temp_fs(dict(files))]))


def decoy(contents: str | bytes) -> str | bytes:
    if isinstance(contents, bytes):
        return b"\x00decoy" + contents
    return "TODO decoy\nbeta decoy\nalpha decoy\n" + contents + "\nBETA decoy"


async def build_overlay_split(tmp: Path, files: Files) -> Subject:
    """Every other file lives in the upper layer; the lower holds every file, with decoys under
    the upper's, and the middle layer is an 8-verb tree holding nothing."""
    names = sorted(files)
    upper = {path: files[path] for path in names[::2]}
    lower = {path: decoy(files[path]) if path in upper else files[path] for path in names}
    return Subject(vfs.overlay_fs([vfs.temp_fs(upper), DictTree(), vfs.temp_fs(lower)]))


async def build_host(tmp: Path, files: Files) -> Subject:
    return Subject(vfs.host_fs(vfs.InMemoryHostFiles(files, scope="agent"), "agent"))


async def build_dir(tmp: Path, files: Files) -> Subject:
    return Subject(vfs.dir_fs(write_host_tree(tmp / "root", files)))


async def build_dir_read_only(tmp: Path, files: Files) -> Subject:
    return Subject(vfs.dir_fs(write_host_tree(tmp / "root", files), read_only=True))


async def build_local(tmp: Path, files: Files) -> Subject:
    cwd = write_host_tree(tmp / "cwd", files).resolve()
    return Subject(vfs.local_file_system(cwd), host_root=str(cwd))


async def build_posix_view(tmp: Path, files: Files) -> Subject:
    return Subject(vfs.posix_view(DictTree(files)))


async def build_dict_tree(tmp: Path, files: Files) -> Subject:
    return Subject(DictTree(files))


READ_ONLY = Capabilities(writable=False, has_posix=True)

COMPOSITIONS = [
    Composition("dict_tree", Capabilities(), build_dict_tree),
    Composition("temp", Capabilities(has_posix=True), build_temp),
    Composition("empty", Capabilities(writable=False, seedable=False, has_posix=True), build_empty),
    Composition("union_single", Capabilities(has_posix=True), build_union_single),
    Composition("union_multi", Capabilities(has_posix=True), build_union_multi),
    Composition("union_mixed", Capabilities(has_posix=True), build_union_mixed),
    Composition("overlay", READ_ONLY, build_overlay),
    Composition("overlay_split", READ_ONLY, build_overlay_split),
    Composition("host", Capabilities(), build_host),
    Composition("dir", Capabilities(has_posix=True), build_dir),
    Composition("dir_read_only", READ_ONLY, build_dir_read_only),
    Composition("local", Capabilities(host_paths=True), build_local),
    Composition("posix_view", Capabilities(has_posix=True), build_posix_view),
]


def run(backend: str, fn: Callable[[], Awaitable[None]]) -> None:
    anyio.run(fn, backend=backend)


def harness_for(composition: Composition, tmp_path: Path) -> Harness:
    counter = itertools.count()

    async def make(files: Files) -> Subject:
        return await composition.build(tmp_path / f"tree{next(counter)}", files)

    return Harness(make, composition.caps)


CASES = [
    pytest.param(composition, rule, id=f"{composition.name}-{rule.name}")
    for composition in COMPOSITIONS
    for rule in rules_for(composition.caps)
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("composition", "rule"), CASES)
def test_conformance(composition: Composition, rule: Rule, backend: str, tmp_path: Path) -> None:
    harness = harness_for(composition, tmp_path)

    async def body() -> None:
        await rule.check(harness)

    run(backend, body)


def test_every_rule_runs_somewhere() -> None:
    covered = {rule.name for composition in COMPOSITIONS for rule in rules_for(composition.caps)}
    assert covered == {rule.name for rule in RULES}


def test_spread_uses_nested_mounts() -> None:
    parts = spread({"/a.txt": "a", "/src/b.ts": "b", "/src/nested/c.ts": "c"}, MOUNT_CANDIDATES)
    assert parts == {"/": {"/a.txt": "a"}, "/src": {"/b.ts": "b"}, "/src/nested": {"/c.ts": "c"}}


@pytest.mark.parametrize("backend", BACKENDS)
def test_check_filesystem_over_a_user_tree(backend: str) -> None:
    """The one-call entry point, as an author of a tree would use it."""

    async def make(files: Files) -> Subject:
        return Subject(DictTree(files))

    async def body() -> None:
        await check_filesystem(make, Capabilities())

    run(backend, body)
