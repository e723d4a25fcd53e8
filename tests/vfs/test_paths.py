import errno

import pytest
from hypothesis import given
from hypothesis import strategies as st

import vfs
from vfs._paths import is_under, normalize_path

segments = st.sampled_from(["a", "b", "agent", "agent-tools", ".", "..", "", "x y", "é"])
raw_paths = st.lists(segments, max_size=8).map(lambda parts: "/".join(parts)) | st.builds(
    lambda p: "/" + p, st.lists(segments, max_size=8).map("/".join)
)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("", "/"),
        ("/", "/"),
        ("a", "/a"),
        ("/a/", "/a"),
        ("/a//b/./c", "/a/b/c"),
        ("/a/../b", "/b"),
        ("/../../etc", "/etc"),
        ("foo/../memory/x", "/memory/x"),
        ("./memory/x", "/memory/x"),
    ],
)
def test_normalize_examples(raw: str, expected: str) -> None:
    assert normalize_path(raw) == expected


def test_nul_and_long_segments_are_refused() -> None:
    with pytest.raises(vfs.InvalidPathError) as caught:
        normalize_path("/a\0b")
    assert caught.value.errno == errno.EINVAL
    assert isinstance(caught.value, ValueError)
    with pytest.raises(vfs.InvalidPathError) as caught:
        normalize_path("/" + "x" * 256)
    assert caught.value.errno == errno.ENAMETOOLONG
    assert normalize_path("/" + "x" * 255) == "/" + "x" * 255


@given(raw_paths)
def test_normalize_is_idempotent_and_rooted(raw: str) -> None:
    once = normalize_path(raw)
    assert normalize_path(once) == once
    assert once.startswith("/")
    assert once == "/" or not once.endswith("/")
    assert ".." not in once.split("/") and "." not in once.split("/")


@given(raw_paths, raw_paths)
def test_dotdot_never_escapes_the_root(base: str, rest: str) -> None:
    joined = normalize_path(normalize_path(base) + "/" + "../" * 20 + rest)
    assert joined == normalize_path("/" + rest)


@given(raw_paths, raw_paths)
def test_segment_prefix(a: str, b: str) -> None:
    path, prefix = normalize_path(a), normalize_path(b)
    expected = prefix == "/" or path == prefix or path.startswith(prefix + "/")
    assert is_under(path, prefix) == expected
    assert (
        is_under(path + "-tools" if path != "/" else "/x-tools", path if path != "/" else "/x")
        is False
    )


def test_agent_does_not_cover_agent_tools() -> None:
    assert is_under("/agent/skills", "/agent")
    assert not is_under("/agent-tools", "/agent")
