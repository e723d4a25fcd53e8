"""The pure spill rewrite: the Result rewrite table, row by row, without an event loop.

Rows: webSearch/webFetch results (host path and follow-up, in strings or ``output_location``;
other tools untouched), synthesized Read/Grep input (``{cwd}/agent-tools/{uuid}.txt`` ->
``/tmp/{uuid}.txt``), and the two-mode table (host-default keeps the host path and the native
follow-up; the overlay has ``/tmp/{uuid}.txt`` and Read / Grep). Adoption with real files is in
``test_spill_adopt.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vfs.turns import (
    SpillScope,
    is_read_or_grep,
    is_web_tool,
    rewrite_result,
    rewrite_tool_input,
    scratch_path,
    spill_references,
)

from .spills import fetch_result, new_uuid, search_chunk

CWD = "/home/me/harness"
OVERLAY = SpillScope(CWD, overlay=True)
HOST = SpillScope(CWD, overlay=False)
U = "52d18021-2e84-4bf6-a5cf-65de0aad7d92"
HOST_PATH = f"{CWD}/agent-tools/{U}.txt"
TMP = f"/tmp/{U}.txt"
ADVICE = f"Use Read or Grep on {TMP}."


def test_tool_names() -> None:
    for name in ("webSearch", "webFetch", "WebSearch", "web_fetch", "web-search", "websearch"):
        assert is_web_tool(name)
    for name in ("mcp", "Read", "shell", "semSearch", "fetch"):
        assert not is_web_tool(name)
    for name in ("Read", "Grep", "read", "read_file", "grep_search", "search"):
        assert is_read_or_grep(name)
    for name in ("LS", "Glob", "Write", "SemanticSearch", "webFetch"):
        assert not is_read_or_grep(name)


def test_the_scope_needs_an_absolute_cwd() -> None:
    with pytest.raises(ValueError, match="the harness cwd must be absolute: 'rel'"):
        SpillScope("rel", overlay=True)
    assert SpillScope.of("rel", overlay=True).cwd == os.path.abspath("rel")
    assert OVERLAY.spill_dir == f"{CWD}/agent-tools"
    assert scratch_path(U) == TMP


# --- webFetch / webSearch results --------------------------------------------------------------


def test_web_fetch_structured_field_and_text_are_rewritten() -> None:
    result = fetch_result(HOST_PATH)
    assert spill_references(result, OVERLAY) == [U]
    assert rewrite_result(result, OVERLAY, [U]) == {
        "url": "https://example.com/big",
        "content": (
            "The page is long; here is the start.\n"
            f"Output was too large and was saved to {TMP}. {ADVICE}"
        ),
        "output_location": TMP,
    }
    assert result["output_location"] == HOST_PATH  # the input is not mutated


def test_web_search_chunk_string_is_rewritten() -> None:
    assert rewrite_result(search_chunk(HOST_PATH), OVERLAY, [U]) == (
        "Result 1: Example Domain (https://example.com)\n"
        f"[Results truncated. Full results saved to {TMP}. {ADVICE}]"
    )


def test_a_nested_output_location_object_is_rewritten() -> None:
    result = {"output_location": {"file_path": HOST_PATH, "size": 123}, "chunks": [HOST_PATH, 7]}
    assert rewrite_result(result, OVERLAY, [U]) == {
        "output_location": {"file_path": TMP, "size": 123},
        "chunks": [TMP, 7],
    }


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # The following sentence is the native follow-up: replaced.
        (f"Saved to {HOST_PATH}. Use grep or read_file.", f"Saved to {TMP}. {ADVICE}"),
        (f"Saved to {HOST_PATH}. Use the shell (cat, head).", f"Saved to {TMP}. {ADVICE}"),
        # No native follow-up: the overlay's is added after the sentence naming the path.
        (f"Saved to {HOST_PATH}", f"Saved to {TMP}. {ADVICE}"),
        (f"Saved to {HOST_PATH}. Bye.", f"Saved to {TMP}. {ADVICE} Bye."),
        # The sentence naming the path is itself the follow-up.
        (f"Use read_file on {HOST_PATH} to see it all.", ADVICE),
        # Brackets and quotes the follow-up closes stay; its own parentheses go with it.
        (f'"Saved to {HOST_PATH}. Use grep."', f'"Saved to {TMP}. {ADVICE}"'),
        (f"Saved to {HOST_PATH}. (Use grep to search.) Bye.", f"Saved to {TMP}. {ADVICE} Bye."),
        # Only the line naming the path changes; other lines keep their words.
        (
            f"grep is a word here.\nSaved to {HOST_PATH}.\nUse cat, says the page.",
            f"grep is a word here.\nSaved to {TMP}. {ADVICE}\nUse cat, says the page.",
        ),
    ],
)
def test_follow_up_in_running_text(text: str, expected: str) -> None:
    assert rewrite_result(text, OVERLAY, [U]) == expected


def test_other_paths_are_ignored() -> None:
    other = new_uuid()
    text = (
        f"/x{HOST_PATH} {HOST_PATH}.bak /elsewhere/agent-tools/{U}.txt "
        f"{CWD}/agent-tools/notes.txt {CWD}/agent-tools/{other}.txt agent-tools/{U}.txt"
    )
    assert spill_references(text, OVERLAY) == [other]
    assert rewrite_result(text, OVERLAY, [U]) is text  # U is named only in non-spill forms
    assert (
        rewrite_result(text, OVERLAY, [other])
        == text.replace(f"{CWD}/agent-tools/{other}.txt", f"/tmp/{other}.txt")
        + f". Use Read or Grep on /tmp/{other}.txt."
    )


def test_only_adopted_uuids_are_rewritten() -> None:
    other = new_uuid()
    text = f"{HOST_PATH}\n{CWD}/agent-tools/{other}.txt"
    rewritten = rewrite_result(text, OVERLAY, [other])
    assert HOST_PATH in rewritten and f"/tmp/{other}.txt" in rewritten
    assert rewrite_result(text, OVERLAY, []) is text


def test_small_results_and_unchanged_values_are_the_same_object() -> None:
    small = {"content": "short page", "url": "https://example.com", "n": [1, 2]}
    assert spill_references(small, OVERLAY) == []
    assert rewrite_result(small, OVERLAY, [U]) is small
    mixed = {"a": {"b": "plain"}, "c": HOST_PATH}
    rewritten = rewrite_result(mixed, OVERLAY, [U])
    assert rewritten["a"] is mixed["a"]  # untouched branches are shared, not copied


def test_keys_and_leaves_other_than_strings_are_never_touched() -> None:
    value = {HOST_PATH: 1, "t": (HOST_PATH, None, 2.5, True)}
    assert rewrite_result(value, OVERLAY, [U]) == {HOST_PATH: 1, "t": (TMP, None, 2.5, True)}


def test_the_resolved_cwd_is_recognized_too(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    scope = SpillScope(str(link), overlay=True)
    for cwd in (link, real):
        text = f"{cwd}/agent-tools/{U}.txt"
        assert rewrite_result(text, scope, [U]) == TMP
        assert scope.spill_uuid(text) == U


def test_host_default_leaves_results_as_the_native_tool_wrote_them() -> None:
    result = fetch_result(HOST_PATH)
    assert rewrite_result(result, HOST, [U]) is result
    assert rewrite_result(search_chunk(HOST_PATH), HOST, [U]) == search_chunk(HOST_PATH)


# --- Read / Grep input -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "arguments", "expected"),
    [
        ("Read", {"path": HOST_PATH, "offset": 10}, {"path": TMP, "offset": 10}),
        ("Read", {"file_path": HOST_PATH}, {"file_path": TMP}),
        ("read_file", {"target_file": HOST_PATH}, {"target_file": TMP}),
        ("Grep", {"pattern": "needle", "path": HOST_PATH}, {"pattern": "needle", "path": TMP}),
        ("grep_search", {"query": "x", "path": f"{CWD}/./agent-tools//{U}.txt"}, None),
    ],
)
def test_read_and_grep_input_with_the_host_path(
    tool: str, arguments: dict[str, object], expected: dict[str, object] | None
) -> None:
    rewritten = rewrite_tool_input(tool, arguments, OVERLAY)
    assert rewritten == (expected or {**arguments, "path": TMP})
    assert arguments.get("path", arguments.get("file_path", arguments.get("target_file"))) != TMP


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("Read", {"path": TMP}),  # already the overlay path
        ("Read", {"path": f"/agent-tools/{U}.txt"}),  # a root path: /agent-tools is not reserved
        ("Read", {"path": f"agent-tools/{U}.txt"}),  # relative: the root's namespace
        ("Read", {"path": f"{CWD}/agent-tools/notes.txt"}),  # not a spill name
        ("Read", {"path": f"{CWD}/agent-tools"}),
        ("Grep", {"pattern": HOST_PATH, "path": "/"}),  # a pattern is not a path
        ("Write", {"path": HOST_PATH, "contents": "x"}),  # only Read and Grep
        ("LS", {"path": HOST_PATH}),
    ],
)
def test_other_inputs_are_returned_as_is(tool: str, arguments: dict[str, object]) -> None:
    assert rewrite_tool_input(tool, arguments, OVERLAY) is arguments


def test_host_default_input_is_returned_as_is() -> None:
    arguments = {"path": HOST_PATH}
    assert rewrite_tool_input("Read", arguments, HOST) is arguments


# --- properties --------------------------------------------------------------------------------

_TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=80)


@settings(max_examples=150, deadline=None)
@given(before=_TEXT, after=_TEXT)
def test_an_adopted_host_path_never_survives_and_the_rest_is_kept(before: str, after: str) -> None:
    text = f"{before} {HOST_PATH} {after}"
    rewritten = rewrite_result(text, OVERLAY, [U])
    assert HOST_PATH not in rewritten
    assert TMP in rewritten
    if text.strip() != HOST_PATH:  # running text gets the follow-up; a bare path does not
        assert "Read or Grep" in rewritten
    # Lines that do not name the spill are kept exactly.
    for line in text.split("\n"):
        if HOST_PATH not in line:
            assert line in rewritten.split("\n")
    # Rewriting again changes nothing.
    assert rewrite_result(rewritten, OVERLAY, [U]) is rewritten


@settings(max_examples=150, deadline=None)
@given(text=_TEXT)
def test_text_without_spill_paths_is_untouched(text: str) -> None:
    assert rewrite_result(text, OVERLAY, [U]) is text
