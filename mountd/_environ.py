"""What a command in ``mountd run`` inherits from its caller: an allow-list, never the whole.

Theory of operation
-------------------
The caller's environment holds secrets (cloud keys, tokens) and host paths (its home, its tools);
without ``--net`` an agent could still copy them into the tree, and so into the diff. So the
sandbox's environment is built, not inherited (:func:`sandbox_environment`):

- :data:`PASSED` (locale, terminal, time zone, git's identity variables) and every ``LC_*``
  variable, when the caller has them;
- ``PATH``: the caller's entries that the sandbox shows as they are on the host (beneath ``/usr``,
  ``/bin``, ``/sbin``), else :data:`DEFAULT_PATH`; never ``.`` or a relative entry;
- ``HOME`` and ``TMPDIR`` are ``/tmp``; ``USER``/``LOGNAME`` the sandbox user's name; git reads
  only the generated global config (``GIT_CONFIG_GLOBAL``, ``GIT_CONFIG_NOSYSTEM``);
- ``--env NAME`` passes the caller's ``NAME``, ``--env NAME=VALUE`` sets it (after the rest, so it
  can override them).

The caller's git configuration is likewise never shown: :func:`git_config` writes a new one with
the identity only (``user.name``, ``user.email``, as the caller's git resolves them), and
``safe.directory = *`` (the tree is the sandbox's own; its owner is the agent's user). When the
command sees the tree's owner as another user than the host's files record
(``mountd._identity.owners_shown_as_another``: root's run, whose owner map shows a root-owned
project as the sandbox's user), it also sets ``core.checkStat = minimal``: git's index recorded
the host's owner, and with its default comparison git takes every file for changed, hashes it
and rewrites the index; "minimal" compares what says the file changed (whole-second mtime, size,
mode), not who owns it.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence

PASSED = (
    "LANG",
    "LANGUAGE",
    "TERM",
    "COLORTERM",
    "NO_COLOR",
    "TZ",
    "GIT_AUTHOR_NAME",
    "GIT_AUTHOR_EMAIL",
    "GIT_COMMITTER_NAME",
    "GIT_COMMITTER_EMAIL",
)
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SANDBOX_HOME = "/tmp"
GIT_CONFIG_IN_SANDBOX = "/etc/agentroot/gitconfig"
_SYSTEM_PATHS = ("/usr", "/bin", "/sbin")


class EnvError(ValueError):
    """An ``--env`` argument that cannot be honoured."""


def sandbox_environment(
    caller: Mapping[str, str],
    *,
    user: str,
    extra: Sequence[str] = (),
    path_roots: Iterable[str] = (),
) -> dict[str, str]:
    """The command's environment (see the module docstring). ``path_roots``: other directories
    the sandbox shows at the same path (their ``PATH`` entries are kept too)."""
    env = {name: caller[name] for name in PASSED if name in caller}
    env.update((name, value) for name, value in caller.items() if name.startswith("LC_"))
    env["PATH"] = _path(caller.get("PATH", ""), (*_SYSTEM_PATHS, *path_roots))
    env["HOME"] = SANDBOX_HOME
    env["TMPDIR"] = SANDBOX_HOME
    env["USER"] = env["LOGNAME"] = user
    env["GIT_CONFIG_GLOBAL"] = GIT_CONFIG_IN_SANDBOX
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    for item in extra:
        name, sep, value = item.partition("=")
        if not name or not (name[0].isalpha() or name[0] == "_") or not _is_name(name):
            raise EnvError(f"--env {item}: not a variable name")
        if sep:
            env[name] = value
        elif name in caller:
            env[name] = caller[name]
        else:
            raise EnvError(f"--env {name}: not set here (give --env {name}=VALUE)")
    return env


def _is_name(name: str) -> bool:
    return all(c.isalnum() or c == "_" for c in name) and name.isascii()


def _path(caller_path: str, roots: Sequence[str]) -> str:
    kept = []
    for entry in caller_path.split(":"):
        entry = entry.rstrip("/") or "/"
        if not entry.startswith("/") or entry in kept:
            continue
        if any(entry == root or entry.startswith(root + "/") for root in roots):
            kept.append(entry)
    return ":".join(kept) if kept else DEFAULT_PATH


def git_config(caller: Mapping[str, str], *, owners_shown_as_another: bool = False) -> str:
    """The sandbox's global git config: the caller's identity, ``safe.directory``, and
    ``core.checkStat`` when ``owners_shown_as_another`` (see the module docstring)."""
    return pending_git_config(caller)(owners_shown_as_another)


def pending_git_config(caller: Mapping[str, str]) -> Callable[[bool], str]:
    """:func:`git_config`, its ``git config`` started now and waited for when the result is
    called for, with ``owners_shown_as_another`` (``mountd run`` sets up the rest meanwhile)."""
    identity = _caller_identity(caller)
    return lambda owners_shown_as_another: _config_of(identity(), owners_shown_as_another)


def _config_of(identity: dict[str, str], owners_shown_as_another: bool) -> str:
    lines = []
    if identity:
        lines.append("[user]\n")
        lines += [
            f"\t{key} = {_quoted(identity[key])}\n" for key in ("name", "email") if key in identity
        ]
    lines.append("[safe]\n\tdirectory = *\n")
    if owners_shown_as_another:
        lines.append("[core]\n\tcheckStat = minimal\n")
    return "".join(lines)


def _caller_identity(caller: Mapping[str, str]) -> Callable[[], dict[str, str]]:
    """``user.name`` and ``user.email`` as the caller's git sees them outside any repository:
    ``git config`` started now, its answer when called."""
    env = {k: v for k, v in caller.items() if k not in ("GIT_DIR", "GIT_WORK_TREE")}
    try:
        git = subprocess.Popen(
            ["git", "config", "--get-regexp", r"^user\.(name|email)$"],
            cwd="/",
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
    except OSError:
        return dict

    def answer() -> dict[str, str]:
        try:
            out, _ = git.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            git.kill()
            git.wait()
            return {}
        return _identity_in(out)

    return answer


def _identity_in(out: str) -> dict[str, str]:
    found = {}
    for line in out.splitlines():
        key, _, value = line.partition(" ")
        if value:
            found[key.removeprefix("user.")] = value  # the last one wins, as for git
    return found


def _quoted(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def caller_home(caller: Mapping[str, str]) -> str:
    """The caller's home directory (where ``--allow ~/...`` paths come from)."""
    return os.path.realpath(caller.get("HOME") or os.path.expanduser("~"))
