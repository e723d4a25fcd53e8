"""``Pages`` against a plain ``bytearray``: random writes, truncations and reads agree, holes
cost nothing, and blocks count what is stored."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from vfs._pages import PAGE_SIZE, Pages

offsets = st.one_of(st.integers(0, 3 * PAGE_SIZE), st.integers(0, 40 * PAGE_SIZE))
steps = st.lists(
    st.one_of(
        st.tuples(st.just("write"), offsets, st.binary(min_size=0, max_size=2 * PAGE_SIZE + 7)),
        st.tuples(st.just("truncate"), offsets, st.just(b"")),
        st.tuples(st.just("read"), offsets, st.integers(0, 3 * PAGE_SIZE)),
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(steps=steps)
def test_pages_behave_as_a_bytearray(steps: list[tuple[str, int, object]]) -> None:
    pages = Pages()
    model = bytearray()
    for op, offset, arg in steps:
        if op == "write":
            assert isinstance(arg, bytes)
            pages.write(offset, arg)
            if arg:
                if offset > len(model):
                    model.extend(bytes(offset - len(model)))
                model[offset : offset + len(arg)] = arg
        elif op == "truncate":
            pages.truncate(offset)
            if offset < len(model):
                del model[offset:]
            else:
                model.extend(bytes(offset - len(model)))
        else:
            assert isinstance(arg, int)
            assert pages.read(offset, arg) == bytes(model[offset : offset + arg])
        assert len(pages) == len(model)
        assert pages.tobytes() == bytes(model)
        assert pages.stored() <= len(model)
        assert pages.blocks() <= (len(model) + PAGE_SIZE - 1) // PAGE_SIZE * 8


def test_a_far_write_stores_one_page() -> None:
    pages = Pages()
    pages.write(0x14FFFFFFF, b" ")  # what a public regression suite does
    assert len(pages) == 0x150000000
    assert pages.blocks() == 8 and pages.stored() <= PAGE_SIZE
    assert pages.read(0x14FFFFFFF - 2, 8) == b"\0\0 "
    assert pages.read(1 << 30, 16) == bytes(16)
    assert Pages(b"0123456789").stored() == 10  # a small file keeps its bytes, not a page


def test_usage_counts_what_is_stored_and_refuses_past_its_limit() -> None:
    from vfs._pages import NoSpace, Usage

    usage = Usage(limit=3 * PAGE_SIZE)
    a = Pages(b"x" * PAGE_SIZE, usage)
    b = Pages(usage=usage)
    b.write(10 * PAGE_SIZE, b"y" * 100)  # a hole, then 100 bytes
    assert usage.used == PAGE_SIZE + 100
    try:
        b.write(0, b"z" * (2 * PAGE_SIZE))
    except NoSpace:
        pass
    else:
        raise AssertionError("written past the limit")
    assert b.read(0, 4) == bytes(4) and usage.used == PAGE_SIZE + 100  # nothing changed
    b.truncate(10 * PAGE_SIZE + 50)
    assert usage.used == PAGE_SIZE + 50
    del a  # a file let go of gives its bytes back
    assert usage.used == 50
