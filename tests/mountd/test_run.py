"""``mountd run`` and the pieces of a sandbox root: the repository policy through a real mount
(git commits, a hook write gets EACCES and lands in the audit log), the root bubblewrap needs
(system entries answered but never listed, never written), the cow layer in specs, and whole runs
over a real git repository (the host untouched, the summary exact, ``--apply`` faithful)."""

from __future__ import annotations

import errno
import functools
import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

import vfs
from mountd._apply_rules import POLICY_DENIES, SYMLINK_INTO_GIT, git_reason, refusals
from mountd._bwrap import Bind, Sandbox, bwrap_args
from mountd._identity import SandboxUser
from mountd._review import find_cows
from mountd._sandbox import SandboxRoot, SystemEntry, conflicts, host_layout, sandbox_root
from mountd._spec import CowLayer, DirLayer, SpecError, TempLayer, build, describe, parse_spec
from vfs._audit import read_audit_file
from vfs._cow import cow_fs
from vfs._policy import PolicyFileSystem
from vfs._types import Kind

from .mounting import mount_root
from .sandbox_trees import (
    MANIFEST_SCRIPT,
    git,
    git_env,
    git_repo,
    manifest,
    repository_in_memory,
)

COMMAND = [sys.executable, "-m", "mountd"]


@pytest.fixture(autouse=True)
def private_state(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    runtime = tmp_path_factory.mktemp("runtime")
    runtime.chmod(0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    return runtime


def mountd_run(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``mountd run ARGS`` in ``cwd``; Python inside writes no bytecode into the compared tree
    (the sandbox passes only the variables it is told to)."""
    return subprocess.run(
        [*COMMAND, "run", "--env", "PYTHONDONTWRITEBYTECODE", *args],
        cwd=cwd,
        env=git_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


# --- the sandbox root (no mount) ---------------------------------------------------------------

ENTRIES = (
    SystemEntry("bin", "symlink", "none", "usr/bin"),
    SystemEntry("etc", "directory", "etc"),
    SystemEntry("proc", "directory", "proc"),
    SystemEntry("tmp", "directory", "tmpfs"),
    SystemEntry("usr", "directory", "ro-bind"),
)


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_sandbox_root_answers_system_entries_but_never_lists_or_writes_them(
    backend: str,
) -> None:
    async def body() -> None:
        inner = vfs.temp_fs({"/a.txt": "a", "/src/b.py": "b"})
        root = sandbox_root(inner, ENTRIES)
        assert [e.path async for e in root.list("/")] == ["/a.txt", "/src"]
        assert [e.path for e, _ in await root.list_info("/")] == ["/a.txt", "/src"]
        assert (await root.lstat("/usr")).kind == "directory"
        assert (await root.lstat("/bin")).kind == "symlink"
        assert await root.readlink("/bin") == "usr/bin"
        assert not (await root.stat("/bin")).exists  # its target is in the (empty) /usr
        assert not (await root.lstat("/usr/bin")).exists
        assert [e async for e in root.list("/usr")] == []
        for call in (
            lambda: root.mkdir("/usr/lib"),
            lambda: root.write("/etc/passwd", "x"),
            lambda: root.open("/tmp/x", write=True, create=True),
            lambda: root.setattr("/usr", mode=0o700),
        ):
            with pytest.raises(vfs.ReadOnlyMountError):
                await call()
        with pytest.raises(vfs.FileExistsError):
            await root.mkdir("/proc")
        for call in (lambda: root.rmdir("/usr"), lambda: root.rename("/a.txt", "/usr")):
            with pytest.raises(vfs.PathError) as caught:
                await call()
            assert caught.value.errno == errno.EBUSY
        with pytest.raises(vfs.PathError) as caught:
            await root.link("/bin", "/mine")  # a system entry: bound from elsewhere
        assert caught.value.errno == errno.EXDEV
        with pytest.raises(vfs.FileExistsError):
            await root.link("/a.txt", "/proc")
        await root.link("/a.txt", "/src/a-again.txt")  # the tree's own files link
        assert (await inner.lstat("/a.txt")).nlink == 2
        # Everything else is the tree's.
        await root.write("/src/c.py", "c")
        assert await inner.read("/src/c.py") == "c"
        assert [e.path async for e in inner.list("/")] == ["/a.txt", "/src"]  # nothing added

    anyio.run(body, backend=backend)


def test_conflicts_and_host_layout() -> None:
    async def body() -> None:
        tree = vfs.temp_fs({"/usr/x": "mine", "/lib/y": "mine", "/a": "a"})
        assert await conflicts(tree, ["usr", "etc", "lib", "bin"]) == ["/usr", "/lib"]

    anyio.run(body, backend="trio")
    layout = {entry.name: entry for entry in host_layout(tmp=True)}
    assert {"usr", "etc", "proc", "dev", "tmp"} <= set(layout)
    for name in ("bin", "lib"):
        host = Path("/" + name)
        if host.is_symlink():
            assert layout[name] == SystemEntry(name, "symlink", "none", os.readlink(host))
    assert "tmp" not in {entry.name for entry in host_layout(tmp=False)}


def test_bwrap_args() -> None:
    user = SandboxUser(65533, 65533, 65533, 65533, "agent", switch=True)
    binds = (Bind("/root/.codex", "/tmp/.codex", True), Bind("/opt/cache", "/opt/cache", False))
    sandbox = Sandbox("/tmp/run-1", ENTRIES, ("sh", "-c", "x"), user, binds=binds)
    files = {"/etc/passwd": 5, "/etc/agentroot/gitconfig": 6}
    argv, command = bwrap_args(sandbox, files, 7)
    assert argv[:3] == ["--bind", "/tmp/run-1", "/"]
    assert command == ["sh", "-c", "x"]
    joined = " ".join(argv)
    assert "--ro-bind /usr /usr" in joined
    assert "--proc /proc" in joined and "--tmpfs /tmp" in joined
    assert "--ro-bind-try /proc/sys /proc/sys" in joined
    assert "--ro-bind-try /proc/sysrq-trigger /proc/sysrq-trigger" in joined
    assert "--tmpfs /etc" in joined and "--remount-ro /etc" in joined
    assert "--ro-bind-data 5 /etc/passwd" in joined
    assert "--ro-bind-data 6 /etc/agentroot/gitconfig" in joined
    assert joined.index("--ro-bind-data") < joined.index("--remount-ro /etc")
    # Bound from the mount, which serves them (see mountd._bwrap.Bind).
    assert "--bind /tmp/run-1/.mountd-run-binds/0 /tmp/.codex" in joined
    assert "--ro-bind /tmp/run-1/.mountd-run-binds/1 /opt/cache" in joined
    assert "--unshare-user --uid 65533 --gid 65533 --disable-userns" in joined
    assert "--unshare-net" in argv and "--die-with-parent" in argv
    assert argv[argv.index("--cap-drop") + 1] == "ALL"
    assert argv[argv.index("--seccomp") + 1] == "7"
    assert "/bin" not in argv  # a symlink answered by the sandbox root: nothing to mount
    assert "/etc/shadow" not in joined and "/etc/gitconfig" not in joined
    assert "/etc/passwd /etc/passwd" not in joined  # generated, not the host's
    as_root = SandboxUser(65533, 65533, 0, 0, "root", switch=True)
    with_net, _ = bwrap_args(Sandbox("/m", ENTRIES, ("true",), as_root, net=True), {}, 7)
    assert "--unshare-net" not in with_net
    assert "--uid 0 --gid 0" in " ".join(with_net)
    assert sandbox.write_roots() == ("/", "/tmp", "/dev", "/tmp/.codex")


LOOSE = "/.git/objects/ab/" + "c" * 38
PACK = "/.git/objects/pack/pack-" + "d" * 40


@pytest.mark.parametrize(
    ("path", "entry", "kind"),
    [
        ("/.git/index", "file", "modified"),
        (LOOSE, "file", "added"),
        ("/.git/objects/ab", "directory", "added"),
        (PACK + ".pack", "file", "added"),
        ("/.git/refs/heads/topic", "file", "added"),
        ("/.git/refs/tags", "directory", "added"),
        ("/.git/logs/refs/heads/main", "file", "modified"),
        ("/.git/packed-refs", "file", "modified"),
        ("/.git/HEAD", "file", "modified"),
        ("/.git/ORIG_HEAD", "file", "added"),
        ("/.git/MERGE_HEAD", "file", "deleted"),
        ("/.git/COMMIT_EDITMSG", "file", "modified"),
        ("/.git", "directory", "added"),
        ("/vendor/lib/.git/HEAD", "file", "added"),
        ("/src/a.py", "file", "modified"),
        ("/.gitignore", "file", "modified"),
        ("/src/.github/x", "symlink", "added"),
    ],
)
def test_the_git_rules_apply_what_git_writes(path: str, entry: Kind, kind: str) -> None:
    assert git_reason(path, entry, kind) is None


@pytest.mark.parametrize(
    ("path", "entry", "kind", "reason"),
    [
        ("/.git/hooks/pre-commit", "file", "added", "git's hooks: git runs what is there"),
        ("/.git/hooks", "symlink", "added", "a symlink inside .git: git follows it wherever"),
        ("/.git/config", "file", "modified", "git's config names commands git runs"),
        ("/.GIT/config", "file", "modified", "git's config names commands git runs"),
        ("/sub/.git/config", "file", "added", "git's config names commands git runs"),
        ("/.git/config.worktree", "file", "added", "git's config names commands git runs"),
        ("/.git/commondir", "file", "added", "commondir: it sends git to another directory"),
        ("/.git/worktrees/w/gitdir", "file", "added", "linked worktrees: it sends git"),
        ("/.git/modules/m/HEAD", "file", "added", "submodules' repositories"),
        ("/.git/objects/info/alternates", "file", "added", "objects/info: alternates"),
        ("/.git/info/attributes", "file", "added", "info: attributes choose the filters"),
        ("/.git/rebase-merge/git-rebase-todo", "file", "added", "an interrupted rebase's"),
        ("/.git/index.lock", "file", "added", "a lock file left behind"),
        ("/.git/refs/heads/main.lock", "file", "added", "a lock file left behind"),
        (LOOSE, "file", "modified", "an object changed in place"),
        (LOOSE, "file", "deleted", "apply never deletes git's objects"),
        ("/.git/objects/ab", "directory", "deleted", "apply never deletes git's objects"),
        (PACK + ".idx", "file", "deleted", "apply never deletes git's objects"),
        ("/.git/refs/replace/" + "a" * 40, "file", "added", "replace refs change what"),
        ("/.git/objects/ab/not-an-object", "file", "added", "not what git writes"),
        ("/.git/refs/heads/x", "symlink", "added", "a symlink inside .git"),
        ("/.git/HEAD", "file", "deleted", "not what git writes"),
        ("/.git/index", "file", "mode_changed", "not what git writes"),
        ("/.git/shallow", "file", "added", "not what git writes"),
        ("/.git", "file", "modified", "the .git entry itself: a gitfile"),
        ("/sub/.git", "file", "added", "the .git entry itself: a gitfile"),
        ("/.git", "directory", "deleted", "the .git entry itself"),
        ("/.git/refs/heads/.git/config", "file", "added", "a .git inside a git directory"),
    ],
)
def test_the_git_rules_refuse_everything_else(
    path: str, entry: Kind, kind: str, reason: str
) -> None:
    found = git_reason(path, entry, kind)
    assert found is not None and found.startswith(reason), found


def test_refusals_judge_the_layers_own_paths_and_the_served_policy() -> None:
    async def body() -> None:
        lower = vfs.temp_fs({"/a.txt": "a", "/.git/HEAD": "ref: refs/heads/main\n"})
        cow = cow_fs(lower)
        await cow.write("/.git/config", "[core]\n")
        await cow.write("/secret/a", "s")
        await cow.write("/a.txt", "A")
        await cow.symlink("/docs", ".git/hooks")
        await cow.symlink("/chain", "docs")
        from vfs._policy import as_policy

        served = as_policy([("/work/secret/", "read")])
        changes = [c async for c in cow.changes()]
        refused = await refusals(cow, "/work", changes, served)
        assert {c.path: r for c, r in refused.items()} == {
            "/.git/config": refused[changes[0]],
            "/chain": SYMLINK_INTO_GIT,  # through /docs, resolved in the layer
            "/docs": SYMLINK_INTO_GIT,
            "/secret": POLICY_DENIES,
            "/secret/a": POLICY_DENIES,
        }
        assert refused[changes[0]].startswith("git's config")

    anyio.run(body, backend="trio")


def test_find_cows_through_wrappers() -> None:
    lower = vfs.temp_fs({"/a": "a"})
    cow = cow_fs(lower)
    other = cow_fs(vfs.temp_fs())
    tree = vfs.union_fs({"/": build(TempLayer()), "/work": cow, "/work/deep": other})
    wrapped = SandboxRoot(tree, ENTRIES)
    found = [(c.prefix, c.cow) for c in find_cows(wrapped)]
    assert found == [("/work", cow), ("/work/deep", other)]
    assert find_cows(vfs.temp_fs()) == []


# --- the cow layer in specs --------------------------------------------------------------------


def test_spec_cow_layer(tmp_path: Path) -> None:
    text = """
    [root]
    type = "cow"
    policy = "repository"
    lower = { type = "dir", path = ".", read_only = true }
    upper = { type = "temp" }
    """
    layer = parse_spec(text, file="s.toml", base_dir=tmp_path)
    assert layer == CowLayer(DirLayer(tmp_path, read_only=True), TempLayer(), "repository")
    assert describe(layer) == f"cow(dir {tmp_path} (read-only) under temp; repository policy)"
    tree = build(layer)
    assert isinstance(tree, PolicyFileSystem)
    assert find_cows(tree)[0].prefix == "/"
    assert parse_spec(
        '[root]\ntype = "dir"\npath = "."\npolicy = "repository"\n',
        file="s.toml",
        base_dir=tmp_path,
    ) == DirLayer(tmp_path, False, "repository")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[root]\ntype = "cow"\n', 's.toml: root: missing key "lower" for a "cow" layer'),
        (
            '[root]\ntype = "cow"\nlower = { type = "temp" }\npolicy = "strict"\n',
            's.toml: root.policy: unknown policy "strict" (expected one of: repository)',
        ),
        (
            '[root]\ntype = "cow"\nlower = { type = "temp" }\npolicy = 1\n',
            "s.toml: root.policy: expected a string, got integer 1",
        ),
        (
            '[root]\ntype = "cow"\nlower = { type = "tmpp" }\n',
            's.toml: root.lower.type: unknown layer type "tmpp" (expected one of: temp, dir, '
            'empty, union, overlay, host, cow, s3; did you mean "temp"?)',
        ),
        (
            '[root]\ntype = "cow"\nlower = { type = "temp" }\nuper = { type = "temp" }\n',
            's.toml: root.uper: unknown key for a "cow" layer (did you mean "upper"?)',
        ),
    ],
)
def test_spec_cow_layer_errors(text: str, message: str, tmp_path: Path) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec(text, file="s.toml", base_dir=tmp_path)
    assert str(caught.value) == message


# --- the repository policy through a real mount ------------------------------------------------


@pytest.mark.mount
def test_git_commits_through_the_policy_while_a_hook_write_is_refused(tmp_path: Path) -> None:
    host = tmp_path / "host"
    host.mkdir()
    git(host, "init", "-q", "-b", "main")
    (host / "a.txt").write_text("a\n")
    git(host, "add", "-A")
    git(host, "commit", "-q", "-m", "first")
    audit = tmp_path / "audit.jsonl"
    build_tree = functools.partial(repository_in_memory, str(host), str(audit))
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    with mount_root(build_tree, mnt) as root:
        (root / "b.txt").write_text("b\n")
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", "through the mount")
        assert git(root, "log", "--format=%s") == "through the mount\nfirst\n"
        assert git(root, "status", "--porcelain") == ""
        for path in (root / ".git" / "hooks" / "pre-commit", root / ".git" / "config"):
            with pytest.raises(PermissionError) as caught:
                path.write_text("#!/bin/sh\necho pwned\n")
            assert caught.value.errno == errno.EACCES
        with pytest.raises(PermissionError):
            os.rename(root / ".git" / "hooks", root / "hooks")
        failed = subprocess.run(
            ["git", "config", "core.hooksPath", "/tmp"],
            cwd=root,
            env=git_env(),
            capture_output=True,
            text=True,
            check=False,
        )
        assert failed.returncode != 0
        assert "Permission denied" in failed.stderr
        assert not (root / ".git" / "hooks" / "pre-commit").exists()
    entries = read_audit_file(audit)
    denied = [(e.op, e.path) for e in entries if e.result == "denied"]
    assert ("open", "/.git/hooks/pre-commit") in denied
    # Refused at the open, or (served by inode: no OPEN request) at the O_TRUNC it carries.
    assert {("open", "/.git/config"), ("setattr", "/.git/config")} & set(denied)
    assert ("rename", "/.git/hooks") in denied
    assert ("rename", "/.git/config.lock") in denied  # git config: lock, then rename over
    assert any(e.op == "rename" and e.dest == "/.git/index" and e.result == "ok" for e in entries)
    # The host repository is another tree: untouched.
    assert git(host, "log", "--format=%s") == "first\n"


# --- whole runs ----------------------------------------------------------------------------------

AGENT = f"""
set -e
echo "edited by the agent" >> README.md
sed -i 's/VALUE = 101/VALUE = 1/' src/pkg1/mod1.py
mv docs guide
rm src/pkg2/mod3.py src/pkg2/mod4.py
printf 'print("new")\\n' > src/pkg1/new.py
chmod +x src/pkg1/new.py
if echo pwned > .git/hooks/pre-commit; then echo "hook written" >&2; exit 9; fi
git add -A
git commit -q -m "agent change"
sed -i 's/102/2/' tests/test_values.py
git commit -q -am "fix the test"
sh scripts/run-tests.sh >&2
python3 -c '{MANIFEST_SCRIPT}'
"""


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[Path]:
    yield git_repo(tmp_path / "repo")


EXPECTED_CHANGES = [
    "  M /README.md",
    "  R /guide/ (from /docs/)",
    *(f"  R /guide/{name}.md (from /docs/{name}.md)" for name in "abcdefghij"),
    "  M /src/pkg1/mod1.py",
    "  A /src/pkg1/new.py",
    "  D /src/pkg2/mod3.py",
    "  D /src/pkg2/mod4.py",
    "  M /tests/test_values.py",
]


def check_summary(stderr: str) -> None:
    """The denial as it happened, then the summary: every change outside .git, exactly."""
    lines = stderr.splitlines()
    assert lines[0] == "mountd run: policy denied open /.git/hooks/pre-commit (access read)"
    start = next(i for i, line in enumerate(lines) if line.startswith("mountd run: the command"))
    summary = lines[start:]
    head = re.fullmatch(
        r"mountd run: the command exited with status 0; (\d+) changes in the copy-on-write tree",
        summary[0],
    )
    assert head is not None, stderr
    count = len(EXPECTED_CHANGES)
    assert summary[1 : 1 + count] == EXPECTED_CHANGES
    git_line = re.fullmatch(r"  /\.git: (\d+) changes \(git's own files\)", summary[1 + count])
    assert git_line is not None, stderr
    assert int(head[1]) == count + int(git_line[1])
    assert re.fullmatch(r"    refs/heads/main: [0-9a-f]{12} -> [0-9a-f]{12}", summary[2 + count])
    assert re.fullmatch(r"    index: stages \d+ paths: README\.md, .+", summary[3 + count])
    assert summary[4 + count :] == [
        "mountd run: 1 access denied by policy:",
        "  open /.git/hooks/pre-commit",
    ]


@pytest.mark.mount
def test_run_leaves_the_host_repository_byte_identical(repo: Path) -> None:
    before = manifest(repo)
    done = mountd_run("--", "sh", "-c", AGENT, cwd=repo)
    assert done.returncode == 0, done.stderr
    assert manifest(repo) == before  # every file, .git included, byte for byte
    seen = json.loads(done.stdout)
    assert seen["/README.md"] != before["/README.md"]
    assert "/docs" not in seen and "/guide/a.md" in seen
    assert "/usr" not in seen and "/proc" not in seen and "/tmp" not in seen  # never listed
    assert seen["/.git/hooks/pre-commit.sample"] == before["/.git/hooks/pre-commit.sample"]
    assert "/.git/hooks/pre-commit" not in seen
    check_summary(done.stderr)


@pytest.mark.mount
def test_run_apply_makes_the_host_what_the_agent_saw(repo: Path) -> None:
    done = mountd_run("--apply", "--diff", "--", "sh", "-c", AGENT, cwd=repo)
    assert done.returncode == 0, done.stderr
    manifest_text, _, diff = done.stdout.partition("}")
    seen = json.loads(manifest_text + "}")
    # Every file as the agent saw it, but git's index: apply writes git's rebuild of it (the
    # same entries, none of the cached data; see mountd._git_index), which status reads.
    index = "/.git/index"
    assert {p: v for p, v in manifest(repo).items() if p != index} == {
        p: v for p, v in seen.items() if p != index
    }
    assert git(repo, "log", "--format=%s") == "fix the test\nagent change\ninitial\n"
    assert git(repo, "status", "--porcelain") == ""
    git(repo, "fsck", "--strict")
    assert "diff --git a/README.md b/README.md\n" in diff
    assert "rename from docs/a.md\nrename to guide/a.md\n" in diff
    assert "-VALUE = 101\n+VALUE = 1\n" in diff
    assert "deleted file mode 100644\n" in diff
    assert "new file mode 100755\n" in diff
    assert ".git/" not in diff
    assert re.search(r"mountd run: applied \d+ changes to dir_fs\(", done.stderr)


@pytest.mark.mount
def test_run_failed_command_status_and_no_apply(repo: Path) -> None:
    before = manifest(repo)
    done = mountd_run("--apply", "--", "sh", "-c", "echo new > new.txt; exit 3", cwd=repo)
    assert done.returncode == 3
    assert "  A /new.txt" in done.stderr
    assert "not applying the changes: the command exited with status 3" in done.stderr
    assert manifest(repo) == before


STATUS_AS_SEEN = "stat -c %u README.md; git {} status --porcelain"


@pytest.mark.mount
@pytest.mark.parametrize("flags", [(), ("--no-warm",)])
def test_roots_run_over_a_root_owned_repository_sees_it_unchanged(
    flags: tuple[str, ...], repo: Path
) -> None:
    """Root's run shows the root-owned project as the sandbox's user, which git's index never
    recorded: the sandbox's git compares size, mtime and mode only, so git status hashes
    nothing and leaves the index as it was; git's default comparison rewrites it."""
    assert os.geteuid() == 0 and repo.stat().st_uid == 0  # (the suite runs as root)
    past = 1_700_000_000  # every file older than the index: none is racily clean
    for dirpath, _, filenames in os.walk(repo):
        if "/.git" not in dirpath + "/":
            for name in filenames:
                os.utime(Path(dirpath, name), (past, past), follow_symlinks=False)
    git(repo, "status", "--porcelain")  # the index takes the new times, as an agent finds it
    index = (repo / ".git" / "index").read_bytes()
    done = mountd_run(*flags, "--", "sh", "-c", STATUS_AS_SEEN.format(""), cwd=repo)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "65533\n"  # the sandbox's user; nothing changed
    assert "exited with status 0; 0 changes in the copy-on-write tree\n" in done.stderr
    strict = STATUS_AS_SEEN.format("-c core.checkStat=default")
    done = mountd_run(*flags, "--", "sh", "-c", strict, cwd=repo)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "65533\n"
    assert "exited with status 0; 1 change in the copy-on-write tree\n" in done.stderr
    assert "  /.git: 1 change (git's own files)\n" in done.stderr  # the index, rewritten
    assert (repo / ".git" / "index").read_bytes() == index  # (in the copy only)


@pytest.mark.mount
def test_a_run_as_uid_0_inside_sees_the_owner_git_recorded(repo: Path) -> None:
    """With ``--root`` the namespace shows the sandbox's user as 0 again: the owner git's index
    recorded, so git keeps its default comparison."""
    shown = "stat -c %u README.md; git config core.checkStat || echo default"
    done = mountd_run("--root", "--", "sh", "-c", shown, cwd=repo)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "0\ndefault\n"


@pytest.mark.mount
def test_run_apply_conflict_writes_nothing(repo: Path, tmp_path: Path) -> None:
    """The host file changes while the copy holds an edit of it: apply refuses, whole."""
    spec = tmp_path / "spec.toml"
    spec.write_text(
        f'[root]\ntype = "union"\n[root.mounts."/"]\ntype = "cow"\n'
        f'lower = {{ type = "dir", path = "{repo}" }}\n'
        f'[root.mounts."/host"]\ntype = "dir"\npath = "{repo}"\n'
    )
    before = manifest(repo)
    done = mountd_run(
        str(spec),
        "--apply",
        "--",
        "sh",
        "-c",
        "echo copy >> README.md; echo new > new.txt; echo host >> /host/README.md",
        cwd=tmp_path,
    )
    assert done.returncode == 1, done.stderr
    assert "mountd run: nothing applied: conflict: /README.md changed in the lower tree" in (
        done.stderr
    )
    after = manifest(repo)
    assert not (repo / "new.txt").exists()
    assert (repo / "README.md").read_text() == "# project\nhost\n"
    assert {k: v for k, v in after.items() if k != "/README.md"} == {
        k: v for k, v in before.items() if k != "/README.md"
    }


@pytest.mark.mount
def test_run_refuses_a_tree_that_holds_system_names(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "tool").write_text("#!/bin/sh\n")
    done = mountd_run("--", "true", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("mountd: the tree holds /bin at its root")


def test_run_usage_errors(tmp_path: Path) -> None:
    done = mountd_run("echo", cwd=tmp_path)
    assert (done.returncode, done.stderr) == (
        2,
        "mountd: give the command after --, e.g. `mountd run -- make test`\n",
    )
    done = mountd_run("a.toml", "b.toml", "--", "true", cwd=tmp_path)
    assert done.returncode == 2
    assert "too many arguments before --: a.toml b.toml" in done.stderr


# --- the daemon's audit log ------------------------------------------------------------------------


@pytest.mark.mount
def test_default_mount_audits_changes_and_denials_with_turn_numbers(
    repo: Path, tmp_path: Path, private_state: Path
) -> None:
    from mountd import _registry as registry

    mnt = tmp_path / "mnt"

    def mountd(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*COMMAND, *args], cwd=repo, capture_output=True, text=True, timeout=40, check=False
        )

    started = mountd("mount", "--daemon", str(mnt))
    assert started.returncode == 0, started.stdout + started.stderr
    assert "under copy-on-write" in started.stdout
    try:
        (mnt / "before.txt").write_text("no turn yet\n")
        assert mountd("turn", "begin", str(mnt)).returncode == 0
        (mnt / "README.md").write_text("changed in turn 1\n")
        with pytest.raises(PermissionError) as caught:
            (mnt / ".git" / "hooks" / "pre-commit").write_text("#!/bin/sh\n")
        assert caught.value.errno == errno.EACCES
        (mnt / "tmp" / "scratch.txt").write_text("scratch is not audited\n")
        assert mountd("turn", "end", str(mnt)).returncode == 0
    finally:
        assert mountd("unmount", str(mnt)).returncode == 0
    assert (repo / "README.md").read_text() == "# project\n"  # copy-on-write: host untouched
    key = registry.state_key(registry.canonical(mnt))
    entries = read_audit_file(private_state / "agentroot-mountd" / f"{key}.audit.jsonl")
    rows = [(e.op, e.path, e.result, e.turn) for e in entries]
    assert ("open", "/before.txt", "ok", None) in rows
    assert ("open", "/README.md", "ok", 1) in rows
    assert ("open", "/.git/hooks/pre-commit", "denied", 1) in rows
    assert not [row for row in rows if row[1].startswith("/tmp")]


# --- roots that are not copy-on-write, and the network ------------------------------------------


@pytest.mark.mount
def test_run_over_a_read_only_root(tmp_path: Path) -> None:
    """Bubblewrap's mount points are answered by the sandbox root: a root that takes no writes
    at all still runs, and nothing is created in it."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "a.txt").write_text("read me\n")
    spec = tmp_path / "spec.toml"
    spec.write_text(f'[root]\ntype = "dir"\npath = "{project}"\nread_only = true\n')
    done = mountd_run(
        str(spec),
        "--",
        "sh",
        "-c",
        "cat /a.txt; echo x > /b.txt || echo refused; ls -A /; echo scratch > /tmp/s; cat /tmp/s",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["read me", "refused", "a.txt", "scratch"]
    assert "Read-only file system" in done.stderr
    assert "the tree has no copy-on-write layer" in done.stderr
    assert sorted(p.name for p in project.iterdir()) == ["a.txt"]


NET_PROBE = (
    "import socket, sys\n"
    "s = socket.socket()\n"
    "try:\n"
    "    s.connect(('127.0.0.1', int(sys.argv[1])))\n"
    "    print('connected')\n"
    "except OSError as error:\n"
    "    print(error.errno)\n"
)


@pytest.mark.mount
def test_run_has_no_network_unless_asked(tmp_path: Path) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(4)
        port = str(server.getsockname()[1])
        closed = mountd_run("--", "python3", "-c", NET_PROBE, port, cwd=tmp_path)
        assert closed.returncode == 0, closed.stderr
        assert closed.stdout == f"{errno.ECONNREFUSED}\n"  # its own loopback: nobody listens
        opened = mountd_run("--net", "--", "python3", "-c", NET_PROBE, port, cwd=tmp_path)
        assert opened.returncode == 0, opened.stderr
        assert opened.stdout == "connected\n"  # the host's loopback


@pytest.mark.mount
def test_a_project_s_own_tmp_shows_under_a_scratch_nobody_reviews(tmp_path: Path) -> None:
    """HOME and TMPDIR are /tmp: in a project with a tmp/ of its own, what the command writes
    there (caches, temporary files) is scratch, never a change to review or apply, while the
    files the project keeps there stay in sight (git sees no deletion)."""
    repo = tmp_path / "repo"
    (repo / "tmp").mkdir(parents=True)
    (repo / "tmp" / ".keep").write_text("")
    (repo / "README.md").write_text("# project\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "initial")
    before = manifest(repo)
    done = mountd_run(
        "--apply", "--", "sh", "-c",
        "set -e; echo cache > $HOME/.cache1; echo x > \"$(mktemp)\"; echo over > /tmp/.keep; "
        "git status --porcelain --untracked-files=no; echo done",
        cwd=repo,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == " M tmp/.keep\ndone\n"  # the scratch's own change, and no deletion
    assert "0 changes in the copy-on-write tree" in done.stderr
    assert manifest(repo) == before
