"""Which pages a write(2) through the mount leaves only partly written in the kernel's cache
(``mountd._pages.track_partial_pages``): the pages handed over when the writer sets the times."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mountd._pages import PAGE_SIZE, runs_of, track_partial_pages


def test_a_write_inside_one_page_leaves_it_partial() -> None:
    pages: set[int] = set()
    track_partial_pages(pages, 10, 100)
    assert pages == {0}


def test_tar_records_leave_one_page_in_five() -> None:
    pages: set[int] = set()
    for start in range(0, 5 * 10240, 10240):
        track_partial_pages(pages, start, start + 10240)
    # 10240, 30720 and the end, 51200, fall inside pages; 20480 and 40960 on boundaries.
    assert pages == {2, 7, 12}


def test_a_write_covering_a_partial_page_whole_forgets_it() -> None:
    pages: set[int] = set()
    track_partial_pages(pages, 0, 100)
    track_partial_pages(pages, 0, 2 * PAGE_SIZE)
    assert not pages


@given(st.lists(st.tuples(st.integers(0, 40_000), st.integers(1, 20_000)), max_size=30))
def test_the_tracked_pages_are_those_the_kernel_leaves_invalid(
    writes: list[tuple[int, int]],
) -> None:
    """Against a model of the kernel's rule: a page becomes valid when one write covers it
    whole and stays so; a page a write touches only in part, and was not valid, is not."""
    pages: set[int] = set()
    valid: set[int] = set()
    touched: set[int] = set()
    for off, length in writes:
        end = off + length
        track_partial_pages(pages, off, end)
        for page in range(off // PAGE_SIZE, (end - 1) // PAGE_SIZE + 1):
            touched.add(page)
            if off <= page * PAGE_SIZE and (page + 1) * PAGE_SIZE <= end:
                valid.add(page)
    invalid = touched - valid
    # Every page the kernel holds invalid is tracked (a tracked page may be valid already:
    # storing it again is harmless).
    assert invalid <= pages


def testruns_of() -> None:
    assert runs_of([]) == []
    assert runs_of([1, 2, 3, 7, 9, 10]) == [(1, 3), (7, 7), (9, 10)]
