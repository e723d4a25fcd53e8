"""What the host's git configuration runs or reads from inside a work tree.

Theory of operation
-------------------
Git runs the hooks in ``core.hooksPath``, reads as configuration the files that
``include.path`` and ``includeIf.<condition>.path`` name, and runs the commands its
configuration names for filters, diff and merge drivers, ``core.fsmonitor`` and the like
(:data:`COMMANDS`). A project may keep any of them in its work tree: a ``.githooks`` directory
(``git config core.hooksPath .githooks``, as husky and many READMEs set up), a shared
``.gitconfig`` its users include, a ``./scripts/textconv.sh``. A change there is code the host's
next git command runs, so apply refuses it (:mod:`mountd._apply_rules`), as it refuses
``.git/hooks/`` and ``.git/config``. A command is judged by its program, the first word: when
that is a path (``./x``, ``tools/x``, or absolute) into the tree. What a program then reads of
the tree is the review's to show, as a ``Makefile`` is; but ``python -m module``, the filter
nbstripout installs, imports ``module`` from the work tree's top first, so that module is
judged too.

The host's own git answers, in the host repository, with the caller's configuration (their
global and system files): what the user's next git command will read. Git only reads its
configuration to answer (``git config``), and that configuration is the host's, which apply
never changes. Relative paths resolve as git resolves them: ``core.hooksPath`` from the work
tree's top, an include from the directory of the file that names it, ``~/`` from the caller's
home. Only the repository holding the tree's root is asked (a repository nested inside the tree
has its own ``.git``, whose ``config`` apply refuses to change).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess

import anyio

from vfs import is_under
from vfs.lowlevel import ROOT, quoted

from ._environ import caller_home

HOOKS = "git runs the hooks here (core.hooksPath in {origin}): the host's next commit would run it"
INCLUDED = (
    "git reads this file as its configuration (included by {origin}): it could name commands "
    "git runs"
)
COMMAND = (
    "git runs this as {key} (in {origin}): the host's next git command that uses it would run it"
)
# Configuration whose value is a command git runs, by canonical name (git lowers the section
# and the variable, not a subsection such as a driver's name or an includeIf's condition).
COMMANDS = (
    r"filter\..*\.(clean|smudge|process)",
    r"diff\..*\.(textconv|command)",
    r"merge\..*\.driver",
    r"diff\.external",
    r"core\.(fsmonitor|sshcommand|editor|pager|askpass)",
    r"sequence\.editor",
    r"gpg(\..*)?\.program",
    r"credential\.helper",
)
_KEYS = (
    "^("
    + "|".join((r"core\.hookspath", r"include\.path", r"includeif\..*\.path", *COMMANDS))
    + ")$"
)
_COMMAND_KEY = re.compile("^(" + "|".join(COMMANDS) + ")$")


async def git_runs(host: str) -> dict[str, str]:
    """The paths in the host directory ``host`` (as tree paths) that the host's git runs or
    reads as configuration, each with why a change there is refused: the hooks directory,
    every included configuration file and every program of a configured command inside
    ``host`` (see the module docstring). Empty when ``host`` is in no repository, or there is
    no git."""
    top = await _git(["rev-parse", "--show-toplevel"], host)
    if top is None or not top.strip():
        return {}
    top = top.strip()
    listed = await _git(["config", "--show-origin", "--null", "--get-regexp", _KEYS], top)
    if listed is None:
        return {}
    home = caller_home(os.environ)
    found: dict[str, str] = {}
    hooks: tuple[str, str] | None = None
    fields = listed.split("\0")
    for origin, entry in zip(fields[0::2], fields[1::2], strict=False):
        key, _, value = entry.partition("\n")
        if not origin.startswith("file:") or not value:
            continue
        source = os.path.join(top, origin.removeprefix("file:"))
        if value.startswith("~/"):
            value = os.path.join(home, value[2:])
        if key == "core.hookspath":
            hooks = (os.path.join(top, value), source)  # the last one set wins
        elif _COMMAND_KEY.match(key):
            reason = COMMAND.replace("{key}", key)  # (a driver's name may hold braces)
            for program in _programs(value):
                _note(found, host, os.path.join(top, program), reason, source)
        else:
            _note(found, host, os.path.join(os.path.dirname(source), value), INCLUDED, source)
    if hooks is not None:
        _note(found, host, hooks[0], HOOKS, hooks[1])
    return found


def _programs(command: str) -> list[str]:
    """The files a configured command runs, as paths from the work tree's top, where git
    runs it: its program when a path names it (git runs a command through the shell, ``!``
    first for some keys; a bare name is found on ``PATH``), and the module ``python -m``
    imports, which Python looks for in that directory first (nbstripout installs its
    filter as ``python3 -m nbstripout``)."""
    try:
        words = shlex.split(command.removeprefix("!"))
    except ValueError:
        return []
    if not words:
        return []
    if "/" in words[0]:
        return [words[0]]
    if os.path.basename(words[0]).startswith("python") and "-m" in words[:-1]:
        module = words[words.index("-m") + 1].split(".")[0]
        return [module + ".py", module]
    return []


def _note(found: dict[str, str], host: str, path: str, reason: str, origin: str) -> None:
    real = os.path.normpath(path)
    if is_under(real, host):
        tree_path = ROOT + os.path.relpath(real, host) if real != host else ROOT
        found[os.path.normpath(tree_path)] = reason.replace("{origin}", quoted(origin))


async def _git(args: list[str], cwd: str) -> str | None:
    """``git ARGS`` run in ``cwd`` as the caller runs it (their configuration; no variable
    that points git elsewhere), its output; ``None`` when it fails or there is no git."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("GIT_") or name.startswith("GIT_CONFIG")
    }
    env["HOME"] = caller_home(os.environ)
    try:
        done = await anyio.run_process(
            ["git", "-c", "safe.directory=*", *args],
            cwd=cwd,
            env=env,
            check=False,
            stderr=subprocess.DEVNULL,
        )
    except OSError:
        return None
    if done.returncode != 0:
        return None
    return done.stdout.decode("utf-8", "surrogateescape")
