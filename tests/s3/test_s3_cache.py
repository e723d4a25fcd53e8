"""``vfs._s3_cache.StoreCache``: validity, ordering of answers, listings, bodies (no store)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from vfs._s3_cache import DIRECTORY_META, MISSING_META, Meta, StoreCache, ancestor_keys


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def file(etag: str, size: int = 1) -> Meta:
    return Meta("file", size, 0, etag)


def make(ttl: float = 1.0, **options: int) -> tuple[StoreCache, Clock]:
    clock = Clock()
    return StoreCache(ttl, clock=clock, **options), clock  # type: ignore[arg-type]


def test_ancestor_keys() -> None:
    assert list(ancestor_keys("s/a/b.txt")) == ["s/a", "s", ""]
    assert list(ancestor_keys("top")) == [""]
    assert list(ancestor_keys("")) == []


def test_answers_are_valid_for_ttl_from_when_they_were_asked() -> None:
    cache, clock = make(ttl=1.0)
    ticket = cache.ticket()
    clock.now += 0.7  # the request took 0.7 s
    cache.observe("s/a", file('"1"'), ticket)
    assert cache.fresh("s/a") == file('"1"')
    clock.now += 0.3
    assert cache.fresh("s/a") == file('"1"')
    clock.now += 0.01
    assert cache.fresh("s/a") is None
    assert cache.known("s/a") == file('"1"')  # kept past validity


def test_ttl_zero_never_answers() -> None:
    cache, clock = make(ttl=0.0)
    cache.observe("a", file('"1"'), cache.ticket())
    clock.now += 0.001
    assert cache.fresh("a") is None


def test_a_newer_answer_with_other_bytes_is_a_change() -> None:
    cache, _ = make()
    assert not cache.observe("a", file('"1"'), cache.ticket())
    assert not cache.observe("a", file('"1"'), cache.ticket())
    assert cache.observe("a", file('"2"'), cache.ticket())
    # Appearing, disappearing, or a directory: not content changes.
    assert not cache.observe("a", MISSING_META, cache.ticket())
    assert not cache.observe("a", file('"3"'), cache.ticket())
    assert not cache.observe("d", DIRECTORY_META, cache.ticket())


def test_our_own_write_is_not_a_change() -> None:
    cache, _ = make()
    cache.observe("s/a", file('"1"'), cache.ticket())
    cache.wrote("s/a", file('"2"'), cache.ticket())
    assert not cache.observe("s/a", file('"2"'), cache.ticket())
    assert cache.fresh("s/a") == file('"2"')


def test_a_slow_read_never_undoes_the_write_that_overtook_it() -> None:
    cache, _ = make()
    cache.observe("s/a", file('"1"'), cache.ticket())
    read = cache.ticket()  # GET sent...
    write = cache.ticket()  # ...PUT sent and answered first
    cache.wrote("s/a", file('"2"'), write)
    assert not cache.observe("s/a", file('"1"'), read)  # the GET's old answer arrives late
    assert cache.known("s/a") == file('"2"')
    assert cache.fresh("s/a") is None  # overlapped: ask the store next time


def test_overlapping_reads_that_differ_report_a_change() -> None:
    cache, _ = make()
    first = cache.ticket()
    second = cache.ticket()
    cache.observe("a", file('"1"'), second)
    assert cache.observe("a", file('"2"'), first)
    assert cache.fresh("a") is None


def test_unsure_makes_the_next_access_ask() -> None:
    cache, _ = make()
    cache.observe("s/a", file('"1"'), cache.ticket())
    cache.unsure("s/a")
    assert cache.fresh("s/a") is None
    assert cache.known("s/a") == file('"1"')


def test_a_valid_listing_answers_children_and_their_absence() -> None:
    cache, clock = make(ttl=1.0)
    cache.observe_listing("s", {"a": file('"1"'), "d": DIRECTORY_META}, cache.ticket())
    assert cache.fresh_listing("s") == {"a": file('"1"'), "d": DIRECTORY_META}
    assert cache.fresh("s/a") == file('"1"')
    assert cache.fresh("s/d") == DIRECTORY_META
    assert cache.fresh("s/nope") == MISSING_META
    clock.now += 2
    assert cache.fresh_listing("s") is None
    assert cache.fresh("s/nope") is None
    assert cache.known_listing("s") == {"a": file('"1"'), "d": DIRECTORY_META}


def test_a_listing_reports_changed_files() -> None:
    cache, _ = make()
    cache.observe("s/a", file('"1"'), cache.ticket())
    cache.observe("s/b", file('"1"'), cache.ticket())
    changed = cache.observe_listing("s", {"a": file('"2"'), "b": file('"1"')}, cache.ticket())
    assert changed == ["s/a"]
    # A name that left the listing is missing now (not a content change).
    assert cache.observe_listing("s", {"b": file('"1"')}, cache.ticket()) == []
    assert cache.known("s/a") == MISSING_META


def test_writes_and_deletes_keep_cached_listings_exact() -> None:
    cache, _ = make()
    cache.observe_listing("", {"s": DIRECTORY_META}, cache.ticket())
    cache.observe_listing("s", {"a": file('"1"')}, cache.ticket())
    cache.wrote("s/new/deep.txt", file('"9"'), cache.ticket())
    assert cache.fresh_listing("s") == {"a": file('"1"'), "new": DIRECTORY_META}
    assert cache.fresh("s/new") == DIRECTORY_META
    assert cache.fresh("s/new/deep.txt") == file('"9"')
    cache.removed("s/a", cache.ticket())
    assert cache.fresh_listing("s") == {"new": DIRECTORY_META}
    assert cache.fresh("s/a") == MISSING_META


def test_a_listing_whose_details_were_evicted_is_not_used() -> None:
    cache, _ = make(max_entries=2)
    cache.observe_listing(
        "s", {"a": file('"1"'), "b": file('"1"'), "c": file('"1"')}, cache.ticket()
    )
    assert cache.fresh_listing("s") is None
    assert cache.fresh("s/a") is None  # listed, but its details are gone


def test_bodies_follow_the_etag_and_the_size_bound() -> None:
    cache, _ = make(max_body_bytes=40)
    cache.keep_body("a", '"1"', b"x" * 10)
    assert cache.body("a") == ('"1"', b"x" * 10)
    cache.observe("a", file('"2"'), cache.ticket())  # other bytes now: the kept ones are useless
    assert cache.body("a") is None
    cache.keep_body("big", '"1"', b"x" * 11)  # over a quarter of the cache: not kept
    assert cache.body("big") is None
    for name in "bcdef":
        cache.keep_body(name, '"1"', b"x" * 10)
    assert cache.body("b") is None  # least recently used went first
    assert cache.body("f") is not None
    cache.observe("f", MISSING_META, cache.ticket())
    assert cache.body("f") is None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(['"1"', '"2"', '"3"', None]), min_size=1, max_size=12))
def test_sequential_answers_model(etags: list[str | None]) -> None:
    """Answers that never overlap: the cache holds the last one, and a change is reported exactly
    when a file's etag differs from the previous answer's file etag."""
    cache, _ = make()
    previous: Meta | None = None
    for etag in etags:
        meta = MISSING_META if etag is None else file(etag)
        changed = cache.observe("k", meta, cache.ticket())
        expected = (
            previous is not None
            and previous.kind == "file"
            and meta.kind == "file"
            and previous.etag != meta.etag
        )
        assert changed == expected
        assert cache.fresh("k") == meta
        previous = meta
