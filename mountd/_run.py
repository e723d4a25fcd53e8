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
   bubblewrap needs, so it never writes them into the tree), is mounted in this process on a
   private directory under the state directory (``mountd.mounted``; the event loop serves the
   mount and never touches it).
3. ``bwrap`` runs the command with the mount at ``/`` (see :func:`bwrap_argv`): host ``/usr``,
   ``/bin``, ``/lib*``, ``/sbin`` read-only as the host lays them out, a minimal read-only
   ``/etc`` (:data:`ETC_ENTRIES` that exist on the host, on a tmpfs), fresh ``/proc`` and ``/dev``,
   ``/tmp`` from the tree or a tmpfs, new IPC/PID/UTS (and, without ``--net``, network)
   namespaces, no capabilities, ``--die-with-parent``. ``HOME`` is ``/tmp``; the caller's global
   git config (identity) is bound read-only and named by ``GIT_CONFIG_GLOBAL``. SIGINT, SIGTERM
   and SIGHUP received meanwhile are passed on to bwrap. The command is started from the
   loop's thread (see :func:`_run_command`). With ``--at DIR`` the mount is bound at ``DIR``
   (the command starts there) instead of ``/``, on bubblewrap's own tmpfs root, where the
   system entries are made as usual and which is then remounted read-only; there is no
   :class:`~mountd._sandbox.SandboxRoot`, the tree's root names are its own, and ``/tmp`` is
   always a tmpfs.
4. When the command has exited (its PID namespace, and so every process it started, is gone),
   the tree is unmounted and then read through its API: the change summary of every
   copy-on-write layer goes to stderr (git's own files under ``/.git`` counted on one line),
   ``--diff`` prints the diff of everything outside ``/.git`` to stdout, and ``--apply`` writes
   the changes back if the command succeeded. Apply never writes what the repository policy
   protects (``.git/hooks``, ``.git/config``), nor anything the run's policy did not let the
   command write; a conflict (the host changed meanwhile) writes nothing and exits 1.

The exit status is the command's (1 for a failed apply, 2 for a usage error, 127 when the command
could not start).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import trio

import vfs
from vfs._audit import AuditLog, audited_fs
from vfs._cow import CowFileSystem
from vfs._cow_meta import CowConflictError, TreeChange
from vfs._paths import ROOT, add_prefix, is_under
from vfs._policy import Policy, PolicyFileSystem, policy_fs, repository_policy

from . import MountOptions, mounted
from . import _registry as registry
from ._collector import tune_for_serving
from ._review import (
    CHANGE_LETTERS,
    GIT_DIR,
    CowAt,
    apply_unprotected,
    find_cows,
    in_git,
    outside_git,
)
from ._sandbox import SystemEntry, conflicts, host_layout, sandbox_dir, sandbox_root

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

# What a minimal /etc holds (those the host has): users, name resolution, TLS roots, the dynamic
# linker's cache, Debian's alternatives (/usr/bin/awk and friends point there), time zone,
# system-wide git/shell/python settings. Not: shadow, ssh keys, sudoers, credentials.
ETC_ENTRIES = (
    "alternatives",
    "bash.bashrc",
    "ca-certificates",
    "ca-certificates.conf",
    "crypto-policies",
    "debian_version",
    "environment",
    "gai.conf",
    "gitconfig",
    "group",
    "host.conf",
    "hostname",
    "hosts",
    "inputrc",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "locale.alias",
    "locale.conf",
    "localtime",
    "login.defs",
    "magic",
    "magic.mime",
    "mime.types",
    "networks",
    "nsswitch.conf",
    "os-release",
    "passwd",
    "perl",
    "pki",
    "profile",
    "protocols",
    "python3",
    "resolv.conf",
    "services",
    "shells",
    "ssl",
    "terminfo",
    "timezone",
)
GIT_GLOBAL_IN_SANDBOX = "/etc/agentroot/gitconfig"


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


def bwrap_path() -> str:
    found = shutil.which("bwrap")
    if found is None:
        raise RunFailure("bwrap (bubblewrap) is not installed: apt-get install bubblewrap")
    return found


def bwrap_argv(
    bwrap: str,
    mountpoint: str,
    entries: Sequence[SystemEntry],
    command: Sequence[str],
    *,
    net: bool,
    cwd: str,
    git_global: str | None,
    at: str = ROOT,
) -> list[str]:
    """The bubblewrap command line (see the module docstring): the mount at ``at``; below
    ``/``, bubblewrap's own root gets the symlinks the sandbox root would have answered."""
    argv = [bwrap, "--bind", mountpoint, at]
    for entry in entries:
        where = "/" + entry.name
        if entry.fill == "none":
            if at != ROOT and entry.target is not None:
                argv += ["--symlink", entry.target, where]
        elif entry.fill == "ro-bind":
            argv += ["--ro-bind", where, where]
        elif entry.fill == "proc":
            argv += ["--proc", where]
        elif entry.fill == "dev":
            argv += ["--dev", where]
        elif entry.fill == "tmpfs":
            argv += ["--tmpfs", where]
        elif entry.fill == "etc":
            argv += ["--tmpfs", where]
            argv += _etc_binds()
            if git_global is not None:
                argv += ["--ro-bind", git_global, GIT_GLOBAL_IN_SANDBOX]
            argv += ["--remount-ro", where]
    if at != ROOT:
        argv += ["--remount-ro", ROOT]  # writes go to the tree or /tmp, never lost on a tmpfs
    argv += ["--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try"]
    if not net:
        argv.append("--unshare-net")
    argv += ["--die-with-parent", "--cap-drop", "ALL", "--chdir", cwd]
    return [*argv, "--", *command]


def _etc_binds() -> list[str]:
    """Binds of the host's minimal ``/etc`` entries: a link within the sandbox's reach stays a
    link, anything else is bound (following links, so ``resolv.conf -> /run/...`` works)."""
    argv = []
    for name in ETC_ENTRIES:
        host = os.path.join("/etc", name)
        if not os.path.lexists(host):
            continue
        if os.path.islink(host):
            target = os.readlink(host)
            real = os.path.realpath(host)
            if os.path.exists(real) and (is_under(real, "/usr") or is_under(real, "/etc")):
                argv += ["--symlink", target, host]
                continue
        if os.path.exists(host):
            argv += ["--ro-bind", host, host]
    return argv


def git_global_config() -> str | None:
    """The caller's global git config file, as git finds it (``GIT_CONFIG_GLOBAL``, then
    ``~/.gitconfig``, then ``$XDG_CONFIG_HOME/git/config``)."""
    named = os.environ.get("GIT_CONFIG_GLOBAL")
    if named:
        return named if os.path.isfile(named) else None
    home = os.path.expanduser("~")
    xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    for candidate in (os.path.join(home, ".gitconfig"), os.path.join(xdg, "git", "config")):
        if os.path.isfile(candidate):
            return candidate
    return None


def sandbox_env(*, git_global: bool) -> dict[str, str]:
    env = dict(os.environ)
    env["HOME"] = "/tmp"
    env["TMPDIR"] = "/tmp"
    for name in ("PWD", "OLDPWD", "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        env.pop(name, None)
    if git_global:
        env["GIT_CONFIG_GLOBAL"] = GIT_GLOBAL_IN_SANDBOX
    else:
        env.pop("GIT_CONFIG_GLOBAL", None)
    return env


# --- running -----------------------------------------------------------------------------------


def run(request: RunRequest) -> int:
    """Run ``request`` (blocking: its own trio loop); return the exit status."""
    bwrap = bwrap_path()
    return trio.run(_run, request, bwrap)


async def _run(request: RunRequest, bwrap: str) -> int:
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
        covered = await conflicts(request.tree, [e.name for e in entries if e.name != "tmp"])
        if covered:
            names = ", ".join(covered)
            raise RunUsageError(
                f"the tree holds {names} at its root, which the sandbox needs for the host's "
                f"{names}; run it at a directory of its own instead: `mountd run --at /work "
                "...` (or serve it below / with a spec's union mount)"
            )
    cows = find_cows(request.tree)
    try:
        log = AuditLog(request.audit)
    except OSError as error:
        raise RunFailure(f"cannot open the audit log {request.audit}: {error.strerror}") from None
    audited = audited_fs(tree, log)
    root = sandbox_root(audited, entries) if request.at == ROOT else audited
    git_global = git_global_config()
    registry.state_dir(create=True)
    mountpoint = tempfile.mkdtemp(prefix="run-", dir=registry.state_dir())
    argv = bwrap_argv(
        bwrap,
        mountpoint,
        entries,
        request.command,
        net=request.net,
        cwd=request.cwd,
        git_global=git_global,
        at=request.at,
    )
    env = sandbox_env(git_global=git_global is not None)
    try:
        with trio.open_signal_receiver(*SIGNALS) as signals:
            try:
                async with mounted(root, mountpoint, MountOptions(fsname="agentroot-run")):
                    tune_for_serving()  # this process exists to serve the sandbox's root
                    status = await _run_command(argv, env, signals)
            except (OSError, RuntimeError) as error:
                raise RunFailure(
                    f"serving the sandbox root at {mountpoint} failed: {error}"
                ) from None
    finally:
        log.close()
        try:
            os.rmdir(mountpoint)
        except OSError as error:
            _say(f"could not remove the mountpoint {mountpoint}: {error.strerror}")
    return await _report(request, status, cows, log, policy)


async def _run_command(argv: list[str], env: dict[str, str], signals: AsyncIterator[int]) -> int:
    # Started from this (the loop's) thread, never a worker thread: ``--die-with-parent`` is
    # PR_SET_PDEATHSIG, which fires when the *thread* that forked bwrap exits, and trio's idle
    # worker threads exit after 10 s (trio.lowlevel.open_process forks in one): the command
    # was SIGKILLed 10 s into any run. Fork and exec block the loop only until bwrap has exec'd,
    # which never touches the mount.
    try:
        process = subprocess.Popen(argv, env=env)  # noqa: ASYNC220 (see above)
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
    return status if status >= 0 else 128 - status


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
        _say(_summary(found.prefix, changes, status, refused))
        if request.diff:
            outside = outside_git(changes, refused)
            if outside:
                text = await found.cow.diff(outside)
                sys.stdout.write(text if not text or text.endswith("\n") else text + "\n")
                sys.stdout.flush()
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
            kept = [found.served(r.change.path) for r in done.refused]
            _say(f"not applied (refused, see above): {', '.join(kept)}")
    return status


def _summary(
    prefix: str,
    changes: list[TreeChange],
    status: int,
    refused: dict[TreeChange, str] | None = None,
) -> str:
    """The change summary of the layer at ``prefix``: one line a change outside ``/.git`` and
    one a change apply refuses (with why), then git's own files that apply takes, counted."""
    refused = refused or {}
    shown = [c for c in changes if not in_git(c) or c in refused]
    git = len(changes) - len(shown)
    where = "" if prefix == ROOT else f" at {prefix}"
    count = f"{len(changes)} change{'s' if len(changes) != 1 else ''}"
    lines = [f"the command exited with status {status}; {count} in the copy-on-write tree{where}"]
    for change in shown:
        path = add_prefix(change.path, prefix)
        mark = "/" if change.entry == "directory" else ""
        line = f"  {CHANGE_LETTERS[change.kind]} {path}{mark}"
        if change.old_path is not None:
            old = add_prefix(change.old_path, prefix)
            line += f" (from {old}{mark})"
        if change in refused:
            line += f" (refused: {refused[change]})"
        lines.append(line)
    if git:
        lines.append(
            f"  {add_prefix(GIT_DIR, prefix)}: "
            f"{git} change{'s' if git != 1 else ''} (git's own files)"
        )
    return "\n".join(lines)


def _lower_name(cow: CowFileSystem) -> str:
    return repr(cow.lower)


def _say(message: str) -> None:
    print(f"mountd run: {message}", file=sys.stderr, flush=True)


def default_tree(cwd: str) -> tuple[vfs.FileSystem, str]:
    """The tree ``mountd run`` serves without a spec, and its description."""
    from ._spec import build, cow_layer, describe

    layer = cow_layer(cwd)
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

Inside: the tree at /, the command starting in /; the host's /usr, /bin, /lib*, /sbin and a
minimal /etc read-only; fresh /proc and /dev; /tmp from the tree, else an empty tmpfs; HOME=/tmp;
no network unless --net. A tree holding /usr, /etc, /bin, /lib*, /sbin, /proc or /dev at its
root is refused unless --at DIR serves it at DIR (the command starting there) on a read-only /
of its own, /tmp then always an empty tmpfs. A git repository gets the repository policy: git
works in full, but .git/hooks and .git/config are read-only (EACCES), and --apply never writes
them back. Afterwards the change summary goes to stderr, the diff (--diff) to stdout. The exit
status is the command's (1 if --apply failed, 2 for a usage error).
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
        help="write the changes back to the host tree if the command exits 0 (never "
        ".git/hooks or .git/config)",
    )
    parser.add_argument("--diff", action="store_true", help="print the diff of the changes")
    parser.add_argument("--net", action="store_true", help="let the command use the network")
    parser.add_argument("--audit", metavar="FILE", help="append the audit log (JSON lines) to FILE")
    parser.add_argument(
        "--at",
        metavar="DIR",
        help="serve the tree at DIR inside the sandbox (the command starts there) instead of "
        "at /: for trees with their own bin/, lib/, etc/, usr/ ...",
    )


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
    for name in ("apply", "diff", "net"):
        if getattr(more, name):
            setattr(args, name, True)
    for name in ("audit", "at"):
        if getattr(more, name) is not None:
            setattr(args, name, getattr(more, name))
    spec = more.spec
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
        tree, description = default_tree(os.getcwd())
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
    )
    return run(request)
