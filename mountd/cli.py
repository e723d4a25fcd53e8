"""The ``mountd`` command line: mount, unmount and list FUSE mounts of ``vfs`` trees.

Theory of operation
-------------------
Every command checks everything it can before it changes anything: ``mount`` loads and checks
the whole spec (or imports the factory) before it touches the mountpoint, so a bad spec exits 2
with the file, key and problem and nothing is mounted. Then it clears a dead mount of ours at the
mountpoint (one left by a killed daemon), refuses a live one, creates the directory if missing,
and serves (see ``mountd._daemon``). ``unmount`` asks the daemon to exit (SIGTERM, after which it
unmounts itself) and only falls back to ``fusermount3``; a dead mount is detached lazily, and so
is a hung one, after SIGKILL to its daemon. ``status`` reads mountinfo for what exists and the
state files for what serves it. No command touches a mountpoint but to probe it (``statvfs`` in a
thread, with a timeout): a hung daemon blocks every ``stat`` of its mountpoint, so the path a
user names is matched against mountinfo by its text (``mountd._registry.canonical``).

Exit status: 0 success, 1 runtime failure, 2 usage or spec error.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import inspect
import json
import logging
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, NoReturn

import vfs
from vfs import AuditLog, audited_fs, is_under, normalize_path
from vfs.lowlevel import add_prefix, quoted, strip_prefix

if sys.version_info < (3, 11):  # pragma: no cover - trio brings the backport on 3.10
    from exceptiongroup import BaseExceptionGroup

from . import MountOptions
from . import _registry as registry
from ._review import GIT_DIR, change_lines
from ._spec import SpecError, build, default_layer, describe, load_spec
from ._terminal import write_diff
from ._warm import NO_WARM_HELP

OK, FAILURE, USAGE = 0, 1, 2
READY_TIMEOUT = 30.0
UNMOUNT_TIMEOUT = 10.0

DESCRIPTION = """\
Serve a vfs tree as a real Linux FUSE mount, so unmodified tools (git, rg, python, tar, sqlite)
run against an actual path.

  mountd mount ./mnt                   the current directory under copy-on-write, with a /tmp
  mountd run -- make test              run a command in a sandbox whose / is that tree, then
                                       show what it changed (--diff, --apply: see `run --help`)
  mountd mount spec.toml ./mnt         the tree described by a TOML spec (see docs/spec.md)
  mountd mount --daemon spec.toml ./mnt   the same in the background; returns once it is live
  mountd status                        what is mounted, by whom, and how busy it is
  mountd unmount ./mnt                 stop serving (also clears a mount whose daemon died)
  mountd turn end ./mnt                end the agent's turn: /tmp is empty again (see `turn --help`)
  mountd changes ./mnt                 what the mount's copy-on-write tree changed (so far)
  mountd diff ./mnt [PATH...]          ... as a git-style diff
  mountd apply ./mnt [PATH...]         ... written back to the directory it covers (inside
                                       .git only git's own files; see `apply --help`)
  mountd checkpoint list ./mnt         the tree's checkpoints (one per turn, and those you take)
  mountd checkpoint rewind ./mnt N     the tree becomes checkpoint N again (undoable: the state
                                       before is kept as a checkpoint; see `checkpoint --help`)
  mountd checkpoint fork ./mnt N ./b   a second, independent mount at ./b starting from
                                       checkpoint N (a session of its own)
"""

MOUNT_DESCRIPTION = """\
Mount a vfs tree at MOUNTPOINT and serve it until interrupted (Ctrl-C, SIGTERM or SIGHUP unmount
cleanly and exit 0) or until `mountd unmount MOUNTPOINT`.

What is served:
  no SPEC        the current directory under copy-on-write at / (the directory is written
                 only by `mountd apply`; a git repository gets the repository policy:
                 .git/hooks and .git/config are read-only), with a writable in-memory /tmp
                 that is the agent's per-turn scratch (`mountd turn begin|end`). The writes
                 are kept on disk in a session of this directory (~/.local/state/agentroot/
                 sessions, or $XDG_STATE_HOME's): a killed daemon loses nothing that was
                 closed or fsynced, and the session outlives the mount. A later mount of the
                 same directory must say what to do with its changes: --resume continues with
                 them, --fresh discards them; --ephemeral keeps them in memory only (they die
                 with the daemon). `mountd unmount --discard` drops the session; `mountd
                 status` lists the sessions. --session DIR serves the session in DIR (a
                 fork's: `mountd checkpoint fork`) over the directory it belongs to. The tree
                 is listed through the mount before the mount is said to be live (--no-warm:
                 not), so that the kernel answers the first walk of it (git status) from its
                 cache.
  SPEC           a TOML file describing the tree (layers: temp, dir, empty, union, overlay,
                 host, cow, s3; see docs/spec.md); checked completely before anything is mounted
  --factory      a Python function returning a vfs.FileSystem (sync or async, no arguments),
                 imported as package.module:function with the current directory on sys.path

--turns gives a SPEC or --factory tree the same per-turn /tmp (it shadows the tree's own /tmp).
MOUNTPOINT is created if missing. A dead mount left there by a killed mountd is cleared first.
Every change made through the mount, and every access a policy denied, is appended to an audit
log (JSON lines): --audit FILE, or <state dir>/<key>.audit.jsonl next to the daemon's state.
"""

EPILOG = "Exit status: 0 success, 1 runtime failure, 2 usage or spec error."

TURN_ACTIONS = ("begin", "end", "status", "changes")
TURN_DESCRIPTION = """\
Drive the turns of a mount served with a per-turn /tmp (the default mount, or --turns), through
its control channel (a private Unix socket next to the daemon's state file).

  begin     start a turn: /tmp is a new, empty scratch; --cwd names the harness's directory
  end       end the turn: /tmp is empty through the mount when this returns
  status    the active turn, what /tmp holds, the request counters
  changes   the paths changed (through the mount or the API) since the turn began
            (`mountd changes` lists what differs from the host directory instead)
"""

COW_DESCRIPTION = """\
Review the copy-on-write tree a mount serves (the default mount's root, or a spec's cow layers)
while it is mounted, through the daemon's control channel.

  mountd changes ./mnt             what differs from the directory underneath, one path a line:
                                   A added, M modified, D deleted, R renamed (from), m mode
                                   changed; git's own files under /.git are counted on one line;
                                   what apply refuses is marked (refused: why)
  mountd diff ./mnt [PATH...]      the git-style diff (default: what apply would write, outside
                                   /.git), in the directory's coordinates: `git apply` there
                                   takes it; what apply refuses is named on stderr
  mountd apply ./mnt [PATH...]     write the changes (default: all) into the directory
  ... --checkpoint N ./mnt         the same for checkpoint N of the tree (`mountd checkpoint
                                   list`) instead of the tree now: its changes against the
                                   directory, its diff, or written into the directory

PATH is a path in the tree (/src/a.py or src/a.py), or a path through MOUNTPOINT (./mnt/src/a.py);
a directory means everything beneath it. Apply has the rules of `mountd run --apply`: inside any
.git (nested repositories too) it writes only what git writes in a normal session (objects,
refs, logs, packed-refs, index, HEAD and the *_HEAD files, commit messages), never hooks, config,
commondir, worktrees, modules, info or objects/info, a lock file or a symlink; never a symlink
into a .git; never a set-uid or set-gid bit; never what the tree's policy does not let it write;
and never through a symlink or across a mount point in the directory (a file is written as a new
file renamed into place, so its other hard links keep their bytes). Refused changes are kept and
listed with their reasons, and naming only them is an error. If a file changed in the directory
since the mount copied it, nothing is written (exit 1); the same when a file to apply is open for
writing through the mount. Applied paths are no longer changes, and the mount goes on serving the
same names and bytes.

With --checkpoint N the same rules judge checkpoint N's changes, and a conflict is a file that
changed in the directory since N's tree copied it. The mount goes on serving what it served,
checkpoint N or not: where the tree now differs from what N wrote, that is a change of its own.
"""


CHECKPOINT_ACTIONS = ("list", "diff", "rewind", "fork", "prune")
CHECKPOINT_DESCRIPTION = """\
Record the state of a mount's tree, compare states, and go back to one, while it is mounted,
through the daemon's control channel. The default mount keeps its checkpoints in its session, so
they outlive the daemon (a killed one loses at most the turn in progress); each `mountd turn end`
takes one. The host directory under the tree is never changed by any of this.

  mountd checkpoint MOUNTPOINT [--label L]   take one now (a labelled one is never pruned)
  mountd checkpoint list MOUNTPOINT          number, turn, label, time, and what changed since
                                             the state the tree grew from: the checkpoint taken
                                             or rewound to before it (A added, M modified, D
                                             deleted, bytes of the files added or modified)
  mountd checkpoint diff MOUNTPOINT A [B]    the git-style diff from checkpoint A to B (or now)
  mountd checkpoint rewind MOUNTPOINT N      the tree becomes checkpoint N at once; processes
                                             reading through the mount see N's bytes, while a
                                             file they hold open stays the one they opened. The
                                             state before is kept as a checkpoint, so a rewind
                                             is undone by rewinding to that one; later
                                             checkpoints stay.
  mountd checkpoint fork MOUNTPOINT N NEWMOUNTPOINT
                                             a second tree starting from checkpoint N, over
                                             the same directory, mounted at NEWMOUNTPOINT (an
                                             empty directory, made if missing) by a daemon of
                                             its own: writes in either are not seen in the
                                             other. It is a session of its own (`mountd status`
                                             lists it as a fork; `mountd unmount --discard
                                             NEWMOUNTPOINT` drops it; after a kill, `mountd
                                             mount --session DIR --resume NEWMOUNTPOINT`
                                             serves it again). It shares the checkpoint store's
                                             files with the first; its own files are copies.
  mountd checkpoint prune MOUNTPOINT [--keep K]   keep the labelled ones and the last K (50)

Only the default tree forks from the command line (a spec's or factory's tree has no session:
fork it in Python, `tree.fork(N)`). `mountd changes|diff|apply --checkpoint N MOUNTPOINT` review
checkpoint N against the directory and write it there (see `apply --help`).
"""


class UsageError(Exception):
    """A command line that cannot work; printed as ``mountd: <message>``, exit 2."""


class Failure(Exception):
    """A runtime failure; printed as ``mountd: <message>``, exit 1."""


@dataclass(frozen=True)
class Source:
    """What to serve: a loaded spec, a factory reference, or the embedded default."""

    label: str  # recorded in the state file and shown by `status`
    description: str
    make: Callable[[], Any]  # returns a FileSystem or an awaitable of one
    turns: bool = False  # served under a per-turn /tmp (vfs.turns.TurnRoot)
    session: str = ""  # the directory keeping the default tree's changes (mountd._sessions)
    project: str = ""  # the directory the default tree serves (a fork is a session of it)
    warm: bool = False  # listed through the mount before it is handed over (mountd._warm)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``mountd`` command line; returns the exit status."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else USAGE
    if args.command is None:
        parser.print_help(sys.stderr)
        return USAGE
    try:
        return int(args.run(args))
    except SpecError as error:
        _say(str(error))
        return USAGE
    except UsageError as error:
        _say(str(error))
        return USAGE
    except Failure as error:
        _say(str(error))
        return FAILURE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `mountd status | head`: stop quietly, and keep Python from complaining at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return FAILURE


def _say(message: str) -> None:
    print(f"mountd: {message}", file=sys.stderr, flush=True)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(USAGE, f"mountd: {message}\n(see `{self.prog} --help`)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="mountd",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    mount = commands.add_parser(
        "mount",
        help="serve a vfs tree at a mountpoint",
        description=MOUNT_DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="mountd mount [options] [SPEC] MOUNTPOINT",
    )
    mount.add_argument(
        "paths",
        nargs="+",
        metavar="[SPEC] MOUNTPOINT",
        help="optional TOML spec, then the mountpoint",
    )
    mount.add_argument(
        "--daemon",
        action="store_true",
        help="serve in the background; return once the mount is live (status 0) or failed (1)",
    )
    mount.add_argument(
        "--factory",
        metavar="MODULE:FUNCTION",
        help="build the tree in Python: package.module:function returning a vfs.FileSystem",
    )
    mount.add_argument(
        "--allow-other",
        action="store_true",
        help="let other users access the mount (default: only you)",
    )
    mount.add_argument(
        "--read-only", action="store_true", help="refuse every write through the mount (EROFS)"
    )
    mount.add_argument(
        "--debug", action="store_true", help="log every FUSE request (libfuse debug) to stderr"
    )
    mount.add_argument(
        "--cache-timeout",
        type=_seconds,
        default=300.0,
        metavar="SECONDS",
        help="how long the kernel may cache names, attributes and listings (default 300; the "
        "daemon invalidates them when the tree changes; lower it for a host directory that "
        "other programs change; 0 also drops a file's cached pages whenever its size or time "
        "moves)",
    )
    mount.add_argument(
        "--ready-timeout",
        type=_seconds,
        default=READY_TIMEOUT,
        metavar="SECONDS",
        help=f"with --daemon: how long to wait for the mount to become live (default {READY_TIMEOUT:g})",
    )
    mount.add_argument(
        "--turns",
        action="store_true",
        help="serve /tmp as a per-turn scratch that `mountd turn end` empties (the default "
        "mount always does)",
    )
    mount.add_argument(
        "--audit",
        metavar="FILE",
        help="append the audit log (changes and denied accesses, JSON lines) to FILE",
    )
    keep = mount.add_mutually_exclusive_group()
    keep.add_argument(
        "--resume",
        action="store_true",
        help="default tree: continue with the changes an earlier mount of this directory left",
    )
    keep.add_argument(
        "--fresh",
        action="store_true",
        help="default tree: discard the changes an earlier mount of this directory left",
    )
    keep.add_argument(
        "--ephemeral",
        action="store_true",
        help="default tree: keep the changes in memory only (they die with the daemon)",
    )
    mount.add_argument(
        "--session",
        metavar="DIR",
        help="serve the default tree of the session directory DIR (a fork's, from `mountd "
        "checkpoint fork`; `mountd status` lists them), over the directory its record names, "
        "whatever the current directory",
    )
    mount.add_argument("--no-warm", action="store_true", help="default tree: " + NO_WARM_HELP)
    mount.add_argument("--ready-fd", type=int, help=argparse.SUPPRESS)
    mount.set_defaults(run=_mount)

    from ._run import add_run_parser

    add_run_parser(commands, EPILOG, _run)

    unmount = commands.add_parser(
        "unmount",
        aliases=["umount"],
        help="stop serving a mountpoint (also clears a dead one)",
        description="Stop the daemon serving MOUNTPOINT (it unmounts cleanly) and wait for it. "
        "A dead mount (its daemon was killed) is detached lazily and its record removed; so is "
        "a hung one (its daemon does not answer, e.g. stopped), after killing its daemon.",
        epilog=EPILOG,
    )
    unmount.add_argument("mountpoint", metavar="MOUNTPOINT")
    unmount.add_argument(
        "--timeout",
        type=_seconds,
        default=UNMOUNT_TIMEOUT,
        metavar="SECONDS",
        help=f"how long to wait for the daemon before forcing the unmount (default {UNMOUNT_TIMEOUT:g})",
    )
    unmount.add_argument(
        "--discard",
        action="store_true",
        help="also remove the session that keeps the default tree's changes (they are lost)",
    )
    unmount.set_defaults(run=_unmount)

    status = commands.add_parser(
        "status",
        help="list this host's mountd mounts",
        description="List this host's mountd mounts (from /proc/self/mountinfo) with their spec, "
        "daemon pid and FUSE operation counters. A mount whose daemon died is marked dead; "
        "`mountd unmount` or the next `mountd mount` there clears it.",
        epilog=EPILOG,
    )
    status.add_argument("--json", action="store_true", help="print a JSON array instead of text")
    status.set_defaults(run=_status)

    turn = commands.add_parser(
        "turn",
        help="begin or end an agent's turn on a mount, or show its turn and changes",
        description=TURN_DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    turn.add_argument("action", choices=TURN_ACTIONS, metavar="{" + ",".join(TURN_ACTIONS) + "}")
    turn.add_argument("mountpoint", metavar="MOUNTPOINT")
    turn.add_argument(
        "--cwd",
        metavar="DIR",
        help="with begin: the harness's working directory, whose agent-tools/ spills the turn "
        "may adopt (default: the current directory)",
    )
    turn.add_argument("--json", action="store_true", help="print the daemon's JSON answer")
    turn.set_defaults(run=_turn)

    checkpoint = commands.add_parser(
        "checkpoint",
        help="take, list, compare, rewind to or fork checkpoints of a mount's tree",
        description=CHECKPOINT_DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="mountd checkpoint [list|diff|rewind|fork|prune] MOUNTPOINT [ARG...] [options]",
    )
    checkpoint.add_argument("words", nargs="+", metavar="WORD", help=argparse.SUPPRESS)
    checkpoint.add_argument("--label", metavar="L", help="with a new checkpoint: its label")
    checkpoint.add_argument(
        "--keep", metavar="K", type=int, help="with prune: the unlabelled checkpoints to keep"
    )
    checkpoint.add_argument("--json", action="store_true", help="print the daemon's JSON answer")
    checkpoint.set_defaults(run=_checkpoint)

    for name, help_text in (
        ("changes", "list what a mount's copy-on-write tree changed"),
        ("diff", "print the diff of a mount's copy-on-write tree"),
        ("apply", "write a mount's copy-on-write changes back to the directory underneath"),
    ):
        review = commands.add_parser(
            name,
            help=help_text,
            description=COW_DESCRIPTION,
            epilog=EPILOG,
            formatter_class=argparse.RawDescriptionHelpFormatter,
            usage=f"mountd {name} [options] MOUNTPOINT [PATH...]",
        )
        review.add_argument("mountpoint", metavar="MOUNTPOINT")
        review.add_argument("paths", nargs="*", metavar="PATH", help=argparse.SUPPRESS)
        review.add_argument(
            "--checkpoint",
            metavar="N",
            type=_checkpoint_argument,
            help=f"{name} checkpoint N of the tree (`mountd checkpoint list`) instead of the "
            "tree now",
        )
        if name != "diff":
            review.add_argument(
                "--json", action="store_true", help="print the daemon's JSON answer"
            )
        review.set_defaults(run=_review, action=name)
    return parser


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}")
    return value


# --- mount -------------------------------------------------------------------------------------


def _mount(args: argparse.Namespace) -> int:
    if len(args.paths) > 2:
        raise UsageError(f"too many arguments: {' '.join(args.paths)} (expected [SPEC] MOUNTPOINT)")
    spec_arg, mountpoint_arg = args.paths if len(args.paths) == 2 else (None, args.paths[0])
    if spec_arg is not None and args.factory:
        raise UsageError("give either SPEC or --factory, not both")
    source = _source(spec_arg, args.factory, args)
    if args.turns:
        source = replace(source, turns=True)
    mountpoint, created = _prepare_mountpoint(mountpoint_arg)
    try:
        if args.daemon:
            return _mount_in_background(args, spec_arg, mountpoint, source)
        return _mount_in_foreground(args, mountpoint, source)
    except BaseException:
        if created:  # a failed mount leaves nothing behind, not even the directory it made
            with contextlib.suppress(OSError):
                os.rmdir(mountpoint)
        raise


def _source(spec_arg: str | None, factory: str | None, args: argparse.Namespace) -> Source:
    """Check what to serve, before anything touches the mountpoint."""
    if args.session is not None:
        if factory or spec_arg is not None:
            raise UsageError("--session serves a session's default tree: give no SPEC or --factory")
        if args.ephemeral:
            raise UsageError("--session keeps the changes in its session, not --ephemeral")
        return _default_source(_session_at(args.session, args), args)
    if factory:
        function = _factory_function(factory)
        return Source(f"factory {factory}", f"the tree {factory}() returns", function)
    if spec_arg is not None:
        layer = load_spec(spec_arg)
        return Source(os.path.abspath(spec_arg), describe(layer), lambda: build(layer))
    cwd = os.getcwd()
    if args.ephemeral:
        layer = default_layer(cwd)
        description = f"{cwd} under copy-on-write as its root (changes in memory), with a writable in-memory /tmp"
        return Source(
            "default", description, lambda: build(layer), turns=True, project=cwd, warm=True
        )
    return _default_source(_default_session(cwd, args), args)


def _default_source(session: Any, args: argparse.Namespace) -> Source:
    """The default tree over ``session``'s project, its changes kept in ``session``."""
    from ._sessions import fork_of

    project = session.project
    layer = default_layer(project, upper=session.upper)
    fork = fork_of(session.path)
    of = "" if fork is None else f"a fork of checkpoint {fork.checkpoint} of {fork.of}, "
    description = (
        f"{project} under copy-on-write as its root ({of}changes kept in {session.upper}), "
        "with a writable in-memory /tmp"
    )
    if args.daemon:
        session.release()  # (checked here; the daemon takes it)
    else:
        _SESSIONS.append(session)  # held for the life of this process
    make = functools.partial(build, layer)
    return Source(
        "default",
        description,
        make,
        turns=True,
        session=str(session.path),
        project=project,
        warm=True,
    )


_SESSIONS: list[Any] = []  # the sessions this process serves (their locks die with it)


def _default_session(cwd: str, args: argparse.Namespace) -> Any:
    """The session whose upper keeps the default tree's changes (see mountd._sessions)."""
    from ._sessions import SessionError, open_session

    try:
        return open_session(cwd, "mount", resume=args.resume, fresh=args.fresh)
    except SessionError as error:
        raise Failure(str(error)) from None


def _session_at(path: str, args: argparse.Namespace) -> Any:
    """The session directory ``path`` (``--session``), taken as :func:`_default_session` takes
    the current directory's."""
    from ._sessions import SessionError, open_session_at

    try:
        return open_session_at(path, resume=args.resume, fresh=args.fresh)
    except SessionError as error:
        raise Failure(str(error)) from None


def _factory_function(reference: str) -> Callable[[], Any]:
    module_name, sep, attribute = reference.partition(":")
    if not sep or not module_name or not attribute:
        raise UsageError(f"--factory {reference}: expected package.module:function")
    # As `python -m` would: the current directory's modules are importable.
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as error:
        raise UsageError(f"--factory {reference}: cannot import {module_name}: {error}") from None
    for name in attribute.split("."):
        try:
            target = getattr(target, name)
        except AttributeError:
            raise UsageError(
                f"--factory {reference}: {module_name} has no attribute {attribute}"
            ) from None
    if not callable(target):
        raise UsageError(f"--factory {reference}: {attribute} is not callable")
    return target  # type: ignore[no-any-return]


def _prepare_mountpoint(mountpoint_arg: str) -> tuple[str, bool]:
    """Clear a dead mount of ours, refuse a live one, create the directory; the canonical path,
    and whether this made the directory."""
    _refuse_untrusted_link(mountpoint_arg)
    path = registry.canonical(mountpoint_arg)
    while (entry := registry.mount_at(path)) is not None:
        health = registry.probe(path)
        if health != "dead":
            state = registry.read_state(path)
            owner = f" (pid {state.pid})" if state is not None else ""
            why = "is already mounted" if health != "hung" else "is mounted by a daemon that hangs"
            raise Failure(f"{path} {why}{owner}; run `mountd unmount {path}` first")
        try:
            registry.detach(entry.mountpoint)
        except registry.DetachError as error:
            raise Failure(f"cannot clear the {health} mount at {path}: {error}") from None
        registry.remove_state(path)
        _say(f"cleared a {health} mount at {path}")
    if os.path.lexists(path) and not os.path.isdir(path):
        raise Failure(f"mountpoint is not a directory: {path}")
    if os.path.isdir(path) and _holds_anything(path):
        raise Failure(
            f"{path} is not empty: the mount would hide what it holds; mount on an empty directory"
        )
    created = not os.path.lexists(path)
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as error:
        raise Failure(f"cannot create mountpoint {path}: {error.strerror}") from None
    return path, created


def _options(args: argparse.Namespace, *, warm: bool = False) -> MountOptions:
    """The mount's options (``warm``: the tree is the default one, listed unless --no-warm)."""
    return MountOptions(
        allow_other=args.allow_other,
        read_only=args.read_only,
        entry_timeout=args.cache_timeout,
        attr_timeout=args.cache_timeout,
        negative_timeout=args.cache_timeout,
        # No caching asked for: file pages are dropped whenever the kernel sees a file's size or
        # time move, as for attributes (pages written through the mount are kept otherwise,
        # and a program writing the host file meanwhile is not seen until a lookup or stat).
        keep_written_pages=args.cache_timeout > 0,
        debug=args.debug,
        warm=warm and not args.no_warm,
    )


def _mount_in_foreground(args: argparse.Namespace, mountpoint: str, source: Source) -> int:
    import trio

    from ._daemon import serve_until_signalled

    # The daemon's own log lines (an EIO's traceback, a cleared stale mount) go to stderr.
    logging.basicConfig(
        level=logging.DEBUG if args.debug else logging.WARNING, format="mountd: %(message)s"
    )

    def announce() -> None:
        how = (
            f"mountd unmount {mountpoint}"
            if args.ready_fd is not None
            else f"Ctrl-C or `mountd unmount {mountpoint}`"
        )
        print(
            f"mountd: {mountpoint} is live: {source.description} (pid {os.getpid()}); stop with {how}",
            flush=True,
        )

    async def run() -> int:
        from vfs.turns import TurnRoot, turn_root

        fs = await _make_tree(source)
        audit = _audit_log(args.audit, mountpoint)
        if not isinstance(fs, TurnRoot):  # (a factory's TurnRoot is served as it is)
            fs = audited_fs(fs, audit)
        if source.turns and not isinstance(fs, TurnRoot):
            from ._control import DEFAULT_KEEP_CHECKPOINTS

            fs = root = turn_root(fs, keep_checkpoints=DEFAULT_KEEP_CHECKPOINTS)
            audit.turn_source = lambda: None if root.turn is None else root.turn.number
        served = await serve_until_signalled(
            fs,
            mountpoint,
            _options(args, warm=source.warm),
            spec=source.label,
            description=source.description,
            announce=announce,
            ready_fd=args.ready_fd,
            session=source.session,
            project=source.project,
        )
        why = served.signal.name if served.signal is not None else "an outside unmount"
        print(f"mountd: unmounted {mountpoint} ({why})", flush=True)
        return OK

    try:
        return trio.run(run)
    except Exception as error:
        # trio wraps errors raised inside nurseries in exception groups; report the one inside.
        leaf = _only_leaf(error)
        if isinstance(leaf, (Failure, UsageError, SpecError)):
            raise leaf from None
        if isinstance(leaf, (OSError, RuntimeError)):
            from ._serve import fuse_hint

            raise Failure(f"serving {mountpoint} failed: {leaf}{fuse_hint()}") from None
        raise


def _audit_log(path: str | None, mountpoint: str) -> AuditLog:
    if path is None:
        registry.state_dir(create=True)
        path = str(registry.state_dir() / f"{registry.state_key(mountpoint)}.audit.jsonl")
    try:
        return AuditLog(path)
    except OSError as error:
        raise Failure(f"cannot open the audit log {path}: {error.strerror}") from None


def _run(args: argparse.Namespace) -> int:
    from . import _run as sandbox

    try:
        return sandbox.command(args)
    except sandbox.RunUsageError as error:
        raise UsageError(str(error)) from None
    except sandbox.RunFailure as error:
        raise Failure(str(error)) from None


def _only_leaf(error: BaseException) -> BaseException:
    """The single exception inside (nested) one-member exception groups, else ``error``."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


async def _make_tree(source: Source) -> vfs.FileSystem:
    try:
        tree = source.make()
        if inspect.isawaitable(tree):
            tree = await tree
    except (SpecError, UsageError):
        raise
    except Exception as error:
        # A user's factory (or a vfs helper) failed: show where, then exit 1.
        traceback.print_exc(file=sys.stderr)
        raise Failure(f"building {source.label} failed: {type(error).__name__}: {error}") from None
    if not isinstance(tree, vfs.FileSystem):
        raise UsageError(f"{source.label} returned {type(tree).__name__}, not a vfs.FileSystem")
    await _probe(tree, source.label)
    return tree


async def _probe(tree: vfs.FileSystem, label: str) -> None:
    """Read the tree's root once before the mount is said to be live: a store that refuses
    every request (no credentials, a wrong endpoint) fails here, with why, instead of serving
    a mount where everything is denied."""
    try:
        async for _ in tree.list("/"):
            break
    except OSError as error:
        raise Failure(
            f"{label}: the tree's root cannot be listed: {error} (for a remote store: its "
            "credentials, endpoint and bucket)"
        ) from None


def _mount_in_background(
    args: argparse.Namespace, spec_arg: str | None, mountpoint: str, source: Source
) -> int:
    from ._daemon import launch

    child_args = ["--cache-timeout", repr(args.cache_timeout)]
    child_args += [
        flag
        for flag, on in (
            ("--allow-other", args.allow_other),
            ("--read-only", args.read_only),
            ("--debug", args.debug),
            ("--turns", args.turns),
            # (--fresh was done here, by _source: the daemon finds the session empty)
            ("--resume", args.resume),
            ("--ephemeral", args.ephemeral),
            ("--no-warm", args.no_warm),
        )
        if on
    ]
    if args.factory:
        child_args += ["--factory", args.factory]
    if args.audit:
        child_args += ["--audit", os.path.abspath(args.audit)]
    if args.session is not None:
        child_args += ["--session", os.path.abspath(args.session)]
    child_args += ["--", *([os.path.abspath(spec_arg)] if spec_arg is not None else []), mountpoint]
    launched = launch(child_args, mountpoint, args.ready_timeout)
    if not launched.ok:
        sys.stderr.write(
            launched.log if launched.log.endswith("\n") or not launched.log else launched.log + "\n"
        )
        raise Failure(f"{launched.problem}; nothing is mounted at {mountpoint}")
    print(
        f"mountd: {mountpoint} is live: {source.description} (pid {launched.pid}, log {launched.log}); "
        f"stop with `mountd unmount {mountpoint}`",
        flush=True,
    )
    return OK


# --- unmount -----------------------------------------------------------------------------------


def _unmount(args: argparse.Namespace) -> int:
    state = registry.read_state(registry.canonical(args.mountpoint))
    code = _detach_mount(args)
    if args.discard and state is not None and state.session:
        from ._sessions import SessionError, discard_path

        try:
            discard_path(state.session)
        except SessionError as error:
            raise Failure(str(error)) from None
        print(f"mountd: discarded the changes kept in {state.session}")
    return code


def _detach_mount(args: argparse.Namespace) -> int:
    path = registry.canonical(args.mountpoint)  # never stats the mountpoint: it may hang
    entry = registry.mount_at(path)
    state = registry.read_state(path)
    if entry is None:
        if state is not None and not registry.process_alive(state.pid, state.pid_start):
            registry.remove_state(path)
        raise Failure(f"nothing of ours is mounted at {path} (see `mountd status`)")
    health = registry.probe(path)
    if health in ("dead", "hung"):
        if (
            health == "hung"
            and state is not None
            and registry.process_alive(state.pid, state.pid_start)
        ):
            os.kill(state.pid, signal.SIGKILL)  # stopped or wedged: it cannot unmount itself
        try:
            registry.detach(path)
        except registry.DetachError as error:
            raise Failure(f"cannot clear the {health} mount at {path}: {error}") from None
        registry.remove_state(path)
        print(f"mountd: cleared the {health} mount at {path}")
        return OK
    if state is not None and registry.process_alive(state.pid, state.pid_start):
        os.kill(state.pid, signal.SIGTERM)
        gone = registry.wait_until(
            lambda: (
                registry.mount_at(path) is None
                and not registry.process_alive(state.pid, state.pid_start)
            ),
            args.timeout,
        )
        if gone:
            print(f"mountd: unmounted {path} (daemon pid {state.pid} exited)")
            return OK
        _say(
            f"daemon pid {state.pid} did not exit within {args.timeout:g} s; unmounting with fusermount3"
        )
    _force_unmount(path)
    registry.remove_state(path)
    print(f"mountd: unmounted {path}")
    return OK


def _force_unmount(path: str) -> None:
    try:
        registry.fusermount("-u", path)
    except registry.DetachError:
        try:
            registry.detach(path)  # busy: detach lazily
        except registry.DetachError as error:
            raise Failure(f"cannot unmount {path}: {error}") from None


# --- turn -------------------------------------------------------------------------------------


def _turn(args: argparse.Namespace) -> int:
    from . import _control as control

    path = registry.canonical(args.mountpoint)
    if args.action in ("begin", "end"):
        payload: dict[str, Any] = {"op": "turn", "action": args.action}
        if args.action == "begin":
            payload["cwd"] = os.path.abspath(args.cwd if args.cwd is not None else os.getcwd())
    elif args.cwd is not None:
        raise UsageError("--cwd goes with `turn begin` only")
    else:
        payload = {"op": args.action}
    try:
        reply = control.request(path, payload)
    except control.ControlError as error:
        raise Failure(str(error)) from None
    if args.json:
        print(json.dumps(reply, indent=2))
    elif reply.get("ok"):
        print(_turn_text(args.action, path, reply))
    if not reply.get("ok"):
        raise Failure(str(reply.get("error", "the daemon refused the request")))
    return OK


def _turn_text(action: str, path: str, reply: dict[str, Any]) -> str:
    if action == "begin":
        turn = reply["turn"]
        return f"mountd: turn {turn['number']} began on {path} (spills from {turn['cwd']})"
    if action == "end":
        text = f"mountd: turn {reply['turn']['number']} ended on {path}; /tmp is empty"
        if reply.get("checkpoint"):
            text += f"; checkpoint {reply['checkpoint']['number']}"
        return text
    if action == "changes":
        lines = [
            f"{c['path']}  {','.join(c['kinds'])}  via {','.join(c['via'])}"
            for c in reply["changes"]
        ]
        if reply.get("truncated"):
            lines.append("(more paths changed than are kept)")
        return "\n".join(lines) if lines else "mountd: nothing changed"
    if not reply.get("turns"):
        return f"{path}  no turns (mount with --turns for a per-turn /tmp)"
    turn = reply.get("turn")
    head = (
        f"{path}  turn {turn['number']} active (spills from {turn['cwd']})"
        if turn
        else f"{path}  no active turn ({reply.get('turns_begun', 0)} so far)"
    )
    tmp = reply.get("tmp", [])
    return head + "\n  /tmp: " + (" ".join(tmp) if tmp else "empty") + _checkpoints_text(reply)


def _checkpoints_text(reply: dict[str, Any]) -> str:
    kept = reply.get("checkpoints")
    if not kept or not kept["kept"]:
        return ""
    last = kept["last"]
    tail = "" if last is None else f", last {_checkpoint_line(last).strip()}"
    return f"\n  checkpoints: {kept['kept']} kept{tail}"


# --- checkpoints -----------------------------------------------------------------------------


def _checkpoint(args: argparse.Namespace) -> int:

    words = list(args.words)
    action = words.pop(0) if words[0] in CHECKPOINT_ACTIONS else "take"
    counts = {
        "take": (1, 1),
        "list": (1, 1),
        "diff": (2, 3),
        "rewind": (2, 2),
        "fork": (3, 3),
        "prune": (1, 1),
    }
    low, high = counts[action]
    if not low <= len(words) <= high:
        usage = {
            "take": "MOUNTPOINT [--label L]",
            "list": "MOUNTPOINT",
            "diff": "MOUNTPOINT A [B]",
            "rewind": "MOUNTPOINT N",
            "fork": "MOUNTPOINT N NEWMOUNTPOINT",
            "prune": "MOUNTPOINT [--keep K]",
        }[action]
        name = "" if action == "take" else action + " "
        raise UsageError(f"usage: mountd checkpoint {name}{usage}")
    if args.label is not None and action != "take":
        raise UsageError("--label goes with taking a checkpoint only")
    if args.keep is not None and action != "prune":
        raise UsageError("--keep goes with `checkpoint prune` only")
    path = registry.canonical(words[0])
    if action == "fork":
        return _fork(path, _checkpoint_number(words[1]), words[2], json_output=args.json)
    numbers = [_checkpoint_number(word) for word in words[1:]]
    payload: dict[str, Any] = {"op": "checkpoint", "action": action}
    if action == "take" and args.label is not None:
        payload["label"] = args.label
    elif action == "diff":
        payload["a"] = numbers[0]
        payload["b"] = numbers[1] if len(numbers) > 1 else None
    elif action == "rewind":
        payload["number"] = numbers[0]
    elif action == "prune" and args.keep is not None:
        payload["keep"] = args.keep
    reply = _granted(path, payload)
    if args.json:
        print(json.dumps(reply, indent=2))
    elif action == "diff":
        write_diff(reply["diff"])
    elif action == "list":
        rows = reply["checkpoints"]
        print("\n".join(_checkpoint_line(row) for row in rows) or "mountd: no checkpoints yet")
    elif action == "take":
        print(f"mountd: took checkpoint {_checkpoint_line(reply['checkpoint'])}")
    elif action == "rewind":
        number = reply["checkpoint"]["number"]
        before = reply.get("before")
        kept = (
            f"the state before it is checkpoint {before}"
            if before is not None
            else "the state before it was kept as a checkpoint already (see `mountd checkpoint "
            f"list {path}`)"
        )
        print(f"mountd: {path} is checkpoint {number} again; {kept}")
    else:
        pruned = reply["pruned"]
        print(
            f"mountd: pruned checkpoint{'s' if len(pruned) != 1 else ''} "
            + ", ".join(str(n) for n in pruned)
            if pruned
            else "mountd: nothing to prune"
        )
    return OK


def _fork(path: str, number: int, new_arg: str, *, json_output: bool) -> int:
    """``mountd checkpoint fork``: the daemon of ``path`` writes checkpoint ``number`` into a
    new session of its project, and a second daemon serves that session at ``new_arg``."""
    from ._sessions import SessionError, discard_path

    _refuse_untrusted_link(new_arg)
    new = registry.canonical(new_arg)
    if registry.mount_at(new) is not None:
        raise Failure(f"{new} is already a mount: a fork is mounted on an empty directory")
    if os.path.lexists(new) and (
        os.path.islink(new) or not os.path.isdir(new) or _holds_anything(new)
    ):
        raise Failure(f"{new} is not an empty directory: a fork is mounted on an empty one")
    payload = {"op": "checkpoint", "action": "fork", "number": number, "mountpoint": new}
    reply = _granted(path, payload)
    session = str(reply["session"])
    served = reply.get("mount", {})  # served as the origin is
    words = ["mount", "--daemon", "--resume", "--session", session]
    if "cache_timeout" in served:
        words += ["--cache-timeout", repr(float(served["cache_timeout"]))]
    words += ["--allow-other"] if served.get("allow_other") else []
    words += ["--no-warm"] if served.get("warm") is False else []
    args = _parser().parse_args([*words, new])
    try:
        _mount(args)
    except (Failure, UsageError):
        with contextlib.suppress(SessionError):
            discard_path(session)  # nothing serves it: a fork that never ran is no work lost
        raise
    if json_output:
        print(json.dumps(reply, indent=2))
    else:
        print(
            f"mountd: {new} is a fork of checkpoint {number} of {path}, kept in {session} "
            f"(`mountd unmount --discard {new}` drops it)"
        )
    return OK


def _granted(path: str, payload: dict[str, Any]) -> dict[str, Any]:
    """The daemon's answer to ``payload``, which must be a yes (else a Failure saying why)."""
    from . import _control as control

    try:
        reply = control.request(path, payload, timeout=COW_TIMEOUT)
    except control.ControlError as error:
        raise Failure(str(error)) from None
    if not reply.get("ok"):
        raise Failure(str(reply.get("error", "the daemon refused the request")))
    return reply


def _checkpoint_argument(word: str) -> int:
    try:
        return _checkpoint_number(word)
    except UsageError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _checkpoint_number(word: str) -> int:
    if not word.isdigit() or int(word) < 1:
        raise UsageError(f"a checkpoint number is 1 or more, not {word!r}")
    return int(word)


def _checkpoint_line(row: dict[str, Any]) -> str:
    summary = row["summary"]
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(row["time"]))
    turn = "-" if row["turn"] is None else str(row["turn"])
    counts = f"A{summary['added']} M{summary['modified']} D{summary['deleted']}"
    line = f"{row['number']:>4}  turn {turn:>3}  {when}  {counts} {summary['bytes']}B"
    return line + (f"  {row['label']}" if row["label"] else "")


# --- changes, diff, apply -----------------------------------------------------------------------

COW_TIMEOUT = 600.0  # a diff or an apply of a large tree takes a while


def _review(args: argparse.Namespace) -> int:
    from . import _control as control

    path = registry.canonical(args.mountpoint)
    payload: dict[str, Any] = {"op": "cow", "action": args.action}
    if args.paths:
        payload["paths"] = [_tree_path(arg, path) for arg in args.paths]
    if args.checkpoint is not None:
        payload["checkpoint"] = args.checkpoint
    try:
        if args.action == "apply" and args.paths:
            _refuse_paths_without_changes(path, {**payload, "action": "changes"})
        reply = control.request(path, payload, timeout=COW_TIMEOUT)
    except control.ControlError as error:
        raise Failure(str(error)) from None
    if getattr(args, "json", False):
        print(json.dumps(reply, indent=2))
    elif reply.get("ok"):
        _print_review(args.action, path, reply, every=bool(args.paths), of=args.checkpoint)
    if not reply.get("ok"):
        conflicts = reply.get("conflicts", [])
        if len(conflicts) > 1 and not getattr(args, "json", False):
            _say("conflicting: " + ", ".join(conflicts))
        raise Failure(str(reply.get("error", "the daemon refused the request")))
    return OK


def _refuse_paths_without_changes(mountpoint: str, changes: dict[str, Any]) -> None:
    """Before applying named paths: a path no change lies at or beneath is a mistake (a typo
    would apply nothing and say so quietly), and nothing is applied."""
    from . import _control as control

    reply = control.request(mountpoint, changes, timeout=COW_TIMEOUT)
    if not reply.get("ok"):  # (the listing failed: say why, not that nothing changed)
        raise Failure(str(reply.get("error", "the daemon refused the request")))
    listed = reply.get("changes", [])
    for wanted in changes["paths"]:
        if not any(
            other is not None and is_under(other, wanted)
            for change in listed
            for other in (change["path"], change["from"])
        ):
            raise Failure(
                f"no change at {quoted(wanted)} (see `mountd changes {mountpoint}`): nothing "
                "applied"
            )


def _tree_path(arg: str, mountpoint: str) -> str:
    """A PATH argument as the tree's path: through the mountpoint, else a path in the tree."""
    if not arg:
        raise UsageError("an empty PATH")
    absolute = os.path.abspath(arg)
    if is_under(absolute, mountpoint):
        return strip_prefix(absolute, mountpoint)
    try:
        return normalize_path(arg if arg.startswith("/") else "/" + arg)
    except OSError as error:
        raise UsageError(f"PATH {arg}: {error}") from None


def _print_review(
    action: str, path: str, reply: dict[str, Any], *, every: bool, of: int | None
) -> None:
    if action == "diff":
        write_diff(reply["diff"])
        sys.stdout.flush()
        _say_refused(reply.get("refused", []))
        return
    if action == "changes":
        gits = [add_prefix(GIT_DIR, cow["prefix"]) for cow in reply.get("cows", [])]
        lines = change_lines(reply["changes"], every=every, gits=gits)
        lines += ["  " + line for line in reply.get("git_state", [])]
        print("\n".join(lines) if lines else "mountd: nothing changed")
        return
    applied = reply["applied"]
    if applied:
        count = f"{len(applied)} change{'s' if len(applied) != 1 else ''}"
        if of is not None:
            count += f" of checkpoint {of}"
        print(f"mountd: applied {count} to the directory under {path}")
        print("\n".join("  " + line for line in change_lines(applied, every=True)))
    else:
        print("mountd: nothing to apply")
    if reply.get("set_id_cleared"):
        _say(f"applied without their set-id bits: {', '.join(reply['set_id_cleared'])}")
    _say_refused(reply["refused"])


def _say_refused(refused: list[dict[str, Any]]) -> None:
    """Name on stderr what apply refuses, one change a line with why."""
    if refused:
        _say("not applied (refused):")
        for line in change_lines(refused, every=True):
            print("  " + line, file=sys.stderr)
        sys.stderr.flush()


# --- status ------------------------------------------------------------------------------------


def _status(args: argparse.Namespace) -> int:
    rows = []
    mounted = set()
    for entry in registry.our_mounts():
        mounted.add(entry.mountpoint)
        state = registry.read_state(entry.mountpoint)
        health = registry.probe(entry.mountpoint)
        if (
            state is not None
            and not registry.process_alive(state.pid, state.pid_start)
            and health == "live"
        ):
            state = None  # something else serves it now; the record is from a daemon long gone
        rows.append(
            {
                "mountpoint": entry.mountpoint,
                "state": health,
                "spec": state.spec if state is not None else None,
                "description": state.description if state is not None else None,
                "pid": state.pid if state is not None else None,
                "started": state.started if state is not None else None,
                "counters": dict(state.counters) if state is not None else {},
                "fsname": entry.source,
                "checkpoints": _live_checkpoints(entry.mountpoint) if health == "live" else None,
            }
        )
    # Records of daemons that are gone and whose mount is gone too tell nothing; drop them.
    for state in registry.all_states():
        if state.mountpoint not in mounted and not registry.process_alive(
            state.pid, state.pid_start
        ):
            registry.remove_state(state.mountpoint, state.pid)
    if args.json:
        print(json.dumps(rows, indent=2))
        return OK
    from ._sessions import list_sessions

    sessions = list(list_sessions())
    if not rows:
        print("mountd: nothing mounted (start one with `mountd mount MOUNTPOINT`)")
    for row in rows:
        print(_status_text(row))
    for session in sessions:
        since = time.strftime("%Y-%m-%d %H:%M", time.localtime(session.created))
        how = "in use" if session.in_use else "left behind (--resume or --fresh)"
        fork = session.fork
        if fork is not None:
            how = f"a fork of checkpoint {fork.checkpoint} of {fork.of}, " + (
                "in use" if session.in_use else f"left behind (--session {session.path} --resume)"
            )
        print(
            f"session of {session.project} (mountd {session.kind}, {how}, since {since}): {session.path}"
        )
    return OK


def _live_checkpoints(mountpoint: str) -> dict[str, Any] | None:
    """What the daemon of a live mount says of its checkpoints (``None``: it keeps none, or
    says nothing)."""
    from . import _control as control

    try:
        reply = control.request(mountpoint, {"op": "status"}, timeout=2.0)
    except control.ControlError:
        return None
    found = reply.get("checkpoints")
    return found if isinstance(found, dict) else None


def _status_text(row: dict[str, Any]) -> str:
    state = row["state"]
    head = f"{row['mountpoint']}  {state}"
    if row["pid"] is not None:
        head += f"  pid {row['pid']}"
    if row["started"] is not None and state == "live":
        head += f"  up {_duration(time.time() - row['started'])}"
    lines = [head]
    if row["spec"] is None:
        lines.append("  spec: unknown (not started by the mountd command, or by another user)")
    else:
        lines.append(f"  spec: {row['spec']}")
        if row["description"]:
            lines.append(f"  tree: {row['description']}")
    counters = row["counters"]
    if counters:
        lines.append(
            "  ops:  " + " ".join(f"{name}={count}" for name, count in sorted(counters.items()))
        )
    if _checkpoints_text(row):
        lines.append(_checkpoints_text(row)[1:])
    if state in ("dead", "hung"):
        why = "is gone" if state == "dead" else "does not answer"
        lines.append(f"  its daemon {why}; clear it with `mountd unmount {row['mountpoint']}`")
    return "\n".join(lines)


def _duration(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def _holds_anything(directory: str) -> bool:
    with os.scandir(directory) as entries:  # (closed now, not when collected)
        return any(entries)


def _refuse_untrusted_link(mountpoint: str) -> None:
    link = registry.untrusted_link(mountpoint)
    if link is not None:
        raise Failure(
            f"{mountpoint}: {link} is a symlink another user made in a directory anyone can "
            "write; mount on the directory it leads to by its own path, if you mean it"
        )
