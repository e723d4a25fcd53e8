"""The ``mcpstage`` command line: outputs a script can use, messages and exit statuses."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import mcpstage

from .support import REPO_ROOT, Repo, cli, snapshot

UNKNOWN = "fusion-custom-tools-00000000-0000-4000-8000-000000000000"


def test_stage_prints_the_key_and_dispose_restores(repo: Repo) -> None:
    before = snapshot(repo)
    staged = cli("stage", "-C", str(repo.wt / "src"), "--env", "A=1", "--", "node", "b.js", "-x")
    assert staged.returncode == 0 and staged.stderr == ""
    key = staged.stdout.strip()
    assert staged.stdout == key + "\n" and key.startswith("fusion-custom-tools-")
    assert json.loads(repo.config().read_bytes())["mcpServers"][key] == {
        "command": "node",
        "args": ["b.js", "-x"],
        "env": {"A": "1"},
    }
    lease = mcpstage.status(repo.wt).leases[0].lease
    assert lease.owner.pid == os.getpid()  # the caller owns it by default
    disposed = cli("dispose", "-C", str(repo.wt), key)
    assert (disposed.returncode, disposed.stdout) == (0, f"disposed {key}\ncleaned up\n")
    assert snapshot(repo) == before


def test_stage_json(repo: Repo) -> None:
    staged = cli("stage", "-C", str(repo.wt), "--json", "--owner-pid", "1", "--", "node")
    assert staged.returncode == 0
    document = json.loads(staged.stdout)
    assert document["entry"] == {"command": "node", "args": []}
    assert document["owner"]["pid"] == 1 and document["worktree"] == str(repo.wt)


def test_usage_errors_exit_2(repo: Repo, tmp_path: object) -> None:
    assert cli().returncode == 2
    missing = cli("stage", "-C", str(repo.wt))
    assert missing.returncode == 2
    assert missing.stderr == "mcpstage: usage: stage needs the server command after `--`\n"
    nowhere = cli("status", "-C", "/")
    assert nowhere.returncode == 2
    assert nowhere.stderr == "mcpstage: usage: not inside a git worktree: /\n"
    bad = cli("dispose", "-C", str(repo.wt), "not-a-key")
    assert bad.returncode == 2
    assert bad.stderr == "mcpstage: usage: not a fusion-custom-tools-<uuid> key: 'not-a-key'\n"
    assert cli("stage", "--bogus").returncode == 2


def test_an_unknown_lease_exits_6(repo: Repo) -> None:
    for command in ("dispose", "heartbeat"):
        result = cli(command, "-C", str(repo.wt), UNKNOWN)
        assert result.returncode == 6
        assert result.stderr == f"mcpstage: not found: no lease {UNKNOWN} in {repo.wt}\n"


def test_quarantine_exits_4_everywhere(repo: Repo) -> None:
    key = cli("stage", "-C", str(repo.wt), "--", "node").stdout.strip()
    repo.config().write_bytes(b"{broken")
    staged = cli("stage", "-C", str(repo.wt), "--", "node")
    assert staged.returncode == 4 and staged.stderr.startswith("mcpstage: quarantined: ")
    status = cli("status", "-C", str(repo.wt))
    assert status.returncode == 4
    assert "quarantine: the operator's .cursor/mcp.json does not parse" in status.stdout
    disposed = cli("dispose", "-C", str(repo.wt), key)
    assert disposed.returncode == 4 and disposed.stdout == f"disposed {key}\n"
    assert "stays as the operator wrote it" in disposed.stderr
    reconciled = cli("reconcile", "-C", str(repo.wt))
    assert reconciled.returncode == 4
    repo.config().write_text("{}")
    reconciled = cli("reconcile", "-C", str(repo.wt), "--json")
    assert reconciled.returncode == 0
    assert json.loads(reconciled.stdout) == {
        "worktree": str(repo.wt),
        "recovered": ["operator-edit", "unquarantined"],
        "reaped": [],
        "cleaned": True,
        "leases": [],
        "quarantined": False,
    }


def test_status_reports_leases_locks_and_leftovers(repo: Repo) -> None:
    clean = cli("status", "-C", str(repo.wt))
    assert clean.returncode == 0
    assert "manifest: none" in clean.stdout and "main lock: free" in clean.stdout
    key = cli("stage", "-C", str(repo.wt), "--owner-pid", str(os.getpid()), "--", "node", "b.js")
    crashed = cli(
        "stage",
        "-C",
        str(repo.wt),
        "--",
        "node",
        env={"MCPSTAGE_CRASH_AT": "stage.pending-written"},
    )
    assert crashed.returncode == -9
    text = cli("status", "-C", str(repo.wt)).stdout
    assert f"worktree: {repo.wt} (linked worktree worktrees/wt)" in text
    assert "manifest: seq 1, pending stage" in text
    assert f"{key.stdout.strip()} live pid {os.getpid()} on " in text
    assert "main lock: stale by pid " in text and "(owner process is dead)" in text
    assert text.endswith("needs: mcpstage reconcile\n")
    document = json.loads(cli("status", "-C", str(repo.wt), "--json").stdout)
    assert document["pending"] == "stage" and document["needs_reconcile"]
    assert document["locks"]["main"]["state"] == "stale"
    assert document["exclusion"]["cursor_created"] is True
    reconciled = cli("reconcile", "-C", str(repo.wt))
    assert (reconciled.returncode, reconciled.stdout) == (0, "recovered: discarded\n")
    assert not json.loads(cli("status", "-C", str(repo.wt), "--json").stdout)["needs_reconcile"]


def test_hold_owns_heartbeats_and_disposes_on_sigterm(repo: Repo) -> None:
    before = snapshot(repo)
    env = {k: v for k, v in os.environ.items() if k != "MCPSTAGE_CRASH_AT"}
    env["PYTHONPATH"] = str(REPO_ROOT)
    with subprocess.Popen(
        [sys.executable, "-m", "mcpstage", "stage", "-C", str(repo.wt), "--hold", "--", "node"],
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    ) as holder:
        assert holder.stdout is not None
        key = holder.stdout.readline().strip()
        lease = mcpstage.status(repo.wt).leases[0].lease
        assert (lease.key, lease.owner.pid) == (key, holder.pid)
        assert cli("heartbeat", "-C", str(repo.wt), key).returncode == 0
        holder.send_signal(signal.SIGTERM)
        assert holder.wait(30) == 0
    assert snapshot(repo) == before


def test_a_corrupt_manifest_fails_without_touching_the_config(repo: Repo) -> None:
    key = cli("stage", "-C", str(repo.wt), "--", "node").stdout.strip()
    config = repo.config().read_bytes()
    repo.state().write_text("{")
    for args in (("stage", "--", "node"), ("dispose", key), ("reconcile",)):
        result = cli(args[0], "-C", str(repo.wt), *args[1:])
        assert result.returncode == 1
        assert result.stderr.startswith(f"mcpstage: corrupt lease manifest {repo.state()} (")
        assert result.stderr.endswith("; repair or remove it\n")
    assert repo.config().read_bytes() == config
