"""One test per rule of the staging protocol, each on a tmpfs directory and through a mount.

Rules (shared/seeds/cursor-cli-contract.md, "MCP staging and cleanup" and "Worktree safety
protocol") and where each is checked: keys and manifest, recomposition, operator content, git
shape, marker-before-.cursor, ownership observation, baseline, operator edits, tracked config,
quarantine, heartbeats, backstop and the final cleanup order are here; the journal under crashes
is in ``test_crash``, locks in ``test_locks``, many peers in ``test_concurrency``, the command
line in ``test_cli``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

import mcpstage
from mcpstage import _bootstrap, _exclude, _locks, _manifest, _owner
from mcpstage._manifest import ServerEntry

from .support import REPO_ROOT, Repo, cli, git, porcelain, snapshot

BRIDGE = ServerEntry("node", ("bridge.js", "--port", "7"), (("TOKEN", "t0"),))
OTHER = ServerEntry("python3", ("-m", "tools"), None)
KEY = re.compile(r"^fusion-custom-tools-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}$")


def servers(repo: Repo, worktree: Path | None = None) -> dict[str, object]:
    value = json.loads(repo.config(worktree).read_bytes())
    result: dict[str, object] = value["mcpServers"]
    return result


def manifest(repo: Repo, worktree: Path | None = None) -> _manifest.State:
    return _manifest.decode(repo.state(worktree).read_bytes())


def stage(repo: Repo, entry: ServerEntry = BRIDGE, worktree: Path | None = None) -> str:
    outcome = mcpstage.stage(worktree or repo.wt, entry)
    assert outcome.lease is not None
    return outcome.lease.key


def test_each_session_gets_a_unique_key_and_a_complete_manifest_entry(repo: Repo) -> None:
    keys = [stage(repo, BRIDGE), stage(repo, OTHER), stage(repo, BRIDGE)]
    assert len(set(keys)) == 3 and all(KEY.match(key) for key in keys)
    state = manifest(repo)
    assert [lease.key for lease in state.leases] == sorted(keys)
    recorded = json.loads(repo.state().read_bytes())["leases"]
    assert recorded[keys[0]]["entry"] == {
        "command": "node",
        "args": ["bridge.js", "--port", "7"],
        "env": {"TOKEN": "t0"},
    }
    assert recorded[keys[1]]["entry"] == {"command": "python3", "args": ["-m", "tools"]}
    assert servers(repo) == {key: recorded[key]["entry"] for key in sorted(keys)}


def test_a_peer_disposes_without_dropping_another_process_bridge(repo: Repo) -> None:
    # The peer's lease is staged by another process; ours is staged and disposed here.
    peer = cli("stage", "-C", str(repo.wt), "--owner-pid", str(os.getpid()), "--", "node", "p.js")
    assert peer.returncode == 0, peer.stderr
    peer_key = peer.stdout.strip()
    ours = stage(repo, OTHER)
    mcpstage.dispose(repo.wt, ours)
    assert servers(repo) == {peer_key: {"command": "node", "args": ["p.js"]}}
    # An operator mangles the peer's entry and adds a server: the entry is recomposed from the
    # manifest at the next write, the operator's server stays.
    value = json.loads(repo.config().read_bytes())
    value["mcpServers"][peer_key]["args"] = ["tampered"]
    value["mcpServers"]["mine"] = {"command": "mine"}
    repo.config().write_text(json.dumps(value))
    third = stage(repo, OTHER)
    assert servers(repo) == {
        peer_key: {"command": "node", "args": ["p.js"]},
        "mine": {"command": "mine"},
        third: OTHER.to_json(),
    }


def test_operator_content_comes_from_the_current_bytes(repo: Repo) -> None:
    repo.wt.joinpath(".cursor").mkdir()
    repo.config().write_text('{"theme": "dark", "mcpServers": {"mine": {"command": "a"}}}\n')
    first = stage(repo)
    assert list(servers(repo)) == ["mine", first]
    assert json.loads(repo.config().read_bytes())["theme"] == "dark"
    # The operator adds a server while the session runs; the next write keeps it.
    value = json.loads(repo.config().read_bytes())
    value["mcpServers"]["theirs"] = {"command": "b"}
    repo.config().write_text(json.dumps(value, indent=4))
    second = stage(repo, OTHER)
    assert set(servers(repo)) == {"mine", "theirs", first, second}
    mcpstage.dispose(repo.wt, first)
    mcpstage.dispose(repo.wt, second)
    assert json.loads(repo.config().read_bytes()) == {
        "theme": "dark",
        "mcpServers": {"mine": {"command": "a"}, "theirs": {"command": "b"}},
    }


def test_git_shape_of_the_main_and_a_linked_worktree(repo: Repo) -> None:
    main = mcpstage.resolve(repo.main)
    assert (main.git_dir, main.common_dir, main.worktree_id) == (
        str(repo.main / ".git"),
        str(repo.main / ".git"),
        ".",
    )
    linked = mcpstage.resolve(repo.wt / "src")  # from inside: walks up to the top level
    assert linked.worktree == str(repo.wt) and linked.linked
    assert linked.git_dir == str(repo.main / ".git" / "worktrees" / "wt")
    assert linked.common_dir == str(repo.main / ".git")
    assert linked.exclude_path == str(repo.exclude)
    with pytest.raises(mcpstage.UsageError, match="not inside a git worktree"):
        mcpstage.resolve("/")


def test_both_worktrees_share_info_exclude_with_a_block_each(repo: Repo) -> None:
    before_main, before_wt = snapshot(repo, repo.main), snapshot(repo)
    in_main = stage(repo, worktree=repo.main)
    in_wt = stage(repo)
    text = repo.exclude.read_bytes()
    assert _exclude.find(text, ".") is not None
    assert _exclude.find(text, "worktrees/wt") is not None
    assert porcelain(repo.main) == "" and porcelain(repo.wt) == ""
    mcpstage.dispose(repo.main, in_main)
    assert _exclude.find(repo.exclude.read_bytes(), "worktrees/wt") is not None
    assert porcelain(repo.wt) == ""
    mcpstage.dispose(repo.wt, in_wt)
    assert snapshot(repo, repo.main) == before_main and snapshot(repo) == before_wt


def test_the_marker_covers_every_session_file(repo: Repo) -> None:
    key = stage(repo)
    repo.wt.joinpath(".cursor", ".fusion-mcp-tmp.1.2.host").write_text("debris")
    ignored = git(
        repo.wt,
        "check-ignore",
        ".cursor/mcp.json",
        ".cursor/.fusion-mcp-state.json",
        ".cursor/.fusion-mcp-tmp.1.2.host",
    )
    assert ignored.stdout.split() == [
        ".cursor/mcp.json",
        ".cursor/.fusion-mcp-state.json",
        ".cursor/.fusion-mcp-tmp.1.2.host",
    ]
    git(repo.wt, "add", "-A")
    assert git(repo.wt, "diff", "--cached", "--name-only").stdout == ""
    mcpstage.dispose(repo.wt, key)


def test_the_marker_is_written_before_cursor_dir_is_made(repo: Repo) -> None:
    before = snapshot(repo)
    for point, cursor_exists in (
        ("bootstrap.marker-written", False),
        ("bootstrap.cursor-made", True),
    ):
        crashed = cli("stage", "-C", str(repo.wt), "--", "node", env={"MCPSTAGE_CRASH_AT": point})
        assert crashed.returncode == -9, crashed.stderr
        marker = _bootstrap.read_marker(mcpstage.resolve(repo.wt))
        assert marker is not None and marker.cursor_created
        assert repo.wt.joinpath(".cursor").exists() is cursor_exists
        assert porcelain(repo.wt) == ""
        mcpstage.reconcile(repo.wt)
        assert snapshot(repo) == before


@pytest.mark.parametrize("existing", [None, "empty", "with-file"])
def test_cursor_dir_ownership_is_observed_at_bootstrap(repo: Repo, existing: str | None) -> None:
    cursor = repo.wt / ".cursor"
    if existing is not None:
        cursor.mkdir()
    if existing == "with-file":
        cursor.joinpath("rules.md").write_text("operator's\n")
    before = snapshot(repo)
    key = stage(repo)
    marker = _bootstrap.read_marker(mcpstage.resolve(repo.wt))
    assert marker is not None and marker.cursor_created is (existing is None)
    mcpstage.dispose(repo.wt, key)
    assert snapshot(repo) == before  # .cursor/ removed only when fusion made it


@pytest.mark.parametrize(
    "baseline",
    [
        None,
        b'{"mcpServers":{"mine":{"command":"x"}}}',  # no newline at the end
        b'{\r\n\t"mcpServers": {\r\n\t\t"caf\xc3\xa9": {"command": "x"}\r\n\t}\r\n}\r\n',
    ],
)
def test_the_baseline_is_persisted_byte_exact_before_the_first_write(
    repo: Repo, baseline: bytes | None
) -> None:
    if baseline is not None:
        repo.wt.joinpath(".cursor").mkdir()
        repo.config().write_bytes(baseline)
    before = snapshot(repo)
    crashed = cli(
        "stage",
        "-C",
        str(repo.wt),
        "--",
        "node",
        env={"MCPSTAGE_CRASH_AT": "stage.baseline-written"},
    )
    assert crashed.returncode == -9
    state = manifest(repo)
    assert state.baseline == baseline and state.confirmed == baseline and not state.leases
    assert (repo.config().read_bytes() if baseline is not None else None) == baseline
    mcpstage.reconcile(repo.wt)
    assert snapshot(repo) == before
    key = stage(repo)
    mcpstage.dispose(repo.wt, key)
    assert snapshot(repo) == before


def test_an_operator_edit_is_latched_and_never_restored_over(repo: Repo) -> None:
    repo.wt.joinpath(".cursor").mkdir()
    repo.config().write_bytes(b'{"mcpServers": {"mine": {"command": "a"}}}\n')
    first, second = stage(repo), stage(repo, OTHER)
    value = json.loads(repo.config().read_bytes())
    value["mcpServers"]["mine"]["args"] = ["--edited"]
    edited = json.dumps(value, indent=8).encode()
    repo.config().write_bytes(edited)
    outcome = mcpstage.dispose(repo.wt, first)
    assert outcome.recovered == ("operator-edit",)
    assert outcome.state is not None and outcome.state.operator_edit
    assert servers(repo) == {
        "mine": {"command": "a", "args": ["--edited"]},
        second: OTHER.to_json(),
    }
    mcpstage.dispose(repo.wt, second)
    # Not the baseline: the operator's content, without fusion's server.
    assert json.loads(repo.config().read_bytes()) == {
        "mcpServers": {"mine": {"command": "a", "args": ["--edited"]}}
    }


def test_an_operator_edit_without_fusion_keys_is_left_byte_for_byte(repo: Repo) -> None:
    key = stage(repo)
    mine = b'{"mcpServers": {"mine": {"command": "a"}}}'
    repo.config().write_bytes(mine)  # the operator replaced the file, our server dropped
    mcpstage.dispose(repo.wt, key)
    assert repo.config().read_bytes() == mine
    assert _bootstrap.read_marker(mcpstage.resolve(repo.wt)) is None
    assert not repo.state().exists()


def test_a_tracked_config_is_refused(repo: Repo) -> None:
    repo.wt.joinpath(".cursor").mkdir()
    repo.config().write_text('{"mcpServers": {}}\n')
    git(repo.wt, "add", ".cursor/mcp.json")
    git(repo.wt, "commit", "-qm", "track the config")
    before = snapshot(repo)
    with pytest.raises(mcpstage.RefusedError, match=r"^refused: .*mcp\.json is tracked by git"):
        stage(repo)
    result = cli("stage", "-C", str(repo.wt), "--", "node")
    assert result.returncode == 3
    assert result.stderr.startswith("mcpstage: refused: ")
    assert snapshot(repo) == before


def test_a_symlinked_cursor_dir_is_refused(repo: Repo) -> None:
    (repo.root / "elsewhere").mkdir()
    os.symlink("../elsewhere", repo.wt / ".cursor")
    with pytest.raises(mcpstage.RefusedError, match="is not a plain directory"):
        stage(repo)
    assert _bootstrap.read_marker(mcpstage.resolve(repo.wt)) is None


def test_unparsable_operator_json_quarantines_the_worktree(repo: Repo) -> None:
    first, second = stage(repo), stage(repo, OTHER)
    broken = b'{"mcpServers": {"mine": ' + repo.config().read_bytes()[:40]
    repo.config().write_bytes(broken)
    with pytest.raises(mcpstage.QuarantinedError, match=r"^quarantined: .*staging refused"):
        stage(repo)
    assert manifest(repo).quarantine is not None
    # Disposing drops the lease from the manifest only: the config stays as the operator left it.
    outcome = mcpstage.dispose(repo.wt, first)
    assert outcome.state is not None and outcome.state.quarantine is not None
    assert repo.config().read_bytes() == broken
    mcpstage.dispose(repo.wt, second)
    assert repo.config().read_bytes() == broken
    # With no lease left the record and the exclusion stay while quarantined.
    assert repo.state().exists() and [lease.key for lease in manifest(repo).leases] == []
    assert _bootstrap.read_marker(mcpstage.resolve(repo.wt)) is not None
    assert porcelain(repo.wt) == ""
    assert mcpstage.reconcile(repo.wt).state is not None
    # Parseable but still holding a fusion key: still quarantined.
    repo.config().write_text(json.dumps({"mcpServers": {first: {"command": "x"}}}))
    outcome = mcpstage.reconcile(repo.wt)
    assert outcome.state is not None and outcome.state.quarantine is not None
    # Repaired: valid, no fusion key. Reconciliation clears the record and the exclusion.
    repo.config().write_text('{"mcpServers": {}}\n')
    outcome = mcpstage.reconcile(repo.wt)
    assert outcome.recovered == ("operator-edit", "unquarantined") and outcome.cleaned
    assert not repo.state().exists()
    assert _bootstrap.read_marker(mcpstage.resolve(repo.wt)) is None
    assert repo.config().read_text() == '{"mcpServers": {}}\n'


def test_deleting_the_config_clears_the_quarantine_and_a_new_session_proceeds(repo: Repo) -> None:
    before = snapshot(repo)
    key = stage(repo)
    repo.config().write_bytes(b"not json")
    with pytest.raises(mcpstage.QuarantinedError):
        stage(repo)
    repo.config().unlink()
    later = stage(repo, OTHER)  # clears the quarantine itself, then stages
    assert set(servers(repo)) == {key, later}
    mcpstage.dispose(repo.wt, key)
    mcpstage.dispose(repo.wt, later)
    assert snapshot(repo) == before


def test_an_unparsable_config_before_any_session_refuses_without_leaving_anything(
    repo: Repo,
) -> None:
    repo.wt.joinpath(".cursor").mkdir()
    repo.config().write_bytes(b"[1, 2")
    before = snapshot(repo)
    with pytest.raises(mcpstage.QuarantinedError, match="nothing staged"):
        stage(repo)
    assert snapshot(repo) == before


def test_leases_heartbeat_and_only_dead_owners_are_reaped(repo: Repo) -> None:
    live = stage(repo)
    dead_pid = _dead_pid()
    elsewhere_fresh = mcpstage.stage(
        repo.wt, OTHER, owner=_owner.Process(pid=1, hostname="elsewhere"), lease_ttl=60
    ).lease
    elsewhere_stale = mcpstage.stage(
        repo.wt, OTHER, owner=_owner.Process(pid=1, hostname="elsewhere"), lease_ttl=0.5
    ).lease
    gone = mcpstage.stage(repo.wt, OTHER, owner=_owner.process(dead_pid)).lease
    assert elsewhere_fresh and elsewhere_stale and gone
    time.sleep(0.6)
    beat = mcpstage.heartbeat(repo.wt, live).lease
    assert beat is not None and beat.heartbeat_at > beat.created_at
    outcome = mcpstage.reconcile(repo.wt)
    assert set(outcome.reaped) == {elsewhere_stale.key, gone.key}
    assert set(servers(repo)) == {live, elsewhere_fresh.key}


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_a_session_heartbeats_while_it_lives(repo: Repo) -> None:
    with mcpstage.Session.open(repo.wt, BRIDGE, interval=0.05) as session:
        created = session.lease.created_at
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            lease = manifest(repo).lease(session.key)
            if lease is not None and lease.heartbeat_at > created:
                break
            time.sleep(0.05)
        else:
            raise AssertionError("no heartbeat recorded")
    assert not repo.wt.joinpath(".cursor").exists()


BACKSTOP_CHILD = """
import sys
import mcpstage
session = mcpstage.Session.open(sys.argv[1], mcpstage.ServerEntry("node", ("x.js",)))
print(session.key, flush=True)
sys.stdin.readline()
# exits without closing: the atexit backstop runs
"""


def _backstop_child(worktree: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    env.pop("MCPSTAGE_CRASH_AT", None)
    return subprocess.Popen(
        [sys.executable, "-c", BACKSTOP_CHILD, str(worktree)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


def test_the_exit_backstop_disposes_when_the_lock_is_free(repo: Repo) -> None:
    before = snapshot(repo)
    with _backstop_child(repo.wt) as child:
        assert child.stdout is not None and child.stdin is not None
        key = child.stdout.readline().strip()
        assert KEY.match(key)
        child.stdin.close()
        assert child.wait(30) == 0
    assert snapshot(repo) == before


def test_the_exit_backstop_makes_one_attempt_and_never_writes_under_a_peer(repo: Repo) -> None:
    shape = mcpstage.resolve(repo.wt)
    with _backstop_child(repo.wt) as child:
        assert child.stdout is not None and child.stdin is not None
        key = child.stdout.readline().strip()
        held = _locks.acquire(_bootstrap.main_lock(shape))
        state_before = repo.state().read_bytes()
        try:
            started = time.monotonic()
            child.stdin.close()
            assert child.wait(30) == 0
            assert time.monotonic() - started < 5  # no retrying for the lock
            assert _locks.still_held(held)  # and no taking it over
            assert repo.state().read_bytes() == state_before
        finally:
            _locks.release(held)
    outcome = mcpstage.reconcile(repo.wt)  # the owner is dead now: reaped
    assert outcome.reaped == (key,) and outcome.cleaned


def test_final_cleanup_removes_the_marker_last_then_rmdirs_after_release(repo: Repo) -> None:
    before = snapshot(repo)
    key = stage(repo)
    crashed = cli(
        "dispose", "-C", str(repo.wt), key, env={"MCPSTAGE_CRASH_AT": "cleanup.marker-removed"}
    )
    assert crashed.returncode == -9
    # Everything but the lock (a tree of empty directories) is gone, so git shows nothing.
    assert os.listdir(repo.wt / ".cursor") == [".fusion-mcp.lock"]
    assert _bootstrap.read_marker(mcpstage.resolve(repo.wt)) is None
    assert porcelain(repo.wt) == ""
    mcpstage.reconcile(repo.wt)
    assert snapshot(repo) == before
    key = stage(repo)
    crashed = cli("dispose", "-C", str(repo.wt), key, env={"MCPSTAGE_CRASH_AT": "cleanup.released"})
    assert crashed.returncode == -9
    assert os.listdir(repo.wt / ".cursor") == []
    assert mcpstage.status(repo.wt).cleanup_intent
    mcpstage.reconcile(repo.wt)  # retries the rmdir the intent records
    assert snapshot(repo) == before


def test_a_failed_rmdir_is_benign_and_the_operator_keeps_the_directory(repo: Repo) -> None:
    key = stage(repo)
    repo.wt.joinpath(".cursor", "rules.md").write_text("mine\n")  # appeared during the session
    outcome = mcpstage.dispose(repo.wt, key)
    assert outcome.cleaned
    assert os.listdir(repo.wt / ".cursor") == ["rules.md"]
    assert not mcpstage.status(repo.wt).cleanup_intent  # the directory is the operator's now
    assert porcelain(repo.wt) == "?? .cursor/rules.md\n"
