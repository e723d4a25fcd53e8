"""The pure cores: the marker block text, config merging, and the recovery decision."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcpstage import UsageError, _config, _exclude, _journal, _locks, _manifest, _owner
from mcpstage._manifest import Lease, Pending, Quarantine, ServerEntry, State

OWNER = _owner.Process(pid=42, hostname="h", boot_id="b", start=7)


def lease(n: int, entry: ServerEntry | None = None) -> Lease:
    key = f"fusion-custom-tools-0000000{n}-0000-4000-8000-000000000000"
    return Lease(key, entry or ServerEntry("node", (f"s{n}.js",)), OWNER, 1.0, 2.0, 120.0)


# --- the marker block -------------------------------------------------------------------------

texts = st.one_of(
    st.none(),
    st.binary(max_size=60),
    st.lists(st.sampled_from([b"*.o\n", b"# c\n", b"x", b"\n", b"\xff\xfe", b"a b\r\n"])).map(
        b"".join
    ),
)
ids = st.sampled_from([".", "worktrees/wt", "worktrees/a b", "worktrees/\u00e9"])


@settings(max_examples=300, deadline=None)
@given(texts, st.lists(ids, unique=True, min_size=1, max_size=3), st.randoms())
def test_removing_every_block_restores_the_file_byte_for_byte(
    text: bytes | None, worktrees: list[str], order: object
) -> None:
    current = text
    for wid in worktrees:
        current = _exclude.add(current, _exclude.Marker(wid, cursor_created=True))
        assert _exclude.find(current, wid) is not None
    removal = list(worktrees)
    order.shuffle(removal)  # type: ignore[attr-defined]
    for wid in removal:
        assert current is not None
        current, gone = _exclude.remove(current, wid)
        assert gone is not None and gone.cursor_created
    assert current == text


@settings(max_examples=100, deadline=None)
@given(texts, st.binary(max_size=20))
def test_operator_lines_added_after_the_block_survive_its_removal(
    text: bytes | None, later: bytes
) -> None:
    added = _exclude.add(text, _exclude.Marker("."))
    current, _gone = _exclude.remove(added + later, ".")
    assert later in (current or b"")
    assert (text or b"") in (current or b"")


def test_the_block_lists_the_session_file_patterns() -> None:
    block = _exclude.render(_exclude.Marker("worktrees/wt", cursor_created=True))
    assert block == (
        b"# >>> mcpstage worktrees/wt cursor-created >>> MCP session files; managed by mcpstage\n"
        b"/.cursor/mcp.json\n"
        b"/.cursor/.fusion-mcp*\n"
        b"# <<< mcpstage worktrees/wt <<<\n"
    )


def test_an_unterminated_block_is_operator_text() -> None:
    text = b"# >>> mcpstage . - >>> x\n/.cursor/mcp.json\n"
    assert _exclude.find(text, ".") is None
    assert _exclude.remove(text, ".") == (text, None)


# --- config merging ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [b"", b"nope", b"[]", b'{"mcpServers": []}', b'{"a": NaN}', b"{,}"],
)
def test_unparsable_configs(raw: bytes) -> None:
    assert _config.parse(raw) is None
    with pytest.raises(ValueError):
        _config.compose(raw, [lease(1)])


PAIR = re.compile("[\ud800-\udbff][\udc00-\udfff]")
number_texts = st.from_regex(r"\A-?(0|[1-9][0-9]{0,30})(\.[0-9]{1,20})?([eE][+-]?[0-9]{1,4})?\Z")
json_values = st.recursive(
    st.none()
    | st.booleans()
    | number_texts.map(_config.Number)
    # Any text, lone surrogates too; a high one right before a low one is one character to a
    # JSON reader (and parse never yields that pair), so none is generated.
    | st.text(st.characters(exclude_categories=()), max_size=8).filter(
        lambda text: not PAIR.search(text)
    ),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=6), json_values, max_size=4))
def test_operator_values_round_trip_exactly(value: dict[str, object]) -> None:
    data = _config.serialize(value)
    data.decode("utf-8")  # always valid UTF-8, even for lone surrogates
    assert json.loads(data, parse_constant=lambda name: pytest.fail(name)) is not None
    assert _config.parse(data) == value  # every number's text, every string, key order
    assert _config.serialize(_config.parse(data) or {}) == data


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.text(max_size=6),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=8),
            lambda children: (
                st.lists(children, max_size=3)
                | st.dictionaries(st.text(max_size=4), children, max_size=3)
            ),
            max_leaves=12,
        ),
        max_size=4,
    )
)
def test_the_layout_is_json_dumps_indent_2(value: dict[str, object]) -> None:
    expected = json.dumps(value, indent=2, ensure_ascii=False) + "\n"
    assert _config.serialize(value) == expected.encode("utf-8")


@pytest.mark.parametrize(
    ("text", "written"),
    [
        (b'{"n": 1e400}', b'{\n  "n": 1e400\n}\n'),
        (b'{"n": [1.0, -0, 1E+2]}', b'{\n  "n": [\n    1.0,\n    -0,\n    1E+2\n  ]\n}\n'),
        (b'{"s": "\\ud800"}', b'{\n  "s": "\\ud800"\n}\n'),
        (b'{"a": 1, "a": 2}', b'{\n  "a": 2\n}\n'),  # the last wins, as in JSON.parse
    ],
)
def test_operator_text_is_written_back_as_written(text: bytes, written: bytes) -> None:
    value = _config.parse(text)
    assert value is not None and _config.serialize(value) == written


@pytest.mark.parametrize(
    "raw",
    [b"\xef\xbb\xbf{}", b'{"x": "\xed\xa0\x80"}', b'{"x": "\xff"}', b"[" * 300 + b"]" * 300],
)
def test_text_that_is_not_utf8_json_is_unparsable(raw: bytes) -> None:
    assert _config.parse(raw) is None


def test_fusion_servers_are_found_even_in_unparsable_bytes() -> None:
    assert _config.holds_fusion(_config.compose(None, [lease(1)]))
    assert not _config.holds_fusion(b'{"mcpServers": {"mine": {}}}')
    assert _config.holds_fusion(b'{"mcpServers": {"fusion-custom-tools-x": ')
    assert not _config.holds_fusion(b"{oops") and not _config.holds_fusion(None)
    # Final bytes never hold one, even from a baseline that did.
    baseline = _config.compose(b'{"mcpServers": {"mine": {}}}', [lease(1)])
    final = _config.final(None, baseline, operator_edit=False)
    assert final is not None and not _config.holds_fusion(final)
    assert json.loads(final) == {"mcpServers": {"mine": {}}}


def test_compose_keeps_operator_content_and_recomposes_fusion_entries() -> None:
    current = json.dumps(
        {
            "z": 1,
            "mcpServers": {
                "mine": {"command": "a"},
                lease(1).key: {"command": "tampered"},
                "fusion-custom-tools-stale": {"command": "orphan"},
            },
            "a": 2,
        }
    ).encode()
    composed = json.loads(_config.compose(current, [lease(2), lease(1)]))
    assert list(composed) == ["z", "mcpServers", "a"]
    assert composed["mcpServers"] == {
        "mine": {"command": "a"},
        lease(1).key: {"command": "node", "args": ["s1.js"]},
        lease(2).key: {"command": "node", "args": ["s2.js"]},
    }


def test_final_bytes() -> None:
    base = b'{"mcpServers": {}}'
    assert _config.final(b"whatever", base, operator_edit=False) == base
    assert _config.final(b"whatever", None, operator_edit=False) is None
    mine = b'{"mcpServers":{"mine":{"command":"a"}}}'
    assert _config.final(mine, base, operator_edit=True) == mine  # untouched
    ours = _config.compose(None, [lease(1)])
    assert _config.final(ours, None, operator_edit=True) is None  # nothing of theirs is left
    assert json.loads(_config.final(ours, base, operator_edit=True) or b"") == {"mcpServers": {}}
    assert _config.final(None, base, operator_edit=True) is None


def test_quarantine_clears_only_for_a_deleted_or_fusion_free_config() -> None:
    assert _config.clears_quarantine(None)
    assert _config.clears_quarantine(b'{"mcpServers": {"mine": {}}}')
    assert not _config.clears_quarantine(b"{")
    assert not _config.clears_quarantine(json.dumps({"mcpServers": {lease(1).key: {}}}).encode())


# --- the recovery decision --------------------------------------------------------------------

PRIOR, INTENDED, EDIT = b'{"mcpServers": {}}', b'{"mcpServers": {"x": {}}}', b"{}"


def pending_state() -> State:
    return State(
        baseline=None,
        confirmed=PRIOR,
        seq=3,
        leases=(lease(1),),
        pending=Pending("stage", INTENDED, 4, (lease(1), lease(2))),
    )


def test_matching_the_pending_bytes_promotes() -> None:
    recovery = _journal.recover(pending_state(), INTENDED, now=0)
    assert recovery.outcomes == ("promoted",)
    assert recovery.state == State(None, INTENDED, 4, (lease(1), lease(2)))


def test_matching_the_prior_bytes_discards() -> None:
    recovery = _journal.recover(pending_state(), PRIOR, now=0)
    assert recovery.outcomes == ("discarded",)
    assert recovery.state == State(None, PRIOR, 3, (lease(1),))


@pytest.mark.parametrize("current", [EDIT, None])
def test_any_other_bytes_latch_an_operator_edit(current: bytes | None) -> None:
    recovery = _journal.recover(pending_state(), current, now=0)
    assert recovery.outcomes[0] == "operator-edit"
    assert recovery.state.operator_edit and recovery.state.confirmed == current
    assert recovery.state.pending is None and recovery.state.leases == (lease(1),)
    # Without a pending entry too; and a latched edit is not found again.
    state = State(None, PRIOR, 3, (lease(1),))
    again = _journal.recover(_journal.recover(state, current, now=0).state, current, now=0)
    assert not again.changed


def test_unparsable_bytes_quarantine_and_repairs_unquarantine() -> None:
    state = State(None, b"{}", 1, (lease(1),))
    quarantined = _journal.recover(state, b"{oops", now=5).state
    assert quarantined.quarantine == Quarantine(
        5, "the operator's .cursor/mcp.json does not parse as a JSON object"
    )
    still = b'{"mcpServers": {"' + lease(1).key.encode() + b'": {}}}'
    assert _journal.recover(quarantined, still, now=6).state.quarantine is not None
    cleared = _journal.recover(quarantined, b'{"mcpServers": {}}', now=7)
    assert cleared.outcomes == ("operator-edit", "unquarantined")


def test_the_manifest_round_trips_bytes_exactly() -> None:
    state = State(
        baseline=b"\xff\x00 not utf-8",
        confirmed=b'{"caf\xc3\xa9": 1}',
        seq=9,
        leases=(lease(1, ServerEntry("n", ("a",), (("K", "V"),))), lease(2)),
        pending=Pending("dispose", None, 10, (lease(2),)),
        operator_edit=True,
        quarantine=Quarantine(1.5, "r"),
    )
    assert _manifest.decode(_manifest.encode(state)) == state


@pytest.mark.parametrize(
    "document",
    [
        [],
        "text",
        {"version": 1},
        {"version": True},
    ],
)
def test_a_manifest_that_is_not_one_is_a_value_error(document: object) -> None:
    with pytest.raises(ValueError):
        _manifest.decode(json.dumps(document).encode())


def test_lease_times_from_a_clock_ahead_are_cut_back_to_the_write() -> None:
    ahead = Lease(lease(1).key, ServerEntry("n"), OWNER, 5000.0, 9000.0, 120.0)
    state = _manifest.clamp(State(None, None, leases=(ahead, lease(2))), 1000.0, now=1100.0)
    assert [(x.created_at, x.heartbeat_at) for x in state.leases] == [(1000.0, 1000.0), (1.0, 2.0)]


def test_keys_are_checked() -> None:
    assert _manifest.check_key(lease(1).key) == lease(1).key
    for bad in ("fusion-custom-tools-x", "other-0000", lease(1).key + "/.."):
        with pytest.raises(UsageError):
            _manifest.check_key(bad)


def test_lock_owner_names_round_trip() -> None:
    owner = _locks.LockOwner(_owner.Process(12, "host.example-1", "boot", 99), 1.25, 30, "tok")
    assert _locks.LockOwner.decode(owner.encode()) == owner
    assert _locks.LockOwner.decode("junk") is None
    for bad in ("nan", "inf", "-1"):
        assert _locks.LockOwner.decode(owner.encode().replace("ttl=30", f"ttl={bad}")) is None
