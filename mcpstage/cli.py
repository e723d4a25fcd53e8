"""The ``mcpstage`` command line: stage, dispose, heartbeat, reconcile and status.

Theory of operation
-------------------
Each command is one library call (``mcpstage._staging`` / ``_status``), so the command line
follows exactly the protocol a harness uses in-process. Results go to stdout, one fact per line
(``stage`` prints the key alone, for ``KEY=$(mcpstage stage -- ...)``; ``--json`` prints one JSON
document); problems go to stderr as ``mcpstage: <word>: <details>`` where the word is stable
(``refused``, ``quarantined``, ``busy``, ``not found``, ``usage``).

Exit status: 0 success, 1 runtime failure, 2 usage, 3 refused, 4 quarantined, 5 busy,
6 lease not found (see ``mcpstage._errors`` and ``docs/mcpstage.md``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any, NoReturn

from . import _errors, _locks, _manifest, _owner, _staging, _status
from ._errors import StageError, UsageError
from ._session import Session

DESCRIPTION = """\
Stage per-session MCP servers into a git worktree's .cursor/mcp.json without ever corrupting the
operator's own config, without letting `git add -A` sweep session files, surviving crashes and
concurrent peers.

  KEY=$(mcpstage stage -- node bridge.js --port 7)   stage a server; prints its key
  mcpstage dispose "$KEY"                            drop it; the last one restores everything
  mcpstage stage --hold -- node bridge.js            stage, heartbeat until signalled, dispose
  mcpstage reconcile                                 recover from crashes, reap dead leases
  mcpstage status [--json]                           leases, locks, quarantine, leftovers
"""

EPILOG = (
    "Exit status: 0 success, 1 runtime failure, 2 usage, 3 refused, 4 quarantined, 5 busy, "
    "6 lease not found."
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(_errors.USAGE, f"mcpstage: usage: {message}\n")


def _common() -> _Parser:
    common = _Parser(add_help=False)
    common.add_argument(
        "-C",
        "--worktree",
        default=".",
        metavar="PATH",
        help="the git worktree (or a directory inside it); default: the current directory",
    )
    common.add_argument(
        "--wait",
        type=float,
        default=_locks.DEFAULT_WAIT,
        metavar="SECONDS",
        help=f"how long to retry a held lock before giving up (default {_locks.DEFAULT_WAIT:g})",
    )
    return common


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="mcpstage",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    common = _common()

    stage = commands.add_parser(
        "stage",
        parents=[common],
        help="stage a server entry; print its key",
        description="Stage `COMMAND ARG...` as a fusion-custom-tools-<uuid> server; print the key.",
        epilog=EPILOG,
    )
    stage.add_argument("--key", help="use this fusion-custom-tools-<uuid> key")
    stage.add_argument(
        "--env", action="append", default=None, metavar="NAME=VALUE", help="server environment"
    )
    stage.add_argument(
        "--owner-pid",
        type=int,
        default=None,
        metavar="PID",
        help="the process whose life the lease follows (default: the caller, our parent)",
    )
    stage.add_argument(
        "--lease-ttl",
        type=float,
        default=_staging.DEFAULT_LEASE_TTL,
        metavar="SECONDS",
        help="how long a lease of another host lives without a heartbeat",
    )
    stage.add_argument(
        "--hold",
        action="store_true",
        help="stay in the foreground owning the lease, heartbeating, until SIGTERM/SIGINT/SIGHUP; "
        "then dispose it",
    )
    stage.add_argument("--json", action="store_true", help="print the lease as JSON")
    stage.add_argument("server", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARG...]")
    stage.set_defaults(run=_stage)

    for name, text in (
        ("dispose", "drop a lease (the last one restores the worktree)"),
        ("heartbeat", "record that a lease's owner is alive"),
    ):
        sub = commands.add_parser(
            name, parents=[common], help=text, description=text, epilog=EPILOG
        )
        sub.add_argument("key", metavar="KEY")
        sub.set_defaults(run=_dispose if name == "dispose" else _heartbeat)

    reconcile = commands.add_parser(
        "reconcile",
        parents=[common],
        help="recover from crashes, reap dead leases, finish interrupted cleanups",
        epilog=EPILOG,
    )
    reconcile.add_argument(
        "--no-reap", action="store_true", help="recover only; keep leases of dead owners"
    )
    reconcile.add_argument("--json", action="store_true")
    reconcile.set_defaults(run=_reconcile)

    status = commands.add_parser(
        "status",
        parents=[common],
        help="leases, locks, quarantine and leftovers (read-only; exit 4 when quarantined)",
        epilog=EPILOG,
    )
    status.add_argument("--json", action="store_true")
    status.set_defaults(run=_show_status)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``mcpstage``; returns the exit status."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else _errors.USAGE
    if args.command is None:
        parser.print_help(sys.stderr)
        return _errors.USAGE
    try:
        return int(args.run(args))
    except StageError as error:
        _say(str(error))
        return error.exit_code
    except BrokenPipeError:
        # `mcpstage status | head`: stop quietly, and keep Python from complaining at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return _errors.FAILURE
    except OSError as error:
        _say(f"failed: {error}")
        return _errors.FAILURE
    except KeyboardInterrupt:
        return 130


def _say(message: str) -> None:
    print(f"mcpstage: {message}", file=sys.stderr, flush=True)


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=True), flush=True)


def _entry(args: argparse.Namespace) -> _manifest.ServerEntry:
    server = list(args.server)
    if server and server[0] == "--":
        server = server[1:]
    if not server:
        raise UsageError("usage: stage needs the server command after `--`")
    env = None
    if args.env is not None:
        pairs = []
        for item in args.env:
            name, sep, value = item.partition("=")
            if not sep or not name:
                raise UsageError(f"usage: --env wants NAME=VALUE, not {item!r}")
            pairs.append((name, value))
        env = tuple(pairs)
    return _manifest.ServerEntry(command=server[0], args=tuple(server[1:]), env=env)


def _lease_json(lease: _manifest.Lease, worktree: str) -> dict[str, Any]:
    return {
        "key": lease.key,
        "worktree": worktree,
        "entry": lease.entry.to_json(),
        "owner": {"pid": lease.owner.pid, "hostname": lease.owner.hostname},
    }


def _stage(args: argparse.Namespace) -> int:
    entry = _entry(args)
    if args.hold:
        if args.owner_pid is not None:
            raise UsageError("usage: --hold owns the lease itself; drop --owner-pid")
        return _hold(args, entry)
    owner = _owner.process(os.getppid() if args.owner_pid is None else args.owner_pid)
    outcome = _staging.stage(
        args.worktree,
        entry,
        key=args.key,
        owner=owner,
        lease_ttl=args.lease_ttl,
        wait=args.wait,
    )
    assert outcome.lease is not None
    if args.json:
        _print_json(_lease_json(outcome.lease, outcome.shape.worktree))
    else:
        print(outcome.lease.key, flush=True)
    return _errors.OK


def _hold(args: argparse.Namespace, entry: _manifest.ServerEntry) -> int:
    if args.key is not None:
        raise UsageError("usage: --hold picks its own key")
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda *_: stop.set())
    session = Session.open(args.worktree, entry, lease_ttl=args.lease_ttl, wait=args.wait)
    if args.json:
        _print_json(_lease_json(session.lease, session.worktree))
    else:
        print(session.key, flush=True)
    while not stop.wait(1.0):
        pass
    session.close()
    return _errors.OK


def _dispose(args: argparse.Namespace) -> int:
    outcome = _staging.dispose(args.worktree, args.key, wait=args.wait)
    print(f"disposed {args.key}", flush=True)
    if outcome.cleaned:
        print("cleaned up", flush=True)
    if outcome.state is not None and outcome.state.quarantine is not None:
        _say(
            f"quarantined: {args.key} left the manifest, but {outcome.shape.config_path} does "
            "not parse and stays as the operator wrote it; repair it, then `mcpstage reconcile`"
        )
        return _errors.QUARANTINED
    return _errors.OK


def _heartbeat(args: argparse.Namespace) -> int:
    _staging.heartbeat(args.worktree, args.key, wait=args.wait)
    return _errors.OK


def _reconcile(args: argparse.Namespace) -> int:
    outcome = _staging.reconcile(args.worktree, reap=not args.no_reap, wait=args.wait)
    quarantined = outcome.state is not None and outcome.state.quarantine is not None
    if args.json:
        _print_json(
            {
                "worktree": outcome.shape.worktree,
                "recovered": list(outcome.recovered),
                "reaped": list(outcome.reaped),
                "cleaned": outcome.cleaned,
                "leases": [] if outcome.state is None else [x.key for x in outcome.state.leases],
                "quarantined": quarantined,
            }
        )
    else:
        for what in outcome.recovered:
            print(f"recovered: {what}")
        for key in outcome.reaped:
            print(f"reaped: {key}")
        if outcome.cleaned:
            print("cleaned up")
        if not (outcome.recovered or outcome.reaped or outcome.cleaned):
            print("nothing to do")
        sys.stdout.flush()
    if quarantined:
        assert outcome.state is not None and outcome.state.quarantine is not None
        _say(f"quarantined: {outcome.state.quarantine.reason}")
        return _errors.QUARANTINED
    return _errors.OK


def _show_status(args: argparse.Namespace) -> int:
    report = _status.status(args.worktree)
    if args.json:
        _print_json(_status.to_json(report))
    else:
        _print_status(report)
    return _errors.QUARANTINED if report.quarantined else _errors.OK


def _print_status(report: _status.Status) -> None:
    shape = report.shape
    kind = f"linked worktree {shape.worktree_id}" if shape.linked else "main worktree"
    print(f"worktree: {shape.worktree} ({kind})")
    print(f"git common dir: {shape.common_dir}")
    marker = report.marker
    print(
        "exclusion: "
        + ("none" if marker is None else f"in {shape.exclude_path}")
        + ("" if marker is None or not marker.cursor_created else " (.cursor/ is fusion's)")
    )
    state = report.state
    if state is None:
        print("manifest: none")
    else:
        pending = "" if state.pending is None else f", pending {state.pending.kind}"
        edit = ", operator edit latched" if state.operator_edit else ""
        print(f"manifest: seq {state.seq}{pending}{edit}")
    if state is not None and state.quarantine is not None:
        print(f"quarantine: {state.quarantine.reason}")
    else:
        print("quarantine: no")
    print(f"leases: {len(report.leases)}")
    for each in report.leases:
        lease = each.lease
        command = " ".join([lease.entry.command, *lease.entry.args])
        life = "dead" if each.dead else "live"
        print(f"  {lease.key} {life} pid {lease.owner.pid} on {lease.owner.hostname}: {command}")
    for name, view in (("main lock", report.main_lock), ("bootstrap lock", report.bootstrap_lock)):
        if view.owner is not None:
            who = f" by pid {view.owner.process.pid} on {view.owner.process.hostname}"
        else:
            who = ""
        age = "" if view.age is None else f" for {view.age:.1f} s"
        why = f" ({view.reason})" if view.reason else ""
        print(f"{name}: {view.state}{who}{age}{why}")
    if report.needs_reconcile:
        print("needs: mcpstage reconcile")
    sys.stdout.flush()
