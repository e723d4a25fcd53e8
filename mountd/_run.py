"""``mountd run``: one command in a bubblewrap sandbox whose root is a mounted tree.

Theory of operation
-------------------
1. *Before anything is mounted*: the tree is built (a spec, or :func:`mountd._spec.cow_layer` of
   the current directory: copy-on-write, in memory, with the repository policy when it holds a
   git repository), ``bwrap`` is found, and the tree's root is checked for names the sandbox
   covers (``/usr``, ``/etc``, ``/bin``, ...): a tree holding one is refused (exit 2), because
   the host's would hide it inside the sandbox (``--at DIR`` runs such a tree: see 3). When the
   root holds ``/.git`` and the tree has no policy of its own at the top, the repository policy
   wraps it (``vfs._policy``). Every change and every denial is recorded in an
   :class:`vfs._audit.AuditLog` (in memory, and appended to ``--audit FILE``). The trio signal
   receiver is opened before the mount exists.
2. The tree, fronted by :class:`mountd._sandbox.SandboxRoot` (which answers the mount points
   bubblewrap needs, so it never writes them into the tree), is mounted in this process
   (``mountd.mounted``; the event loop serves the mount and never touches it). Run by root,
   mountd first moves into a mount namespace of its own, so the mount is invisible to the host
   and dies with the process, and mounts with ``allow_other`` for the sandbox's unprivileged user,
   showing the tree's owner as that user (:mod:`mountd._identity`); otherwise the mount is made
   on a private directory under the state directory.
3. ``bwrap`` runs the command as described in :mod:`mountd._bwrap`: the mount at ``/``, the
   host's system directories read-only, the command as an unprivileged user in a user namespace
   of its own, no capabilities, seccomp and Landlock, an allow-listed environment
   (:mod:`mountd._environ`). SIGINT, SIGTERM and SIGHUP received meanwhile are passed on to
   bwrap. The command is started from the loop's thread (see :func:`_run_command`). With ``--at
   DIR`` the mount is bound at ``DIR`` (the command starts there) instead of ``/``, on
   bubblewrap's own tmpfs root, where the system entries are made as usual and which is then
   remounted read-only; there is no :class:`~mountd._sandbox.SandboxRoot`, the tree's root names
   are its own, and ``/tmp`` is always a tmpfs.
4. When the command has exited (its PID namespace, and so every process it started, is gone),
   the tree is unmounted and then read through its API: the change summary of every
   copy-on-write layer goes to stderr (git's own files that apply takes counted on one line,
   every change apply refuses listed with why), ``--diff`` prints the diff of what apply would
   write outside ``/.git`` to stdout, and ``--apply`` writes the changes back if the command
   succeeded. What apply may write is :mod:`mountd._apply_rules`'s one decision (inside ``.git``
   only git's own files; never set-id bits, never through a host symlink or mount point, nothing
   the run's policy did not let the command write); a conflict (the host changed meanwhile)
   writes nothing and exits 1. With ``--rewind-on-failure`` a checkpoint is taken before the
   command starts and, when it fails, the tree is rewound to it before the report: what a
   failed command did is gone, what the tree held before (a resumed session's) stays.

The exit status is the command's (1 for a failed apply, 2 for a usage error, 127 when the command
could not start).
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import os
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import trio

import vfs
from vfs import (
    AuditLog,
    CowConflictError,
    CowFileSystem,
    Policy,
    PolicyFileSystem,
    TreeChange,
    audited_fs,
    is_under,
    policy_fs,
    repository_policy,
)
from vfs.lowlevel import ROOT, add_prefix, quoted

from . import MountOptions, mounted
from . import _registry as registry
from ._attrs import OwnerMap
from ._bwrap import (
    BINDS_NAME,
    DEFAULT_MAX_PROCESSES,
    Sandbox,
    bind_trees,
    bwrap_path,
    landlock_abi,
    sandbox_binds,
    start,
)
from ._collector import tune_for_serving
from ._environ import EnvError, caller_home, pending_git_config, sandbox_environment
from ._git_review import git_state_lines
from ._identity import SandboxUser, owners_shown_as_another, sandbox_user
from ._landlock import SCOPE_ABI
from ._review import (
    GIT_DIR,
    CowAt,
    Scratch,
    apply_unprotected,
    change_lines,
    describe_change,
    find_cows,
    outside_git,
)
from ._sandbox import conflicts, host_layout, sandbox_dir, sandbox_root
from ._serve import fuse_hint
from ._sessions import Session, SessionError, open_session, sessions_dir
from ._terminal import kept_terminal, write_diff
from ._warm import NO_WARM_HELP

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_CLONE_NEWNS = 0x00020000
_MS_REC = 0x4000
_MS_SLAVE = 1 << 19
_PR_SET_CHILD_SUBREAPER = 36


class RunUsageError(Exception):
    """The run cannot start as asked (exit 2)."""


class RunFailure(Exception):
    """The run failed outside the command (exit 1)."""


@dataclass(frozen=True)
class RunRequest:
    """What ``mountd run`` was asked to do."""

    tree: vfs.FileSystem
    description: str
    command: tuple[str, ...]
    apply: bool = False
    diff: bool = False
    net: bool = False
    audit: str | None = None
    cwd: str = ROOT  # the command's directory inside the sandbox
    at: str = ROOT  # where the tree is served inside the sandbox (``--at``)
    root: bool = False  # uid 0 inside (``--root``)
    allow: tuple[str, ...] = ()  # host paths bound read-write (``--allow``)
    read_only: tuple[str, ...] = ()  # host paths bound read-only (``--ro``)
    env: tuple[str, ...] = ()  # ``--env NAME[=VALUE]``
    rewind_on_failure: bool = False  # ``--rewind-on-failure``
    warm: bool = False  # the tree listed through the mount before the command starts
    # The project's own tmp/ (a host directory): the sandbox's /tmp shows it, read-only, under
    # a scratch layer nobody reviews, rather than taking the command's scratch into the review.
    scratch_below: str | None = None
    max_processes: int = DEFAULT_MAX_PROCESSES  # ``--max-processes`` (0: the caller's limit)


# --- running -----------------------------------------------------------------------------------


def run(request: RunRequest) -> int:
    """Run ``request`` (blocking: its own trio loop); return the exit status."""
    bwrap = bwrap_path()
    if bwrap is None:
        raise RunFailure("bwrap (bubblewrap) is not installed: apt-get install bubblewrap")
    user = sandbox_user(root_inside=request.root)
    git_config = pending_git_config(os.environ)  # git answers while the rest is set up
    if user.switch:
        _private_mounts()  # before the loop starts any thread
    libc = ctypes.CDLL(None, use_errno=True)
    # Whatever bubblewrap leaves behind when it dies (its own child, killed with it) becomes
    # ours to reap, not init's: when run returns, no process of the sandbox is left.
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    try:
        return trio.run(_run, request, bwrap, user, git_config)
    finally:
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


def _private_mounts() -> None:
    """Move this process into a mount namespace of its own whose mounts the host never sees:
    the sandbox's mount lives and dies with it (no host process can walk into it, and a killed
    mountd leaves no stale mount behind)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if (
        libc.unshare(_CLONE_NEWNS) != 0
        or libc.mount(b"none", b"/", None, _MS_REC | _MS_SLAVE, None) != 0
    ):
        code = ctypes.get_errno()
        raise RunFailure(f"cannot make a private mount namespace: {os.strerror(code)}")


async def _run(
    request: RunRequest, bwrap: str, user: SandboxUser, git_config: Callable[[bool], str]
) -> int:
    tree = request.tree
    view = vfs.posix_view(tree)
    policy: Policy | None = tree.policy if isinstance(tree, PolicyFileSystem) else None
    if policy is None and (await view.lstat(GIT_DIR)).kind == "directory":
        policy = repository_policy()
        tree = policy_fs(tree, policy)
    if request.at != ROOT:
        entries = host_layout(tmp=True)
    else:
        entries = host_layout(tmp=(await view.lstat("/tmp")).kind != "directory")
        if request.scratch_below is not None and not any(e.name == "tmp" for e in entries):
            below = vfs.dir_fs(request.scratch_below, read_only=True)
            tree = vfs.union_fs({ROOT: tree, "/tmp": Scratch(vfs.cow_fs(below))})
        covered = await conflicts(request.tree, [e.name for e in entries if e.name != "tmp"])
        if covered:
            names = ", ".join(covered)
            raise RunUsageError(
                f"the tree holds {names} at its root, which the sandbox needs for the host's "
                f"{names}; run it at a directory of its own instead: `mountd run --at /work "
                "...` (or serve it below / with a spec's union mount)"
            )
    try:
        binds = sandbox_binds(
            request.allow,
            request.read_only,
            home=caller_home(os.environ),
            layout_root=request.at == ROOT,
            private=[str(sessions_dir().parent), str(registry.state_dir())],
        )
        env = sandbox_environment(
            os.environ,
            user=user.name,
            extra=request.env,
            path_roots=[bind.inside for bind in binds if bind.inside == bind.host],
        )
    except (ValueError, EnvError) as error:
        raise RunUsageError(str(error)) from None
    cows = find_cows(request.tree)
    try:
        log = AuditLog(request.audit)
    except OSError as error:
        raise RunFailure(f"cannot open the audit log {request.audit}: {error.strerror}") from None
    served: vfs.FileSystem = audited_fs(tree, log)
    if binds:
        served = vfs.union_fs({ROOT: served, **bind_trees(binds)})
    root = served
    if request.at == ROOT:
        root = sandbox_root(served, entries, unlisted=[BINDS_NAME])
    elif binds:  # (in --at mode bubblewrap makes the system entries on a root of its own)
        root = sandbox_root(served, (), unlisted=[BINDS_NAME])
    owners = await _owners(view, user)
    options = MountOptions(
        fsname="agentroot-run", allow_other=user.switch, owners=owners, warm=request.warm
    )
    mountpoint = _mountpoint(user)
    try:  # (whatever fails from here, the mountpoint goes)
        sandbox = Sandbox(
            mountpoint,
            entries,
            request.command,
            user,
            net=request.net,
            cwd=request.cwd,
            at=request.at,
            binds=binds,
            landlock_abi=landlock_abi(),
            cache=registry.state_dir(create=True),
            max_processes=request.max_processes,
        )
        files = sandbox.files(
            passwd=_host_file("/etc/passwd"),
            group=_host_file("/etc/group"),
            git_config=git_config(owners_shown_as_another(owners, user)),
        )
        before: vfs.Checkpoint | None = None
        if request.rewind_on_failure:
            if not isinstance(request.tree, vfs.Checkpoints):
                raise RunUsageError("--rewind-on-failure needs a tree that keeps checkpoints")
            before = await request.tree.checkpoint("before the command")
        with trio.open_signal_receiver(*SIGNALS) as signals:
            try:
                async with mounted(root, mountpoint, options):
                    tune_for_serving()  # this process exists to serve the sandbox's root
                    with kept_terminal():
                        status = await _run_command(
                            lambda: start(bwrap, sandbox, files, env), signals
                        )
            except (OSError, RuntimeError) as error:
                raise RunFailure(
                    f"serving the sandbox root at {mountpoint} failed: {error}{fuse_hint()}"
                ) from None
    finally:
        log.close()
        try:
            os.rmdir(mountpoint)
        except OSError as error:
            _say(f"could not remove the mountpoint {mountpoint}: {error.strerror}")
    if before is not None and status != 0:
        assert isinstance(request.tree, vfs.Checkpoints)
        await request.tree.rewind(before.number)
        _say(f"the command failed (exit {status}): the tree is as it was before it")
    status = await _report(request, status, cows, log, policy)
    _say_outside_review(sandbox)
    return status


async def _owners(view: vfs.PosixFileSystem, user: SandboxUser) -> OwnerMap | None:
    """When mountd switches the command to another user, the tree's owner (its root's) is
    shown as that user (see :mod:`mountd._identity`)."""
    if not user.switch:
        return None
    info = await view.lstat(ROOT)
    uid = os.getuid() if info.uid is None else info.uid
    gid = os.getgid() if info.gid is None else info.gid
    if (uid, gid) == (user.host_uid, user.host_gid):
        return None
    return OwnerMap(uid, gid, user.host_uid, user.host_gid)


def _mountpoint(user: SandboxUser) -> str:
    """A new, empty directory to mount the tree on. In a private mount namespace (root) it only
    needs to be reachable by the sandbox's user, so it is made in the system's temporary
    directory; otherwise in the user's private state directory."""
    if user.switch:
        return tempfile.mkdtemp(prefix="agentroot-run-")
    registry.state_dir(create=True)
    return tempfile.mkdtemp(prefix="run-", dir=registry.state_dir())


def _host_file(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as handle:
            return handle.read()
    except OSError:
        return ""


async def _run_command(
    launch: Callable[[], subprocess.Popen[bytes]], signals: AsyncIterator[int]
) -> int:
    # Started from this (the loop's) thread, never a worker thread: ``--die-with-parent`` is
    # PR_SET_PDEATHSIG, which fires when the *thread* that forked bwrap exits, and trio's idle
    # worker threads exit after 10 s (trio.lowlevel.open_process forks in one): the command
    # was SIGKILLed 10 s into any run. Fork and exec block the loop only until bwrap has exec'd,
    # which never touches the mount.
    try:
        process = launch()
    except OSError as error:
        _say(f"cannot start bwrap: {error}")
        return 127
    async with trio.open_nursery() as nursery:

        async def forward() -> None:
            async for signum in signals:
                process.send_signal(signum)  # (nothing once it has been reaped)

        nursery.start_soon(forward)
        try:
            status = await _wait(process)
        finally:
            nursery.cancel_scope.cancel()
    await _reap_orphans()
    return status if status >= 0 else 128 - status


async def _reap_orphans(patience: float = 5.0) -> None:
    """Reap the sandbox's processes that outlived bubblewrap (a subreaper inherits them: they
    die with it, killed by ``--die-with-parent``), waiting ``patience`` seconds at most."""
    deadline = trio.current_time() + patience
    pause = 0.001  # they are usually gone within a millisecond or two: look again soon
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)  # noqa: ASYNC222 (WNOHANG: never blocks)
        except ChildProcessError:
            return  # no child left
        if pid == 0:
            if trio.current_time() > deadline:
                _say("a process of the sandbox did not exit")
                return
            await trio.sleep(pause)
            pause = min(pause * 2, 0.01)


async def _wait(process: subprocess.Popen[bytes]) -> int:
    """Wait for ``process`` without a thread: its pidfd becomes readable when it exits. If the
    wait is cancelled, the command is killed and reaped (it must not outlive the mount)."""
    pidfd = os.pidfd_open(process.pid)
    try:
        await trio.lowlevel.wait_readable(pidfd)
    except BaseException:
        process.kill()
        process.wait()
        raise
    finally:
        os.close(pidfd)
    return process.wait()


def _say_outside_review(sandbox: Sandbox) -> None:
    for bind in sandbox.binds:
        access = "read-write" if bind.writable else "read-only"
        _say(f"outside the review: {bind.host} ({access}, at {bind.inside})")
    abi = sandbox.landlock_abi
    if not abi:
        _say("Landlock is not available here: writes are confined by the mount layout alone")
    if sandbox.net and abi < SCOPE_ABI:
        # With --net the abstract socket namespace is the host's, and only a Landlock scope
        # keeps the command off it (signals outside stay out of reach: the PID namespace).
        _say(
            "with --net the command could reach the host's abstract unix sockets: this "
            f"kernel's Landlock (ABI {abi}) has no scopes (ABI {SCOPE_ABI}, Linux 6.12)"
        )


# --- after the command -------------------------------------------------------------------------


async def _report(
    request: RunRequest, status: int, cows: list[CowAt], log: AuditLog, policy: Policy | None
) -> int:
    from ._review import judged

    denied = log.denied()
    if not cows:
        _say(
            f"the command exited with status {status}; the tree has no copy-on-write layer, "
            "so its changes went straight to the tree"
        )
    for found in cows:
        changes, refused = await judged(found, policy)
        git_state = await git_state_lines(found.shown, (c for c in changes if c not in refused))
        _say(await _summary(found, changes, status, refused, git_state))
        if request.diff:
            outside = outside_git(changes, refused)
            if outside:
                write_diff(await found.cow.diff(outside))
    if denied:
        _say(f"{len(denied)} access{'es' if len(denied) != 1 else ''} denied by policy:")
        for entry in denied:
            print(f"  {entry.op} {entry.path}", file=sys.stderr)
    if request.audit:
        _say(f"audit log: {request.audit} ({log.count} entries)")
    if not request.apply:
        return status
    if status != 0:
        _say(f"not applying the changes: the command exited with status {status}")
        return status
    for found in cows:
        try:
            done = await apply_unprotected(found, policy)
        except CowConflictError as error:
            _say(
                f"nothing applied: {error} ({len(error.paths)} conflicting path(s): "
                f"{', '.join(error.paths[:5])})"
            )
            return 1
        except OSError as error:
            _say(f"applying the changes failed: {error}")
            return 1
        where = _lower_name(found.cow)
        count = len(done.applied)
        _say(f"applied {count} change{'s' if count != 1 else ''} to {where}")
        if done.set_id_cleared:
            cleared = [found.served(path) for path in done.set_id_cleared]
            _say(f"applied without their set-id bits: {', '.join(cleared)}")
        if done.refused:
            kept = [quoted(found.served(r.change.path)) for r in done.refused]
            if len(kept) > _NAMED_AT_MOST:
                kept = [*kept[:_NAMED_AT_MOST], f"and {len(kept) - _NAMED_AT_MOST} more"]
            _say(f"not applied (refused, see above): {', '.join(kept)}")
    return status


_NAMED_AT_MOST = 10  # refused paths named in the line after an apply


async def _summary(
    found: CowAt,
    changes: list[TreeChange],
    status: int,
    refused: dict[TreeChange, str],
    git_state: list[str],
) -> str:
    """The change summary of one layer: one line a change outside ``/.git`` and one a change
    apply refuses (with why), then git's own files that apply takes, counted, with what they
    do to refs and the index (``git_state``, :func:`mountd._git_review.git_state_lines`)."""
    where = "" if found.prefix == ROOT else f" at {found.prefix}"
    count = f"{len(changes)} change{'s' if len(changes) != 1 else ''}"
    lines = [f"the command exited with status {status}; {count} in the copy-on-write tree{where}"]
    listed = [await describe_change(found, change, refused.get(change)) for change in changes]
    gits = [add_prefix(GIT_DIR, found.prefix)]
    lines += [f"  {line}" for line in change_lines(listed, every=False, gits=gits)]
    lines += [f"    {line}" for line in git_state]
    return "\n".join(lines)


def _lower_name(cow: CowFileSystem) -> str:
    return repr(cow.lower)


def _say(message: str) -> None:
    print(f"mountd run: {message}", file=sys.stderr, flush=True)


def default_tree(cwd: str, upper: Path | None = None) -> tuple[vfs.FileSystem, str]:
    """The tree ``mountd run`` serves without a spec (its changes in ``upper``, a session's, or
    in memory), and its description."""
    from ._spec import build, cow_layer, describe

    layer = cow_layer(cwd, upper=upper)
    return build(layer), describe(layer)


# --- the command line ----------------------------------------------------------------------------

RUN_DESCRIPTION = """\
Run COMMAND in a bubblewrap sandbox whose / is a mounted vfs tree, then show what it changed.

  mountd run -- make test                 the current directory under copy-on-write: the
                                          command changes a copy; the directory is untouched
  mountd run --diff -- ./agent.sh         ... and print the diff of what changed
  mountd run --apply -- ./fix-lint.sh    ... and write the changes back if it exits 0
  mountd run spec.toml -- sh              the tree a spec describes (see docs/spec.md)
  mountd run --at /work -- make test      the tree at /work instead of / (for a project with
                                          its own bin/, lib/, etc/, ...)
  mountd run --net --allow ~/.codex -- codex    an agent CLI with its own config and the network

Inside: the tree at /, the command starting in /; the host's /usr, /bin, /lib*, /sbin and a
minimal /etc read-only; fresh /proc and /dev (/proc/sys and the kernel's other knobs read-only);
/tmp an empty tmpfs (HOME and TMPDIR: scratch, never reviewed; a project's own tmp/ shows
there read-only beneath the scratch; a spec's tree with /tmp gives its own); no network unless
--net. A tree holding /usr, /etc, /bin, /lib*, /sbin, /proc or /dev at its root is refused
unless --at DIR serves it at DIR (the command starting there) on a read-only / of its own, /tmp
then always an empty tmpfs.

The command is never host root: it runs in a user namespace of its own as the calling user (the
user behind sudo, or uid 65533 when root runs it; --root shows it as uid 0 of its namespace), with
no capabilities, a seccomp filter (no mount, ptrace, bpf, perf, keyrings, kexec, modules, new
namespaces, ...) and, where the kernel has Landlock, no write outside the tree, /tmp, /dev and the
--allow paths. Its environment is an allow-list: PATH (the caller's entries under /usr, /bin,
/sbin), LANG, LANGUAGE, LC_*, TERM, COLORTERM, NO_COLOR, TZ, git's GIT_AUTHOR_*/GIT_COMMITTER_*
identity, HOME=TMPDIR=/tmp, USER and LOGNAME; --env adds more. Git reads a generated config with
only the caller's user.name and user.email (and safe.directory = *), never the caller's own (and
core.checkStat = minimal when the project's owner is shown as the sandbox's user: root's run).
--allow and --ro bind host paths (under your home: seen under HOME=/tmp; elsewhere only with
--at) for what an agent CLI keeps outside the project; they are outside the review, and the
summary lists them.

While the command runs, its changes are kept on disk in a session of this directory (see
`mountd mount --help`); the session is discarded once the run has reported (and applied) them.
A run that was killed leaves its session: the next run of the directory says --resume (continue
with those changes: `mountd run --resume --apply -- true` applies them) or --fresh (discard them);
--ephemeral keeps the changes in memory only.

A git repository gets the repository policy: git works in full, but .git/hooks and .git/config
are read-only (EACCES). --apply writes back only the reviewed change: inside .git only git's own
files (objects, refs, logs, the index, HEAD...), never set-id bits, never through a symlink or a
mount point of the host tree; what it refuses is shown with its reason. Afterwards the change summary
goes to stderr, the diff (--diff) to stdout. The exit status is the command's (1 if --apply
failed, 2 for a usage error).
"""


def add_run_parser(commands: Any, epilog: str, handler: Callable[..., int]) -> None:
    """Add ``mountd run`` to the command line's subparsers."""
    parser = commands.add_parser(
        "run",
        help="run a command in a sandbox over a copy-on-write tree; show or apply its changes",
        description=RUN_DESCRIPTION,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="mountd run [options] [SPEC] -- COMMAND...",
    )
    _run_options(parser)
    parser.add_argument("words", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    parser.set_defaults(run=handler, run_parser=parser)


def _run_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--apply",
        action="store_true",
        help="write the changes back to the host tree if the command exits 0 (inside .git only "
        "git's own files; never set-id bits, never through a host symlink or mount point)",
    )
    parser.add_argument("--diff", action="store_true", help="print the diff of the changes")
    parser.add_argument(
        "--rewind-on-failure",
        action="store_true",
        help="when the command fails, leave the tree as it was before it (its changes are "
        "neither reported nor applied)",
    )
    parser.add_argument("--net", action="store_true", help="let the command use the network")
    parser.add_argument("--audit", metavar="FILE", help="append the audit log (JSON lines) to FILE")
    parser.add_argument(
        "--at",
        metavar="DIR",
        help="serve the tree at DIR inside the sandbox (the command starts there) instead of "
        "at /: for trees with their own bin/, lib/, etc/, usr/ ...",
    )
    parser.add_argument(
        "--root", action="store_true", help="uid 0 inside (of the sandbox's own namespace)"
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue with the changes of an earlier run of this directory that was killed",
    )
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="discard the changes of an earlier run of this directory that was killed",
    )
    parser.add_argument(
        "--ephemeral",
        action="store_true",
        help="keep the changes in memory only while the command runs (not on disk)",
    )
    parser.add_argument("--no-warm", action="store_true", help="without a SPEC: " + NO_WARM_HELP)
    parser.add_argument(
        "--allow",
        metavar="PATH",
        action="append",
        default=None,
        help="bind a host PATH read-write, outside the review (an agent CLI's config, a cache)",
    )
    parser.add_argument(
        "--ro",
        metavar="PATH",
        action="append",
        default=None,
        help="bind a host PATH read-only",
    )
    parser.add_argument(
        "--max-processes",
        metavar="N",
        type=_processes,
        default=DEFAULT_MAX_PROCESSES,
        help=f"processes and threads the command may run at once (default "
        f"{DEFAULT_MAX_PROCESSES}; 0: your own limit)",
    )
    parser.add_argument(
        "--env",
        metavar="NAME[=VALUE]",
        action="append",
        default=None,
        help="pass the caller's NAME (or set NAME=VALUE) inside",
    )


def _processes(text: str) -> int:
    try:
        count = int(text)
    except ValueError:
        count = -1
    if count < 0:
        raise argparse.ArgumentTypeError(f"not a number of processes: {text!r}")
    return count


class _Words(argparse.ArgumentParser):
    """The words before ``--`` (``[SPEC]`` and options, in any order); errors are usage errors."""

    def error(self, message: str) -> NoReturn:
        raise RunUsageError(message)


def command(args: argparse.Namespace) -> int:
    """``mountd run``: split ``[SPEC] [options] -- COMMAND...``, build the tree, run."""
    words = list(args.words)
    if "--" not in words:
        raise RunUsageError("give the command after --, e.g. `mountd run -- make test`")
    split = words.index("--")
    before, argv = words[:split], words[split + 1 :]
    if not argv:
        raise RunUsageError("no command after --")
    extra = _Words(add_help=False, prog="mountd run")
    _run_options(extra)
    extra.add_argument("spec", nargs="*")
    more, unknown = extra.parse_known_intermixed_args(before)  # options given after SPEC
    if unknown:
        raise RunUsageError(f"unknown option {unknown[0]}")
    for name in (
        "apply",
        "diff",
        "net",
        "root",
        "resume",
        "fresh",
        "ephemeral",
        "rewind_on_failure",
        "no_warm",
    ):
        if getattr(more, name):
            setattr(args, name, True)
    for name in ("audit", "at"):
        if getattr(more, name) is not None:
            setattr(args, name, getattr(more, name))
    for name in ("allow", "ro", "env"):
        setattr(args, name, [*(getattr(args, name) or ()), *(getattr(more, name) or ())])
    spec = more.spec
    session: Session | None = None
    scratch_below: str | None = None
    try:
        at = ROOT if args.at is None else sandbox_dir(args.at)
    except ValueError as error:
        raise RunUsageError(str(error)) from None
    if len(spec) > 1:
        raise RunUsageError(f"too many arguments before --: {' '.join(spec)} (expected [SPEC])")
    if spec:
        from ._spec import build, describe, load_spec

        layer = load_spec(spec[0])
        tree, description = build(layer), describe(layer)
    else:
        project = os.path.realpath(os.getcwd())
        if project == ROOT:
            raise RunUsageError(
                "the current directory is /: mountd run serves the current directory to the "
                "command, and / is the whole host; run it in the project's directory"
            )
        for path in (*args.allow, *args.ro):
            host = os.path.realpath(path)
            if is_under(host, project) or is_under(project, host):
                raise RunUsageError(
                    f"{path}: the project, or a directory holding it; the command changes the "
                    "project only through the review"
                )
        if args.resume + args.fresh + args.ephemeral > 1:
            raise RunUsageError("give at most one of --resume, --fresh and --ephemeral")
        session = None if args.ephemeral else _run_session(project, args)
        upper = None if session is None else session.upper
        tree, description = default_tree(project, upper)
        scratch_below = _own_tmp(project)
    audit = None if args.audit is None else os.path.abspath(args.audit)
    logging.basicConfig(level=logging.WARNING, format="mountd run: %(message)s")
    request = RunRequest(
        tree,
        description,
        tuple(argv),
        apply=args.apply,
        diff=args.diff,
        net=args.net,
        audit=audit,
        cwd=at,
        at=at,
        root=args.root,
        allow=tuple(args.allow),
        read_only=tuple(args.ro),
        env=tuple(args.env),
        rewind_on_failure=args.rewind_on_failure,
        warm=not spec and not args.no_warm,
        scratch_below=None if spec else scratch_below,
        max_processes=args.max_processes,
    )
    try:
        status = run(request)
    except RunFailure:
        if session is not None and not session.holds_changes():
            session.discard()  # the sandbox never came up: nothing to resume
        raise
    if session is not None:
        session.discard()  # reported (and applied, if asked): a killed run is what stays
    return status


def _own_tmp(project: str) -> str | None:
    """The project's own ``tmp/`` directory, if it has one (a symlink there is not followed)."""
    tmp = os.path.join(project, "tmp")
    try:
        return tmp if stat.S_ISDIR(os.lstat(tmp).st_mode) else None
    except OSError:
        return None


def _run_session(project: str, args: argparse.Namespace) -> Session:
    """The session whose upper keeps the run's changes while it runs (mountd._sessions)."""
    try:
        return open_session(project, "run", resume=args.resume, fresh=args.fresh)
    except SessionError as error:
        raise RunUsageError(str(error)) from None
