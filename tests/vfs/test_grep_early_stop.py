"""``grep`` with ``max_results`` is a pushdown: it stops reading files once it has enough hits.

Ten thousand matching files, ``max_results=10``: a tree that honours the pushdown reads about ten
of them. temp_fs counts the files its grep looked into (``_grep_files_read``); for an 8-verb tree
(grep by :func:`vfs.grep_tree`) we count ``read`` calls. Composers are checked the same way
through their children's counters. The bound (100) is loose on purpose: it separates "stops
early" from "reads everything" without pinning an implementation's read-ahead.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing

import anyio
import pytest

import vfs

from .dict_tree import DictTree

FILES = 10_000
DIRS = 100
LIMIT = 10
BOUND = 100  # far fewer than FILES


def corpus(prefix: str = "") -> dict[str, str]:
    return {
        f"{prefix}/d{i % DIRS:03}/f{i:05}.txt": f"header\nneedle {i}\nfooter\n"
        for i in range(FILES)
    }


def files_read(tree: object) -> int:
    if isinstance(tree, DictTree):
        return tree.reads
    count = getattr(tree, "_grep_files_read", None)
    assert isinstance(count, int), f"{tree!r} has no grep read counter"
    return count


async def hits(fs: vfs.FileSystem, query: vfs.GrepQuery) -> list[vfs.GrepResult]:
    async with aclosing(fs.grep(query)) as results:
        return [hit async for hit in results]


def run(backend: str, body: Callable[[], Awaitable[None]]) -> None:
    anyio.run(body, backend=backend)


BACKENDS = pytest.mark.parametrize("backend", ["trio", "asyncio"])


@BACKENDS
def test_temp_fs_grep_stops_early(backend: str) -> None:
    async def body() -> None:
        tree = vfs.temp_fs(corpus())
        found = await hits(tree, vfs.GrepQuery("needle", max_results=LIMIT))
        assert [hit.path for hit in found] == sorted(corpus())[:LIMIT]
        assert LIMIT <= files_read(tree) <= BOUND

    run(backend, body)


@BACKENDS
def test_temp_fs_grep_is_lazy(backend: str) -> None:
    """A consumer that stops after ten hits (no ``max_results``) stops the reading too."""

    async def body() -> None:
        tree = vfs.temp_fs(corpus())
        async with aclosing(tree.grep(vfs.GrepQuery("needle"))) as results:
            count = 0
            async for _ in results:
                count += 1
                if count == LIMIT:
                    break
        assert files_read(tree) <= BOUND

    run(backend, body)


@BACKENDS
def test_eight_verb_tree_grep_stops_early(backend: str) -> None:
    """The generic walker (``vfs.grep_tree``) stops too."""

    async def body() -> None:
        tree = DictTree(corpus())
        found = await hits(tree, vfs.GrepQuery("needle", max_results=LIMIT))
        assert len(found) == LIMIT
        assert tree.reads <= BOUND

    run(backend, body)


def single_mount() -> tuple[vfs.FileSystem, list[object]]:
    child = vfs.temp_fs(corpus())
    return vfs.union_fs({"/": child}), [child]


def two_mounts() -> tuple[vfs.FileSystem, list[object]]:
    left, right = vfs.temp_fs(corpus()), vfs.temp_fs(corpus())
    return vfs.union_fs({"/": left, "/zz": right}), [left, right]


def eight_verb_mounts() -> tuple[vfs.FileSystem, list[object]]:
    left, right = DictTree(corpus()), DictTree(corpus())
    return vfs.union_fs({"/left": left, "/right": right}), [left, right]


def overlay_layers() -> tuple[vfs.FileSystem, list[object]]:
    upper, lower = vfs.temp_fs(), vfs.temp_fs(corpus())
    return vfs.overlay_fs([upper, lower]), [upper, lower]


COMPOSERS: dict[str, Callable[[], tuple[vfs.FileSystem, list[object]]]] = {
    "union_single": single_mount,
    "union_two_mounts": two_mounts,
    "union_eight_verb": eight_verb_mounts,
    "overlay": overlay_layers,
}


@BACKENDS
@pytest.mark.parametrize("name", list(COMPOSERS))
def test_composer_pushes_max_results_down(name: str, backend: str) -> None:
    async def body() -> None:
        fs, children = COMPOSERS[name]()
        found = await hits(fs, vfs.GrepQuery("needle", max_results=LIMIT))
        assert len(found) == LIMIT
        assert [hit.path for hit in found] == sorted(hit.path for hit in found)
        total = sum(files_read(child) for child in children)
        assert total <= BOUND * len(children), total

    run(backend, body)


@BACKENDS
def test_union_grep_is_lazy(backend: str) -> None:
    async def body() -> None:
        fs, children = two_mounts()
        results: AsyncIterator[vfs.GrepResult]
        async with aclosing(fs.grep(vfs.GrepQuery("needle"))) as results:
            count = 0
            async for _ in results:
                count += 1
                if count == LIMIT:
                    break
        assert sum(files_read(child) for child in children) <= 2 * BOUND

    run(backend, body)
