"""The bubblewrap invocation of ``mountd run``: the sandbox's layout, identity and filters.

Theory of operation
-------------------
:class:`Sandbox` is everything the sandbox is, decided before anything starts;
:func:`bwrap_args` turns it into bubblewrap's arguments (a pure function: tests read it without
starting anything) and :func:`start` starts bubblewrap with them. The layers, outermost first:

1. **Identity**: a new user namespace, entered as the unprivileged host user of
   :mod:`mountd._identity` (mountd switches to it before bubblewrap starts when it runs as
   root), with every capability dropped and no further user namespaces (``--disable-userns``).
2. **Namespaces**: new PID, IPC, UTS, cgroup and (without ``--net``) network namespaces; the
   command dies with mountd.
3. **Layout**: the tree at ``/`` (or ``--at DIR``), the host's ``/usr`` and the system entries
   read-only, fresh ``/proc`` and ``/dev``, a minimal read-only ``/etc`` (:data:`ETC_ENTRIES`
   that exist on the host, plus generated ``passwd``, ``group`` and git config), ``/tmp``;
   ``/proc/sys``, ``/proc/sysrq-trigger`` and the other kernel knobs (:data:`PROC_READ_ONLY`)
   bound read-only over the fresh ``/proc``; ``--allow``/``--ro`` paths (:class:`Bind`).
4. **seccomp**: :mod:`mountd._seccomp`'s filter, loaded by bubblewrap last.
5. **Landlock**: where the kernel has it, the command is started through
   :mod:`mountd._landlock` (with the host's ``python3``), which allows changes only beneath the
   write roots (:meth:`Sandbox.write_roots`).
6. **Limits**, set in bubblewrap's process before it starts (:func:`_limited_child`), so that
   everything it starts inherits them: at most :attr:`Sandbox.max_processes` processes and
   threads (a fork bomb fails with ``EAGAIN`` inside instead of taking every pid of the host),
   and the first place the kernel's OOM killer looks (``oom_score_adj`` 1000: the host's
   processes, the daemon serving the tree among them, are spared while the command holds
   memory to give back).

Nothing of the host's paths reaches the command's view of bubblewrap: its options come through a
file descriptor (``--args``), so ``/proc/1/cmdline`` inside reads ``bwrap --args N -- COMMAND``,
and the generated files come through descriptors too (``--ro-bind-data``); the environment is
:mod:`mountd._environ`'s allow-list.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import vfs
from vfs import is_under
from vfs.lowlevel import ROOT

from . import _landlock
from ._environ import GIT_CONFIG_IN_SANDBOX
from ._identity import SandboxUser
from ._sandbox import SystemEntry
from ._seccomp import filter_program

# What a minimal /etc holds (those the host has): name resolution, TLS roots, the dynamic
# linker's cache, Debian's alternatives (/usr/bin/awk and friends point there), time zone,
# shell/python settings. Not: shadow, ssh keys, sudoers, credentials, the system git config.
ETC_ENTRIES = (
    "alternatives",
    "bash.bashrc",
    "ca-certificates",
    "ca-certificates.conf",
    "crypto-policies",
    "debian_version",
    "environment",
    "gai.conf",
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
# Kernel knobs and views under /proc that stay read-only inside (Docker's read-only paths).
PROC_READ_ONLY = ("bus", "fs", "irq", "sys", "sysrq-trigger")
LANDLOCK_IN_SANDBOX = "/etc/agentroot/landlock.py"
# The host interpreter that runs the Landlock script inside (the sandbox shows the host's /usr).
HOST_PYTHON = "/usr/bin/python3"


# Processes and threads the command may run at once (``mountd run --max-processes``): room for
# a parallel build, a JVM or two and a test runner's workers; far below a host's pid space.
DEFAULT_MAX_PROCESSES = 4096
# The sandbox's processes are the first the OOM killer picks (the most a process can ask).
OOM_SCORE_ADJ = 1000


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


BINDS_NAME = ".mountd-run-binds"  # the unlisted root directory the bound directories come from


@dataclass(frozen=True)
class Bind:
    """A host directory shown inside (``--allow``: writable, ``--ro``: read-only), outside the
    review. It is served by the mount too (a ``dir_fs`` at ``/.mountd-run-binds/N`` of the
    tree, unlisted) and bound from there: the command's unprivileged user could not reach the
    caller's directories (``/root`` is 0700) nor own their files, which the mount shows as the
    project's are shown."""

    host: str
    inside: str
    writable: bool
    hidden: tuple[str, ...] = ()  # paths beneath it shown as empty and read-only


def bind_trees(binds: Sequence[Bind]) -> dict[str, vfs.FileSystem]:
    """The trees serving ``binds``, by their path in the served tree."""
    return {f"/{BINDS_NAME}/{i}": _bind_tree(bind) for i, bind in enumerate(binds)}


def _bind_tree(bind: Bind) -> vfs.FileSystem:
    # What the command writes there lands on the host as the daemon's user (root, for a root
    # mountd): a set-id bit would hand that user's rights to whoever can reach the directory.
    tree = vfs.dir_fs(bind.host, read_only=not bind.writable, set_id=False)
    if not bind.hidden:
        return tree
    return vfs.union_fs({ROOT: tree, **{path: vfs.empty_fs() for path in bind.hidden}})


@dataclass(frozen=True)
class Sandbox:
    """Everything the sandbox is (see the module docstring).

    ``mountpoint`` is the tree's mount on the host, served at ``at`` inside; ``cwd`` is where
    the command starts; ``landlock_abi`` is the kernel's (0: none, the layer is left out)."""

    mountpoint: str
    entries: tuple[SystemEntry, ...]
    command: tuple[str, ...]
    user: SandboxUser
    net: bool = False
    cwd: str = ROOT
    at: str = ROOT
    binds: tuple[Bind, ...] = ()
    landlock_abi: int = 0
    cache: Path | None = None  # where the compiled seccomp program is kept (the state directory)
    max_processes: int = DEFAULT_MAX_PROCESSES  # processes and threads at once (0: the caller's)

    def write_roots(self) -> tuple[str, ...]:
        """Where Landlock lets the command change anything."""
        writable = tuple(bind.inside for bind in self.binds if bind.writable)
        return (self.at, "/tmp", "/dev", *writable)

    def files(self, *, passwd: str, group: str, git_config: str) -> dict[str, bytes]:
        """The generated files, by their path inside."""
        files = {
            "/etc/passwd": self.user.passwd(passwd).encode(),
            "/etc/group": self.user.group(group).encode(),
            GIT_CONFIG_IN_SANDBOX: git_config.encode(),
        }
        if self.landlock_abi:
            files[LANDLOCK_IN_SANDBOX] = Path(_landlock.__file__).read_bytes()
        return files


def bwrap_args(
    sandbox: Sandbox, files: Mapping[str, int], seccomp: int
) -> tuple[list[str], list[str]]:
    """bubblewrap's options for ``sandbox`` and the command it runs (bubblewrap takes options
    from ``--args FD`` but the command only on its command line); ``files`` are the descriptors
    of :meth:`Sandbox.files` by path inside, ``seccomp`` the filter's."""
    at = sandbox.at
    args = ["--bind", sandbox.mountpoint, at]
    for entry in sandbox.entries:
        where = "/" + entry.name
        if entry.fill == "none":
            if at != ROOT and entry.target is not None:
                args += ["--symlink", entry.target, where]
        elif entry.fill == "ro-bind":
            args += ["--ro-bind", where, where]
        elif entry.fill == "proc":
            args += ["--proc", where]
            for name in PROC_READ_ONLY:
                args += ["--ro-bind-try", f"{where}/{name}", f"{where}/{name}"]
        elif entry.fill == "dev":
            args += ["--dev", where]
        elif entry.fill == "tmpfs":
            args += ["--tmpfs", where]
        elif entry.fill == "etc":
            args += ["--tmpfs", where, *_etc_binds()]
            for path, fd in sorted(files.items()):
                args += ["--ro-bind-data", str(fd), path]
            args += ["--remount-ro", where]
    if at != ROOT:
        args += ["--remount-ro", ROOT]  # writes go to the tree or /tmp, never lost on a tmpfs
    for i, bind in enumerate(sandbox.binds):
        source = f"{sandbox.mountpoint}/{BINDS_NAME}/{i}"
        args += ["--bind" if bind.writable else "--ro-bind", source, bind.inside]
    user = sandbox.user
    args += ["--unshare-user", "--uid", str(user.uid), "--gid", str(user.gid), "--disable-userns"]
    args += ["--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try"]
    if not sandbox.net:
        args.append("--unshare-net")
    args += ["--die-with-parent", "--cap-drop", "ALL", "--chdir", sandbox.cwd]
    args += ["--seccomp", str(seccomp)]
    command: list[str] = []
    if sandbox.landlock_abi:
        command += [HOST_PYTHON, "-I", "-S", LANDLOCK_IN_SANDBOX]
        command += ["--abi", str(sandbox.landlock_abi)]
        for root in sandbox.write_roots():
            command += ["--write", root]
        command.append("--")
    return args, [*command, *sandbox.command]


def _etc_binds() -> list[str]:
    """Binds of the host's minimal ``/etc`` entries: a link within the sandbox's reach stays a
    link, anything else is bound (following links, so ``resolv.conf -> /run/...`` works)."""
    args = []
    for name in ETC_ENTRIES:
        host = os.path.join("/etc", name)
        if not os.path.lexists(host):
            continue
        if os.path.islink(host):
            target = os.readlink(host)
            real = os.path.realpath(host)
            if os.path.exists(real) and (is_under(real, "/usr") or is_under(real, "/etc")):
                args += ["--symlink", target, host]
                continue
        if os.path.exists(host):
            args += ["--ro-bind", host, host]
    return args


def landlock_abi() -> int:
    """The Landlock ABI the sandbox uses: the kernel's, when the host has the interpreter that
    applies it inside; else 0."""
    if not os.access(HOST_PYTHON, os.X_OK):
        return 0
    return _landlock.abi_version()


def start(
    bwrap: str,
    sandbox: Sandbox,
    files: Mapping[str, bytes],
    env: Mapping[str, str],
) -> subprocess.Popen[bytes]:
    """Start bubblewrap for ``sandbox`` (as its user), its arguments and files through
    descriptors that only it inherits."""
    fds: list[int] = []
    try:
        by_path = {}
        for path, data in files.items():
            by_path[path] = _memfd(path, data, fds)
        seccomp = _memfd("seccomp", filter_program(sandbox.cache), fds)
        options, command = bwrap_args(sandbox, by_path, seccomp)
        encoded = b"".join(os.fsencode(arg) + b"\0" for arg in options)
        args_fd = _memfd("args", encoded, fds)
        return subprocess.Popen(
            [bwrap, "--args", str(args_fd), "--", *command],
            env=dict(env),
            pass_fds=fds,
            preexec_fn=_limited_child(sandbox.user, sandbox.max_processes),
        )
    finally:
        for fd in fds:
            os.close(fd)


def _limited_child(user: SandboxUser, max_processes: int) -> Callable[[], None]:
    """What bubblewrap's process does before it runs: take the sandbox's limits, then become
    its user (when mountd is root). In that order: once the process changes user, the kernel
    makes its ``/proc/self`` root's, and it could no longer set its own ``oom_score_adj``.
    Only system calls on values prepared here (this runs between fork and exec)."""
    score = str(OOM_SCORE_ADJ).encode()
    switch, uid, gid = user.switch, user.host_uid, user.host_gid

    def child() -> None:
        try:  # (where a container refuses it, the process limit still holds)
            fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
            try:
                os.write(fd, score)
            finally:
                os.close(fd)
        except OSError:
            pass
        if max_processes:
            soft, _hard = resource.getrlimit(resource.RLIMIT_NPROC)
            limit = max_processes if soft == resource.RLIM_INFINITY else min(soft, max_processes)
            resource.setrlimit(resource.RLIMIT_NPROC, (limit, limit))
        if switch:
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)

    return child


def _memfd(name: str, data: bytes, fds: list[int]) -> int:
    """An in-memory file holding ``data``, read from its start; recorded in ``fds``."""
    fd = os.memfd_create(name.strip("/").replace("/", "-") or "data", 0)
    fds.append(fd)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def sandbox_binds(
    allow: Sequence[str],
    read_only: Sequence[str],
    *,
    home: str,
    layout_root: bool,
    private: Sequence[str] = (),
) -> tuple[Bind, ...]:
    """``--allow``/``--ro`` paths as binds: one beneath the caller's ``home`` appears beneath
    the sandbox's ``HOME`` (``/tmp``); another at its own path, which only a layout with its own
    root (``--at``) has room for. A ``private`` directory (agentroot's own sessions and control
    sockets: the command would write the upper it is judged by, read other projects' changes,
    or reach the daemons) is never bound: one beneath a bind is shown empty and read-only, and
    a bind inside one is refused. ``ValueError`` says why a path cannot be bound."""
    binds = []
    for paths, writable in ((allow, True), (read_only, False)):
        flag = "--allow" if writable else "--ro"
        for text in paths:
            host = os.path.realpath(text)
            if not os.path.exists(host):
                raise ValueError(f"{flag} {text}: does not exist (make it first)")
            if not os.path.isdir(host):
                raise ValueError(f"{flag} {text}: not a directory (bind the directory holding it)")
            hidden = []
            for own in private:
                real = os.path.realpath(own)
                if is_under(host, real):
                    raise ValueError(
                        f"{flag} {text}: inside agentroot's own state ({real}): the command "
                        "could change its sessions and reach its mounts"
                    )
                if is_under(real, host):
                    hidden.append(ROOT + os.path.relpath(real, host))
            if host == home:
                raise ValueError(
                    f"{flag} {text}: your whole home directory; name what the command needs "
                    "(e.g. ~/.codex)"
                )
            if is_under(host, home):
                inside = "/tmp/" + os.path.relpath(host, home)
            elif layout_root:
                raise ValueError(
                    f"{flag} {text}: outside your home directory, a path has no place in the "
                    "tree at /; run with --at DIR to bind it at its own path"
                )
            else:
                inside = host
            binds.append(Bind(host, inside, writable, tuple(hidden)))
    return tuple(binds)
