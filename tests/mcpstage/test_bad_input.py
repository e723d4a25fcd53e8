"""What mcpstage does with what an operator sends: a clear message, nothing lost, nothing leaked.

Each test runs on a tmpfs directory and through the mount, mostly through the command line (a
traceback there is the failure these tests exist for). Grouped by what is bad: the operator's
config (numbers, text, a torn read, fusion servers nobody records), the manifest, a stage that
fails half-way, ``.cursor`` turning into a symlink, lock and lease times from a clock ahead of
ours, junk where a lock belongs, and a linked worktree whose absolute ``gitdir:`` belongs to
another checkout.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

import mcpstage
from mcpstage import _bootstrap, _locks, _owner
from mcpstage._manifest import ServerEntry

from .conftest import Places
from .support import Repo, cli, git, porcelain, snapshot


def _strict(data: bytes) -> object:
    """JSON as any other reader takes it: UTF-8, no NaN/Infinity."""

    def reject(name: str) -> object:
        raise ValueError(f"{name} is not JSON")

    return json.loads(data.decode("utf-8"), parse_constant=reject)


def _stage(repo: Repo, *args: str, env: dict[str, str] | None = None) -> str:
    result = cli(
        "stage", "-C", str(repo.wt), "--owner-pid", str(os.getpid()), *args, "--", "node", env=env
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def _marker(repo: Repo) -> object:
    return _bootstrap.read_marker(mcpstage.resolve(repo.wt))


# --- numbers and text in the operator's config ------------------------------------------------

NUMBERS = b"""{
  "limit": 1e400,
  "tiny": -1E-400,
  "big": 123456789012345678901234567890123,
  "float": 1.0,
  "zero": -0,
  "exp": 2.50e+3,
  "list": [0.1, 1e400, {"n": 12345678901234567890.5}],
  "mcpServers": {"mine": {"command": "a", "timeout": 1e400}}
}
"""
NUMBER_TEXTS = [
    b"1e400",
    b"-1E-400",
    b"123456789012345678901234567890123",
    b"1.0",
    b"-0",
    b"2.50e+3",
    b"0.1",
    b"12345678901234567890.5",
]


def test_numbers_keep_their_text_through_every_write(repo: Repo) -> None:
    repo.wt.joinpath(".cursor").mkdir()
    repo.config().write_bytes(NUMBERS)
    before = snapshot(repo)
    first = _stage(repo)
    second = _stage(repo)  # the first stage's output did not quarantine
    written = repo.config().read_bytes()
    _strict(written)
    assert b"Infinity" not in written
    for text in NUMBER_TEXTS:
        assert text in written
    # An operator edit latches, so the final bytes are composed, not the baseline: still exact.
    value = json.loads(written)
    repo.config().write_bytes(written.replace(b'"command": "a"', b'"command": "b"'))
    for key in (first, second):
        disposed = cli("dispose", "-C", str(repo.wt), key)
        assert disposed.returncode == 0, disposed.stderr
    final = repo.config().read_bytes()
    _strict(final)
    for text in NUMBER_TEXTS:
        assert text in final
    assert set(json.loads(final)["mcpServers"]) == {"mine"}
    assert value["mcpServers"]["mine"]["command"] == "a"
    # Undisturbed, the baseline comes back byte for byte.
    key = _stage(repo)
    repo.config().write_bytes(NUMBERS)
    cli("reconcile", "-C", str(repo.wt))
    assert cli("dispose", "-C", str(repo.wt), key).returncode == 0
    assert snapshot(repo) == before


def test_a_lone_surrogate_escape_is_written_as_that_escape(repo: Repo) -> None:
    repo.wt.joinpath(".cursor").mkdir()
    repo.config().write_bytes(b'{"x": "\\ud800 and \\udfff", "mcpServers": {}}\n')
    _stage(repo)
    written = repo.config().read_bytes()
    assert b'"x": "\\ud800 and \\udfff"' in written
    _strict(written)


def test_a_config_that_is_not_utf8_is_refused_with_a_message(repo: Repo) -> None:
    repo.wt.joinpath(".cursor").mkdir()
    repo.config().write_bytes(b'{"x": "\xed\xa0\x80", "mcpServers": {}}\n')  # an encoded surrogate
    before = snapshot(repo)
    result = cli("stage", "-C", str(repo.wt), "--", "node")
    assert result.returncode == 4
    assert result.stderr == (
        f"mcpstage: quarantined: {repo.config()} does not parse as a JSON object; nothing staged\n"
    )
    assert snapshot(repo) == before


def test_an_argument_json_cannot_hold_is_a_usage_error(repo: Repo) -> None:
    before = snapshot(repo)
    result = cli("stage", "-C", str(repo.wt), "--", "node", "\udcff")  # the byte 0xff
    assert result.returncode == 2
    assert result.stderr == (
        "mcpstage: usage: not valid UTF-8 text (JSON cannot hold it): '\\udcff'\n"
    )
    assert snapshot(repo) == before
    with pytest.raises(mcpstage.UsageError, match=r"^usage: the server command must be"):
        mcpstage.stage(repo.wt, ServerEntry(""))
    assert snapshot(repo) == before


# --- a torn read --------------------------------------------------------------------------------

COMPLETE = """
import sys
from pathlib import Path
Path(sys.argv[1]).open("r+b").write(Path(sys.argv[2]).read_bytes())
"""


def test_a_torn_read_of_an_in_place_save_is_read_again(repo: Repo, tmp_path: Path) -> None:
    first = _stage(repo)
    value = json.loads(repo.config().read_bytes())
    value["mcpServers"]["mine"] = {"command": "operator"}
    whole = json.dumps(value, indent=4).encode()
    (tmp_path / "whole").write_bytes(whole)
    (tmp_path / "complete.py").write_text(COMPLETE)
    # The editor truncated the file and wrote half of it; it writes the rest while mcpstage
    # waits to read it again.
    with open(repo.config(), "wb") as file:
        file.write(whole[: len(whole) // 2])
    command = f"{sys.executable} {tmp_path / 'complete.py'} {repo.config()} {tmp_path / 'whole'}"
    second = _stage(repo, env={"MCPSTAGE_RUN_AT": "config.reread", "MCPSTAGE_RUN": command})
    state = mcpstage.status(repo.wt).state
    assert state is not None and state.quarantine is None and state.operator_edit
    servers = json.loads(repo.config().read_bytes())["mcpServers"]
    assert set(servers) == {"mine", first, second}


def test_a_config_that_stays_broken_still_quarantines(repo: Repo) -> None:
    key = _stage(repo)
    repo.config().write_bytes(b'{"mcpServers": {"' + key.encode() + b'": ')
    result = cli("stage", "-C", str(repo.wt), "--", "node")
    assert result.returncode == 4
    assert result.stderr == (
        f"mcpstage: quarantined: {repo.config()} does not parse; staging refused until it is "
        "deleted or valid JSON without fusion-custom-tools-* servers\n"
    )


# --- fusion servers no manifest records ---------------------------------------------------------

ORPHANED = (
    "the operator's .cursor/mcp.json holds fusion-custom-tools-* servers that no lease manifest "
    "records"
)


def test_removing_the_manifest_keeps_the_exclusion_while_fusion_servers_remain(repo: Repo) -> None:
    repo.wt.joinpath(".cursor").mkdir()
    repo.config().write_bytes(b'{"mcpServers": {"mine": {"command": "a"}}}\n')
    keys = [_stage(repo), _stage(repo)]
    repo.state().write_text("{")
    corrupt = cli("reconcile", "-C", str(repo.wt))
    assert corrupt.returncode == 1
    assert corrupt.stderr.endswith("; repair or remove it\n")
    repo.state().unlink()  # the advice, followed
    reconciled = cli("reconcile", "-C", str(repo.wt))
    assert (reconciled.returncode, reconciled.stdout) == (4, "recovered: quarantined\n")
    assert reconciled.stderr == f"mcpstage: quarantined: {ORPHANED}\n"
    assert _marker(repo) is not None
    assert porcelain(repo.wt) == ""  # git still cannot capture the session entries
    git(repo.wt, "add", "-A")
    assert git(repo.wt, "diff", "--cached", "--name-only").stdout == ""
    assert cli("status", "-C", str(repo.wt)).returncode == 4
    staged = cli("stage", "-C", str(repo.wt), "--", "node")
    assert staged.returncode == 4 and staged.stderr.startswith(f"mcpstage: quarantined: {ORPHANED}")
    # The operator removes the entries: the record and the exclusion go, their config stays.
    value = json.loads(repo.config().read_bytes())
    for key in keys:
        del value["mcpServers"][key]
    repo.config().write_text(json.dumps(value))
    reconciled = cli("reconcile", "-C", str(repo.wt))
    assert reconciled.returncode == 0, reconciled.stderr
    assert reconciled.stdout.endswith("cleaned up\n")
    assert _marker(repo) is None and not repo.state().exists()
    assert json.loads(repo.config().read_bytes()) == {"mcpServers": {"mine": {"command": "a"}}}


def test_staging_into_unrecorded_fusion_servers_is_refused_and_they_stay_excluded(
    repo: Repo,
) -> None:
    # An editor saved a stale buffer (with a session's server) after the session cleaned up.
    repo.wt.joinpath(".cursor").mkdir()
    stale = {"mcpServers": {"fusion-custom-tools-11111111-2222-4333-8444-555555555555": {}}}
    repo.config().write_text(json.dumps(stale))
    result = cli("stage", "-C", str(repo.wt), "--", "node")
    assert result.returncode == 4
    assert result.stderr == f"mcpstage: quarantined: {ORPHANED}; nothing staged\n"
    assert _marker(repo) is not None and porcelain(repo.wt) == ""
    repo.config().unlink()
    key = _stage(repo)  # deleting the config clears it; a session proceeds
    assert cli("dispose", "-C", str(repo.wt), key).returncode == 0
    assert _marker(repo) is None
    assert os.listdir(repo.wt / ".cursor") == []  # the config stays deleted


# --- the manifest -------------------------------------------------------------------------------

KEY = "fusion-custom-tools-11111111-2222-4333-8444-555555555555"


def _junk_manifests(good: dict[str, object]) -> dict[str, tuple[bytes, str]]:
    def edited(path: tuple[str, ...], value: object) -> bytes:
        document = json.loads(json.dumps(good))
        target = document
        for name in path[:-1]:
            target = target[name]
        target[path[-1]] = value
        return json.dumps(document).encode()

    lease = next(iter(good["leases"]))  # type: ignore[call-overload]
    renamed = json.loads(json.dumps(good))
    renamed["leases"]["mine"] = renamed["leases"].pop(lease)
    return {
        "list": (b"[]", "the manifest must be a JSON object"),
        "nested": (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        "operator key": (
            json.dumps(renamed).encode(),
            "not a fusion-custom-tools-<uuid> lease key: 'mine'",
        ),
        "bool seq": (edited(("confirmed", "seq"), True), "confirmed: 'seq' must not be True"),
        "future nan": (
            edited(("leases", lease, "heartbeat_at"), "nan"),
            f"lease {lease}: 'heartbeat_at' has the wrong type",
        ),
        "no entry": (
            edited(("leases", lease, "entry"), None),
            f"lease {lease}: 'entry' has the wrong type",
        ),
        "pending kind": (
            edited(("pending",), {"kind": "x", "raw": None, "seq": 1, "leases": {}}),
            "pending: unknown kind 'x'",
        ),
    }


def test_a_junk_manifest_is_a_message_and_nothing_is_written(repo: Repo) -> None:
    repo.wt.joinpath(".cursor").mkdir()
    repo.config().write_bytes(b'{"mcpServers": {"mine": {"command": "a"}}}\n')
    key = _stage(repo)
    good = json.loads(repo.state().read_bytes())
    config = repo.config().read_bytes()
    for name, (data, problem) in _junk_manifests(good).items():
        repo.state().write_bytes(data)
        for args in (("stage", "--", "node"), ("dispose", key), ("reconcile",), ("status",)):
            result = cli(args[0], "-C", str(repo.wt), *args[1:])
            assert (name, result.returncode) == (name, 1)
            assert result.stderr == (
                f"mcpstage: corrupt lease manifest {repo.state()} ({problem}); "
                "repair or remove it\n"
            ), name
        assert repo.config().read_bytes() == config
        assert repo.state().read_bytes() == data


# --- a stage that fails half-way ----------------------------------------------------------------

SYMLINK = "import os, sys; os.remove(sys.argv[1]); os.symlink('elsewhere.json', sys.argv[1])"


def test_a_stage_that_fails_leaves_no_exclusion_and_no_record(repo: Repo) -> None:
    repo.wt.joinpath(".cursor").mkdir()
    repo.config().write_bytes(b'{"mcpServers": {}}\n')
    # While the first stage writes, the operator turns the config into a symlink.
    command = f'{sys.executable} -c "{SYMLINK}" {repo.config()}'
    result = cli(
        "stage",
        "-C",
        str(repo.wt),
        "--",
        "node",
        env={"MCPSTAGE_RUN_AT": "stage.config-temp-written", "MCPSTAGE_RUN": command},
    )
    assert result.returncode == 3
    assert result.stderr == f"mcpstage: refused: {repo.config()} is not a regular file\n"
    assert _marker(repo) is None
    assert os.listdir(repo.wt / ".cursor") == ["mcp.json"]
    assert os.readlink(repo.config()) == "elsewhere.json"  # the operator's, untouched


# --- .cursor turned into a symlink --------------------------------------------------------------


def test_no_operation_follows_a_cursor_dir_that_became_a_symlink(repo: Repo) -> None:
    key = _stage(repo)
    outside = repo.root / "outside"
    outside.mkdir()
    os.rename(repo.wt / ".cursor", outside / "cursor")
    os.symlink(outside / "cursor", repo.wt / ".cursor")
    before = {p.name: p.read_bytes() for p in (outside / "cursor").iterdir() if p.is_file()}
    refusal = f"mcpstage: refused: {repo.wt / '.cursor'} is not a plain directory\n"
    for args in (("dispose", key), ("heartbeat", key), ("reconcile",), ("stage", "--", "x")):
        result = cli(args[0], "-C", str(repo.wt), *args[1:])
        assert (args[0], result.returncode, result.stderr) == (args[0], 3, refusal)
    after = {p.name: p.read_bytes() for p in (outside / "cursor").iterdir() if p.is_file()}
    assert after == before and sorted(after) == [".fusion-mcp-state.json", "mcp.json"]
    # Put back, the session disposes as usual.
    os.unlink(repo.wt / ".cursor")
    os.rename(outside / "cursor", repo.wt / ".cursor")
    assert cli("dispose", "-C", str(repo.wt), key).returncode == 0
    assert not repo.wt.joinpath(".cursor").exists()


# --- times from a clock ahead of ours ------------------------------------------------------------


def test_a_lock_acquired_in_the_future_expires_by_its_directory_time(repo: Repo) -> None:
    shape = mcpstage.resolve(repo.wt)
    os.makedirs(shape.cursor_dir)
    spec = _bootstrap.main_lock(shape)
    owner = _locks.LockOwner(
        _owner.Process(pid=1, hostname="elsewhere"), time.time() + 3600, 30.0, "ahead"
    )
    os.makedirs(os.path.join(spec.path, owner.encode()))
    long_ago = time.time() - 60
    os.utime(spec.path, (long_ago, long_ago))
    text = cli("status", "-C", str(repo.wt)).stdout
    assert "main lock: stale by pid 1 on elsewhere" in text
    assert "(critical-section TTL expired)" in text
    key = _stage(repo, "--wait", "2")
    assert cli("dispose", "-C", str(repo.wt), key).returncode == 0


def test_a_lease_heartbeat_in_the_future_expires_by_the_manifest_time(repo: Repo) -> None:
    elsewhere = _owner.Process(pid=1, hostname="elsewhere")
    lease = mcpstage.stage(repo.wt, ServerEntry("node"), owner=elsewhere, lease_ttl=5).lease
    assert lease is not None
    document = json.loads(repo.state().read_bytes())
    document["leases"][lease.key]["heartbeat_at"] = time.time() + 3600
    repo.state().write_text(json.dumps(document))
    long_ago = time.time() - 60
    os.utime(repo.state(), (long_ago, long_ago))
    assert mcpstage.status(repo.wt).leases[0].dead
    reconciled = cli("reconcile", "-C", str(repo.wt))
    assert reconciled.stdout == f"reaped: {lease.key}\ncleaned up\n"


# --- junk where a lock belongs -----------------------------------------------------------------


def test_a_stale_lock_directory_holding_junk_is_reclaimed_with_it(repo: Repo) -> None:
    repo.wt.joinpath(".cursor").mkdir()
    before = snapshot(repo)
    lock = repo.wt / ".cursor" / ".fusion-mcp.lock"
    (lock / "deeper").mkdir(parents=True)
    (lock / "junk").write_text("x")
    (lock / "deeper" / "more").write_text("y")
    target = repo.root / "target"
    target.mkdir()
    (target / "keep").write_text("kept")
    os.symlink(target, lock / "link")
    long_ago = time.time() - 60
    os.utime(lock, (long_ago, long_ago))
    key = _stage(repo)
    assert sorted(os.listdir(repo.wt / ".cursor")) == [".fusion-mcp-state.json", "mcp.json"]
    assert cli("dispose", "-C", str(repo.wt), key).returncode == 0
    assert snapshot(repo) == before
    assert (target / "keep").read_text() == "kept"  # the symlink was removed, not followed


def test_a_file_at_the_lock_path_is_held_for_status_and_operations_alike(repo: Repo) -> None:
    lock = repo.wt / ".cursor" / ".fusion-mcp.lock"
    lock.parent.mkdir()
    lock.write_text("not a lock\n")
    text = cli("status", "-C", str(repo.wt)).stdout
    assert "main lock: held for " in text and "(not a lock directory)" in text
    busy = cli("stage", "-C", str(repo.wt), "--wait", "0.3", "--", "node")
    assert busy.returncode == 5
    assert busy.stderr == (
        f"mcpstage: busy: {lock} is held by something that is not a lock directory "
        "(retried 0.3 s)\n"
    )
    long_ago = time.time() - 60
    os.utime(lock, (long_ago, long_ago))
    text = cli("status", "-C", str(repo.wt)).stdout
    assert "(not a lock directory, older than its TTL)" in text and "main lock: stale" in text
    key = _stage(repo)
    assert not lock.exists() or lock.is_dir() is False
    assert cli("dispose", "-C", str(repo.wt), key).returncode == 0


# --- an absolute gitdir that belongs to another checkout ---------------------------------------


def test_a_copy_whose_absolute_gitdir_is_the_originals_is_refused(
    places: Places, place: str
) -> None:
    repo = places.fresh(place)
    host = places.host_template(place)  # on the host; for the mount, what the mount reads
    exclude = host / "repo" / ".git" / "info" / "exclude"
    host_before = exclude.read_bytes() if exclude.exists() else None
    git_dir = host / "repo" / ".git" / "worktrees" / "wt"
    (repo.wt / ".git").write_text(f"gitdir: {git_dir}\n")
    before = snapshot(repo)
    result = cli("stage", "-C", str(repo.wt), "--", "node")
    assert result.returncode == 3
    assert result.stderr == (
        f"mcpstage: refused: {repo.wt / '.git'} names {git_dir}, the git directory of "
        f"{host / 'wt'}: this worktree is a copy or a mount of that one, and staging would "
        "write outside it; make its gitdir: relative\n"
    )
    assert (exclude.read_bytes() if exclude.exists() else None) == host_before
    assert snapshot(repo) == before
    # An absolute gitdir that git records as this worktree's own is followed as before.
    own = repo.main / ".git" / "worktrees" / "wt"
    (repo.wt / ".git").write_text(f"gitdir: {own}\n")
    (own / "gitdir").write_text(f"{repo.wt / '.git'}\n")
    key = _stage(repo)
    assert mcpstage.resolve(repo.wt).git_dir == str(own)
    assert cli("dispose", "-C", str(repo.wt), key).returncode == 0
    assert (exclude.read_bytes() if exclude.exists() else None) == host_before
