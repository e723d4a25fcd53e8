"""``max_results`` pushdown through a filter that a child cannot apply itself.

Theory of operation
-------------------
A composer pushes a grep/search cap down to each child ("stop after N hits") and applies it again
after the merge. When the composer must also drop some of a child's hits (a union drops hits in
files that a deeper mount shadows; an overlay drops hits in files an earlier layer owns), the child
may stop at N raw hits of which fewer than N survive, and the merged result would come up short.

:func:`refilled` fixes that without giving up the pushdown: it runs the child with the cap, and
only when the child stopped *at* the cap and too few hits survived does it ask again with a
doubled cap, skipping the hits it already consumed (children are deterministic and sorted, so the
first ``k`` hits of the larger run are the ones already seen). Filtering is rare in practice, so
the common case is exactly one child run with the caller's cap. Everything streams: a consumer
that stops early closes the child's iterator.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

from ._merge import aclose

T = TypeVar("T")


async def refilled(
    run: Callable[[int | None], AsyncIterator[T]],
    cap: int | None,
    keep: Callable[[T], Awaitable[bool]],
) -> AsyncIterator[T]:
    """The items of ``run(cap)`` that ``keep`` accepts, at least ``cap`` of them when there are.

    ``run(limit)`` starts the child stream with ``limit`` pushed down (``None``: no limit).
    """
    if cap is not None and cap <= 0:
        return
    limit = cap
    consumed = 0  # raw items handled over all runs (the prefix to skip when running again)
    kept = 0
    while True:
        raw = 0
        stream = run(limit)
        try:
            async for item in stream:
                raw += 1
                if raw <= consumed:
                    continue
                consumed = raw
                if await keep(item):
                    kept += 1
                    yield item
        finally:
            await aclose(stream)
        if limit is None or cap is None or raw < limit or kept >= cap:
            return
        limit *= 2
