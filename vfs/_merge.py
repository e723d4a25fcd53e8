"""K-way merging of sorted async iterators.

Every FileSystem iterator is already sorted (see ``vfs._types``), so a composer never re-sorts: it
merges its children's streams lazily with a heap, pulling one item per child at a time. That keeps
``max_results`` pushdown effective: a consumer that stops early stops the children early.
"""

from __future__ import annotations

import heapq
from collections.abc import AsyncIterable, AsyncIterator, Callable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


async def merge_sorted(
    sources: Sequence[AsyncIterable[T]], key: Callable[[T], Any]
) -> AsyncIterator[T]:
    """Merge sorted streams into one sorted stream; ties keep the order of ``sources``.

    The sources are closed when the merge stops, early or not."""
    iterators = [aiter(source) for source in sources]
    heap: list[tuple[Any, int, T]] = []
    try:
        for index, iterator in enumerate(iterators):
            try:
                item = await anext(iterator)
            except StopAsyncIteration:
                continue
            heap.append((key(item), index, item))
        heapq.heapify(heap)
        while heap:
            _, index, item = heap[0]
            yield item
            try:
                following = await anext(iterators[index])
            except StopAsyncIteration:
                heapq.heappop(heap)
            else:
                heapq.heapreplace(heap, (key(following), index, following))
    finally:
        for iterator in iterators:
            await aclose(iterator)


async def unique_by_path(source: AsyncIterable[T]) -> AsyncIterator[T]:
    """Drop items whose ``path`` equals the previous one (the first, from the earlier source, wins)."""
    previous: str | None = None
    try:
        async for item in source:
            path: str = item.path  # type: ignore[attr-defined]
            if path != previous:
                previous = path
                yield item
    finally:
        await aclose(source)


async def take(source: AsyncIterable[T], limit: int | None) -> AsyncIterator[T]:
    """At most ``limit`` items of ``source`` (all of them when ``limit`` is None)."""
    try:
        if limit is None:
            async for item in source:
                yield item
            return
        if limit <= 0:
            return
        count = 0
        async for item in source:
            yield item
            count += 1
            if count >= limit:
                return
    finally:
        await aclose(source)


async def deferred(make: Callable[[], AsyncIterator[T]]) -> AsyncIterator[T]:
    """The stream ``make()`` builds, built at the first iteration: a composer's iterator verb
    then raises its argument errors (an invalid grep pattern) there, as every tree whose verb
    is an async generator does, never at the call."""
    stream = make()
    try:
        async for item in stream:
            yield item
    finally:
        await aclose(stream)


async def aclose(source: object) -> None:
    """Close a source that is an async generator (or anything with ``aclose``), once we stop."""
    close = getattr(source, "aclose", None)
    if close is not None:
        await close()


def path_key(item: Any) -> str:
    return item.path  # type: ignore[no-any-return]


def grep_key(item: Any) -> tuple[str, int]:
    return (item.path, item.line_number)


def search_key(item: Any) -> tuple[float, str]:
    return (-item.score, item.path)
