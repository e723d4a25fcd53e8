"""What the host's git configuration runs or reads from inside a work tree.

Theory of operation
-------------------
Git runs the hooks in ``core.hooksPath`` and reads as configuration the files that
``include.path`` and ``includeIf.<condition>.path`` name. A project may keep either in its work
tree: a ``.githooks`` directory (``git config core.hooksPath .githooks``, as husky and many
READMEs set up), or a shared ``.gitconfig`` its users include. A change there is code the host's
next ``git commit`` runs, so apply refuses it (:mod:`mountd._apply_rules`), as it refuses
``.git/hooks/`` and ``.git/config``.

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
# Canonical key names (git lowers the section and the variable, not an includeIf's condition).
_KEYS = r"^(core\.hookspath|include\.path|includeif\..*\.path)$"


async def git_runs(host: str) -> dict[str, str]:
    """The paths in the host directory ``host`` (as tree paths) that the host's git runs or
    reads as configuration, each with why a change there is refused: the hooks directory and
    every included configuration file inside ``host`` (see the module docstring). Empty when
    ``host`` is in no repository, or there is no git."""
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
        else:
            _note(found, host, os.path.join(os.path.dirname(source), value), INCLUDED, source)
    if hooks is not None:
        _note(found, host, hooks[0], HOOKS, hooks[1])
    return found


def _note(found: dict[str, str], host: str, path: str, reason: str, origin: str) -> None:
    real = os.path.normpath(path)
    if is_under(real, host):
        tree_path = ROOT + os.path.relpath(real, host) if real != host else ROOT
        found[os.path.normpath(tree_path)] = reason.format(origin=quoted(origin))


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
