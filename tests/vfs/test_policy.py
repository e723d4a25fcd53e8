"""policy_fs: gitignore-style path rules granting write, read or none; the repository policy;
and audited_fs, the audit trail of changes and denials. Under trio and asyncio."""

from __future__ import annotations

import builtins
import errno
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import vfs
from vfs._audit import AuditLog, audited_fs, read_audit_file
from vfs._policy import (
    Policy,
    PolicyDeniedError,
    Rule,
    as_policy,
    policy_fs,
    repository_policy,
)

from .conformance import Capabilities, Files, Harness, Subject, rules_for
from .eightverb import BACKENDS, collect, paths, run

SEED: dict[str, str | bytes] = {
    "/README.md": "hello\n",
    "/src/a.py": "print('a')\nsecret = 1\n",
    "/src/b.py": "print('b')\n",
    "/secrets/key.txt": "secret key\n",
    "/docs/guide.md": "guide\nsecret mention\n",
    "/docs/drafts/new.md": "draft\n",
    "/build/out.txt": "out\n",
}

RULES = [
    ("secrets/", "none"),
    ("/docs/", "read"),
    ("/docs/drafts/", "write"),
    ("*.lock", "read"),
    ("build/", "none"),
]


def make(files: Files | None = None, rules: object = RULES) -> vfs.PosixFileSystem:
    tree = policy_fs(vfs.temp_fs(dict(SEED if files is None else files)), rules)  # type: ignore[arg-type]
    assert isinstance(tree, vfs.PosixFileSystem)
    return tree


def denied(error: BaseException, path: str) -> None:
    assert isinstance(error, PolicyDeniedError)
    assert isinstance(error, builtins.PermissionError)
    assert isinstance(error, vfs.PermissionDeniedError)
    assert error.errno == errno.EACCES
    assert str(error) == f"permission denied by policy: {path}"


# --- rules ------------------------------------------------------------------------------------


def test_rules_follow_gitignore_and_the_last_match_wins() -> None:
    policy = as_policy(RULES)
    assert policy.access("/README.md") == "write"
    assert policy.access("/secrets", directory=True) == "none"
    assert policy.access("/secrets/key.txt") == "none"
    assert policy.access("/a/secrets/deep/x") == "none"  # unanchored: any depth
    assert policy.access("/secrets") == "write"  # "secrets/" names directories only
    assert policy.access("/docs/guide.md") == "read"
    assert policy.access("/docs", directory=True) == "read"
    assert policy.access("/docs/drafts/new.md") == "write"  # a later rule wins
    assert policy.access("/x/docs/guide.md") == "write"  # "/docs/" is anchored
    assert policy.access("/docs/index.lock") == "read"
    assert policy.access("/docs/drafts/index.lock") == "read"  # "*.lock" comes later still
    assert policy.access("/") == "write"
    # A none directory hides everything beneath, whatever later rules say (as in .gitignore).
    hiding = as_policy([("/private/", "none"), ("/private/open.txt", "write")])
    assert hiding.access("/private/open.txt") == "none"
    assert as_policy([], default="none").access("/") == "read"  # the root is never hidden


def test_rules_are_checked() -> None:
    with pytest.raises(ValueError, match="negated pattern"):
        Rule("!x", "read")
    with pytest.raises(ValueError, match="access must be one of none, read, write"):
        Rule("x", "rw")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="empty pattern"):
        Rule("  ", "read")
    with pytest.raises(ValueError, match="default must be"):
        Policy((), "all")  # type: ignore[arg-type]
    assert as_policy({"a": "read"}).rules == (Rule("a", "read"),)
    assert as_policy([Rule("a", "none")], "read") == Policy((Rule("a", "none"),), "read")


@settings(max_examples=60, deadline=None)
@given(
    rules=st.lists(
        st.tuples(
            st.sampled_from(["a", "/a", "a/", "b/**", "*.txt", "/a/**/c", "c", "/b/c.txt"]),
            st.sampled_from(["none", "read", "write"]),
        ),
        max_size=5,
    ),
    path=st.lists(st.sampled_from(["a", "b", "c", "c.txt"]), min_size=1, max_size=4),
    directory=st.booleans(),
)
def test_access_is_the_last_matching_rule(
    rules: list[tuple[str, str]], path: list[str], directory: bool
) -> None:
    """Model: evaluate each rule with pathspec on its own; the last match wins; a none parent
    directory hides its contents."""
    import pathspec

    def own(rel: str, is_dir: bool) -> str:
        found = "write"
        for pattern, access in rules:
            if pathspec.GitIgnoreSpec.from_lines([pattern]).match_file(
                rel + ("/" if is_dir else "")
            ):
                found = access
        return found

    full = "/" + "/".join(path)
    expected = own("/".join(path), directory)
    for depth in range(1, len(path)):
        if own("/".join(path[:depth]), True) == "none":
            expected = "none"
    assert as_policy(rules).access(full, directory=directory) == expected
    tree = policy_fs(vfs.temp_fs(), rules)  # type: ignore[arg-type]
    assert tree.access(full, directory=directory) == expected


# --- enforcement --------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_none_is_invisible_and_refused(backend: str) -> None:
    async def body() -> None:
        tree = make()
        assert await paths(tree.list("/")) == ["/README.md", "/docs", "/src"]
        assert await paths(tree.list("/secrets")) == []
        assert [e for e, _ in await tree.list_info("/")] == [  # type: ignore[attr-defined]
            vfs.DirEntry("/README.md", "file"),
            vfs.DirEntry("/docs", "directory"),
            vfs.DirEntry("/src", "directory"),
        ]
        for call in (
            lambda: tree.read("/secrets/key.txt"),
            lambda: tree.stat("/secrets/key.txt"),
            lambda: tree.lstat("/secrets"),
            lambda: tree.stat("/secrets/missing.txt"),  # missing or not: the same answer
            lambda: tree.open("/secrets/key.txt"),
            lambda: tree.readlink("/build/out.txt"),
        ):
            with pytest.raises(PolicyDeniedError) as caught:
                await call()
            assert caught.value.access == "none"
        with pytest.raises(PolicyDeniedError) as caught:
            await tree.read("/secrets/key.txt")
        denied(caught.value, "/secrets/key.txt")
        assert await paths(tree.glob("**/*.txt")) == []
        assert await paths(tree.glob("*", "/secrets")) == []
        hits = await collect(tree.grep(vfs.GrepQuery("secret")))
        assert [(h.path, h.line_number) for h in hits] == [  # type: ignore[attr-defined]
            ("/docs/guide.md", 2),
            ("/src/a.py", 2),
        ]
        one = await collect(tree.grep(vfs.GrepQuery("secret|out", max_results=1)))
        assert [h.path for h in one] == ["/docs/guide.md"]  # type: ignore[attr-defined]
        assert await collect(tree.grep(vfs.GrepQuery("x", path="/secrets"))) == []
        with pytest.raises(vfs.InvalidGrepPatternError):
            await collect(tree.grep(vfs.GrepQuery("(", path="/secrets")))

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_read_refuses_every_change_also_to_paths_that_do_not_exist(backend: str) -> None:
    async def body() -> None:
        tree = make()
        calls = {
            "write": lambda: tree.write("/docs/guide.md", "x"),
            "write-new": lambda: tree.write("/docs/new.md", "x"),
            "delete": lambda: tree.delete("/docs/guide.md"),
            "unlink": lambda: tree.unlink("/docs/guide.md"),
            "open-write": lambda: tree.open("/docs/guide.md", write=True),
            "open-create": lambda: tree.open("/docs/new.md", write=True, create=True),
            "open-truncate": lambda: tree.open("/docs/guide.md", truncate=True),
            "mkdir": lambda: tree.mkdir("/docs/sub"),
            "rmdir": lambda: tree.rmdir("/docs/drafts-none"),
            "symlink": lambda: tree.symlink("/docs/link", "/README.md"),
            "setattr-mode": lambda: tree.setattr("/docs/guide.md", mode=0o600),
            "setattr-times": lambda: tree.setattr("/docs/guide.md", mtime_ns=1),
            "lock": lambda: tree.open("/src/index.lock", write=True, create=True, exclusive=True),
            "write-under-hidden": lambda: tree.write("/secrets/new.txt", "x"),
            "mkdir-parents": lambda: tree.write("/docs/new/deep.md", "x"),
        }
        for name, call in calls.items():
            with pytest.raises(PolicyDeniedError):
                await call()
            assert name  # (named for the failure message)
        # Nothing changed, nothing was created.
        assert await tree.read("/docs/guide.md") == "guide\nsecret mention\n"
        assert not (await tree.stat("/docs/new.md")).exists
        assert not (await tree.stat("/src/index.lock")).exists
        # Reading is fine, and so is everything where the policy grants write.
        file = await tree.open("/docs/guide.md")
        assert await file.read(0, 5) == b"guide"
        await file.close()
        await tree.write("/docs/drafts/new.md", "edited\n")
        await tree.write("/docs/drafts/more/deep.md", "deep\n")
        await tree.write("/src/c.py", "c\n")
        await tree.mkdir("/src/pkg")
        await tree.setattr("/src/a.py", mode=0o600)
        await tree.symlink("/src/link", "/docs/guide.md")

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_rename_into_or_out_of_protected_paths(backend: str) -> None:
    async def body() -> None:
        tree = make()
        # A file cannot leave or enter a read-only area; nor can a rename replace one there.
        for src, dst in [
            ("/docs/guide.md", "/src/guide.md"),
            ("/src/a.py", "/docs/a.py"),
            ("/src/a.py", "/secrets/a.py"),
            ("/secrets/key.txt", "/src/key.txt"),
            ("/src/a.py", "/src/x.lock"),
        ]:
            with pytest.raises(PolicyDeniedError):
                await tree.rename(src, dst)
        # A directory cannot carry protected entries out, nor carry entries into protection.
        await tree.mkdir("/docs/drafts/keep")
        await tree.tree.write("/docs/drafts/keep/x.lock", "held\n")  # type: ignore[attr-defined]
        with pytest.raises(PolicyDeniedError) as caught:
            await tree.rename("/docs/drafts/keep", "/src/keep")  # x.lock is read-only
        assert caught.value.path == "/docs/drafts/keep/x.lock"
        with pytest.raises(PolicyDeniedError):
            await tree.rename(
                "/src", "/docs/drafts/src-moved/../../src2"
            )  # normalizes to /docs/src2
        # Within the writable area a directory rename works.
        await tree.write("/src/pkg/m.py", "m\n")
        await tree.rename("/src/pkg", "/src/pkg2")
        assert await tree.read("/src/pkg2/m.py") == "m\n"
        # Exchange checks both sides.
        with pytest.raises(PolicyDeniedError):
            await tree.rename("/src/a.py", "/docs/guide.md", exchange=True)
        # A missing source is the tree's ENOENT, except where it may not even be seen.
        with pytest.raises(vfs.FileNotFoundError):
            await tree.rename("/src/missing", "/src/other")
        with pytest.raises(PolicyDeniedError):
            await tree.rename("/secrets/missing", "/src/other")
        assert await tree.read("/docs/guide.md") == "guide\nsecret mention\n"

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_symlinks_do_not_lead_around_the_rules(backend: str) -> None:
    async def body() -> None:
        tree = make()
        await tree.symlink("/src/to-docs", "../docs")
        await tree.symlink("/src/to-guide", "/docs/guide.md")
        await tree.symlink("/src/to-secrets", "/secrets")
        for call in (
            lambda: tree.write("/src/to-docs/guide.md", "pwned"),
            lambda: tree.write("/src/to-guide", "pwned"),
            lambda: tree.open("/src/to-guide", write=True),
            lambda: tree.write("/src/to-docs/new.md", "pwned"),
            lambda: tree.read("/src/to-secrets/key.txt"),
            lambda: tree.stat("/src/to-secrets"),
            lambda: tree.delete("/src/to-docs/guide.md"),
            lambda: tree.mkdir("/src/to-docs/sub"),
        ):
            with pytest.raises(PolicyDeniedError):
                await call()
        assert await paths(tree.list("/src/to-secrets")) == []
        assert await collect(tree.grep(vfs.GrepQuery("secret key", path="/src/to-secrets"))) == []
        # The link itself lives in a writable place: it can be read and removed.
        assert await tree.readlink("/src/to-guide") == "/docs/guide.md"
        assert await tree.read("/src/to-guide") == "guide\nsecret mention\n"
        await tree.unlink("/src/to-guide")
        # A directory replaced by a link is seen as a link from then on (the cache forgets).
        await tree.mkdir("/src/d")
        await tree.write("/src/d/f.txt", "f\n")
        await tree.rename("/src/d", "/src/d2")
        await tree.symlink("/src/d", "/docs")
        with pytest.raises(PolicyDeniedError):
            await tree.write("/src/d/guide.md", "pwned")
        assert await tree.read("/docs/guide.md") == "guide\nsecret mention\n"

    run(backend, body)


def _tree_of(kind: str, files: dict[str, str], tmp_path: Path) -> vfs.PosixFileSystem:
    if kind == "dir":
        for name, text in files.items():
            (tmp_path / name[1:]).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name[1:]).write_text(text)
        return vfs.posix_view(vfs.dir_fs(tmp_path))
    if kind == "cow":
        return vfs.posix_view(vfs.cow_fs(vfs.temp_fs(files)))
    return vfs.posix_view(vfs.temp_fs(files))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["temp", "cow", "dir"])
def test_dotdot_in_a_link_target_is_judged_where_it_leads(
    backend: str, kind: str, tmp_path: Path
) -> None:
    """``/l -> y/..`` with ``/y -> /secret/inner`` leads to ``/secret``, as every tree resolves
    it: the policy judges that, not the textual ``/``."""

    async def body() -> None:
        base = _tree_of(
            kind, {"/secret/data.txt": "TOP SECRET\n", "/secret/inner/x": "x"}, tmp_path
        )
        await base.symlink("/y", "/secret/inner")
        await base.symlink("/l", "y/..")
        assert await base.read("/l/data.txt") == "TOP SECRET\n"  # where the tree goes
        guarded = vfs.policy_fs(base, {"/secret/": "none"})
        for call in (
            lambda: guarded.read("/secret/data.txt"),
            lambda: guarded.read("/l/data.txt"),
            lambda: guarded.stat("/l/inner/x"),
            lambda: guarded.write("/l/new.txt", "x"),
        ):
            with pytest.raises(PolicyDeniedError):
                await call()
        assert await paths(guarded.list("/l")) == []

    run(backend, body)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["temp", "cow", "dir"])
def test_a_dotdot_link_does_not_write_into_git_hooks(
    backend: str, kind: str, tmp_path: Path
) -> None:
    async def body() -> None:
        files = {"/.git/HEAD": "ref: refs/heads/main\n", "/.git/objects/info/packs": "",
                 "/.git/hooks/pre-commit.sample": "#!/bin/sh\n"}  # fmt: skip
        base = _tree_of(kind, files, tmp_path)
        await base.symlink("/y", "/.git/objects")
        await base.symlink("/l", "y/../hooks")
        guarded = vfs.policy_fs(base, repository_policy())
        with pytest.raises(PolicyDeniedError):
            await guarded.write("/l/pre-commit", "#!/bin/sh\necho pwned\n")
        with pytest.raises(PolicyDeniedError):
            await guarded.open("/l/pre-commit", write=True, create=True)
        assert not (await base.lstat("/.git/hooks/pre-commit")).exists

    run(backend, body)


# --- the repository policy ---------------------------------------------------------------------

REPO: dict[str, str | bytes] = {
    "/.git/HEAD": "ref: refs/heads/main\n",
    "/.git/config": "[core]\n\tbare = false\n",
    "/.git/index": b"DIRC\x00\x00\x00\x02",
    "/.git/hooks/pre-commit.sample": "#!/bin/sh\n",
    "/.git/refs/heads/main": "0" * 40 + "\n",
    "/.git/modules/sub/config": "[core]\n",
    "/.git/modules/sub/hooks/post-checkout.sample": "#!/bin/sh\n",
    "/src/a.py": "a\n",
}


@pytest.mark.parametrize("backend", BACKENDS)
def test_repository_policy_lets_git_work_and_guards_hooks_and_config(backend: str) -> None:
    async def body() -> None:
        tree = policy_fs(vfs.temp_fs(REPO), repository_policy())
        # What git does for a commit: lock files, objects, index, refs, logs.
        for lock, final in [
            ("/.git/index.lock", "/.git/index"),
            ("/.git/HEAD.lock", "/.git/HEAD"),
            ("/.git/refs/heads/main.lock", "/.git/refs/heads/main"),
            ("/.git/packed-refs.lock", "/.git/packed-refs"),
        ]:
            file = await tree.open(lock, write=True, create=True, exclusive=True)
            await file.write(0, b"data\n")
            await file.close()
            await tree.rename(lock, final)
        await tree.write("/.git/objects/ab/cdef", b"x\x9c")
        await tree.write("/.git/logs/HEAD", "log\n")
        await tree.write("/.git/COMMIT_EDITMSG", "msg\n")
        await tree.write("/.git/ORIG_HEAD", "0" * 40 + "\n")
        await tree.mkdir("/.git/refs/tags")
        await tree.write("/.git/config.lock", "[core]\n")  # taking the lock is harmless...
        with pytest.raises(PolicyDeniedError) as caught:
            await tree.rename("/.git/config.lock", "/.git/config")  # ...replacing config is not
        denied(caught.value, "/.git/config")
        await tree.unlink("/.git/config.lock")
        for call in (
            lambda: tree.write("/.git/hooks/pre-commit", "#!/bin/sh\nevil\n"),
            lambda: tree.open("/.git/hooks/pre-commit", write=True, create=True),
            lambda: tree.rename("/.git/hooks/pre-commit.sample", "/.git/hooks/pre-commit"),
            lambda: tree.setattr("/.git/hooks/pre-commit.sample", mode=0o755),
            lambda: tree.rmdir("/.git/hooks"),
            lambda: tree.rename("/.git/hooks", "/hooks"),
            lambda: tree.rename("/.git", "/.git-moved"),  # would carry hooks and config along
            lambda: tree.write("/.git/config", "[core]\n\thooksPath = /tmp\n"),
            lambda: tree.delete("/.git/config"),
            lambda: tree.write("/.git/modules/sub/hooks/post-checkout", "evil"),
            lambda: tree.write("/.git/modules/sub/config", "evil"),
            lambda: tree.symlink("/.git/hooks/pre-push", "/src/a.py"),
        ):
            with pytest.raises(PolicyDeniedError):
                await call()
        assert await paths(tree.list("/.git/hooks")) == ["/.git/hooks/pre-commit.sample"]
        assert await tree.read("/.git/config") == "[core]\n\tbare = false\n"

    run(backend, body)


# --- conformance -------------------------------------------------------------------------------


def _policy_make(rules: object, audit: bool) -> Harness:
    async def build(files: Files) -> Subject:
        tree: vfs.FileSystem = policy_fs(vfs.temp_fs(dict(files)), rules)  # type: ignore[arg-type]
        if audit:
            tree = audited_fs(tree, AuditLog())
        return Subject(tree)

    return Harness(build, Capabilities(has_posix=True))


CONFORMANCE = [
    pytest.param(rules, audit, rule, id=f"{name}-{rule.name}")
    for name, rules, audit in [
        ("policy", [("/elsewhere/", "none"), ("*.lock", "read")], False),
        ("audited-policy", repository_policy(), True),
    ]
    for rule in rules_for(Capabilities(has_posix=True))
]


@pytest.mark.parametrize(("rules", "audit", "rule"), CONFORMANCE)
def test_conformance(rules: object, audit: bool, rule: object) -> None:
    harness = _policy_make(rules, audit)
    run("trio", lambda: rule.check(harness))  # type: ignore[attr-defined]


# --- audit ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_audit_records_changes_and_denials(backend: str, tmp_path: Path) -> None:
    async def body() -> None:
        target = tmp_path / "audit.jsonl"
        log = AuditLog(target, turn=1)
        tree = audited_fs(make(), log)
        await tree.write("/src/c.py", "c\n")
        await tree.read("/src/c.py")  # reads are not recorded
        file = await tree.open("/src/c.py")
        await file.close()
        log.turn = 2
        with pytest.raises(PolicyDeniedError):
            await tree.write("/docs/guide.md", "x")
        with pytest.raises(PolicyDeniedError):
            await tree.read("/secrets/key.txt")
        with pytest.raises(vfs.FileNotFoundError):
            await tree.delete("/src/missing.py")
        await tree.rename("/src/c.py", "/src/d.py")
        file = await tree.open("/src/e.py", write=True, create=True, exclusive=True)
        await file.close()
        await tree.setattr("/src/e.py", mode=0o600)
        log.close()
        rows = [(e.op, e.path, e.result, e.turn, e.dest, e.detail) for e in log.entries()]
        assert rows == [
            ("write", "/src/c.py", "ok", 1, None, None),
            ("write", "/docs/guide.md", "denied", 2, None, None),
            ("read", "/secrets/key.txt", "denied", 2, None, None),
            ("delete", "/src/missing.py", "ENOENT", 2, None, None),
            ("rename", "/src/c.py", "ok", 2, "/src/d.py", None),
            ("open", "/src/e.py", "ok", 2, None, "write,create,exclusive"),
            ("setattr", "/src/e.py", "ok", 2, None, "mode=600"),
        ]
        assert read_audit_file(target) == log.entries()
        first = json.loads(target.read_text().splitlines()[0])
        assert set(first) == {"time", "op", "path", "result", "turn"}
        fourth = json.loads(target.read_text().splitlines()[4])
        assert fourth["dest"] == "/src/d.py"
        assert [e.path for e in log.denied()] == ["/docs/guide.md", "/secrets/key.txt"]
        assert list(log) == log.entries() and len(log) == 7 == log.count

    run(backend, body)


def test_audit_turn_source_and_memory_bound() -> None:
    turns = iter([3, 4])
    log = AuditLog(turn_source=lambda: next(turns), keep=1)
    log.record("write", "/a")
    log.record("write", "/b")
    assert [(e.path, e.turn) for e in log] == [("/b", 4)]
    assert log.count == 2


def test_a_name_that_is_not_utf8_is_recorded_and_reads_back(tmp_path: Path) -> None:
    """A mount hands names that are not UTF-8 as surrogate escapes: recording one must not fail
    (it failed the operation with EIO after the change was made)."""
    name = "/bad\udcff\udc80name"
    log_file = tmp_path / "audit.jsonl"
    with AuditLog(log_file) as log:
        log.record("write", name, dest="/ok\udcfe")
    line = log_file.read_bytes()
    assert line.isascii()  # the escapes, not raw bytes
    [entry] = read_audit_file(log_file)
    assert (entry.op, entry.path, entry.dest) == ("write", name, "/ok\udcfe")


def test_denials_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    async def body() -> None:
        with pytest.raises(PolicyDeniedError):
            await make().write("/docs/x.md", "x")

    run("trio", body)
    assert "policy denied write /docs/x.md (access read)" in caplog.text


def test_messages() -> None:
    error = PolicyDeniedError("/.git/hooks/pre-commit", operation="write", access="read")
    assert str(error) == "permission denied by policy: /.git/hooks/pre-commit"
    assert error.with_path("/x").path == "/x"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(["write", "delete", "mkdir", "rename", "unlink", "rmdir"]),
            st.sampled_from(["/a", "/a/x", "/b", "/b/x", "/b/y.lock", "/c", "/c/x"]),
            st.sampled_from(["/a", "/a/y", "/b/z", "/c/z", "/d"]),
        ),
        max_size=12,
    )
)
def test_a_policy_tree_is_the_tree_minus_what_it_refuses(
    ops: list[tuple[str, str, str]],
) -> None:
    """Every call either raises PolicyDeniedError (and changes nothing) or does exactly what the
    same call does on an unwrapped copy."""
    rules = [("/b/", "read"), ("/c/", "none"), ("*.lock", "write")]
    seed = {"/a/x": "1", "/b/x": "2", "/b/y.lock": "3", "/c/x": "4"}

    async def state(tree: vfs.PosixFileSystem) -> list[tuple[str, str]]:
        return [(e.path, e.kind) async for e in vfs.walk(tree, "/")]

    async def body() -> None:
        plain = vfs.temp_fs(seed)
        guarded = policy_fs(vfs.temp_fs(seed), rules)
        for op, path, other in ops:
            before = await state(plain)
            try:
                await _call(guarded, op, path, other)
                outcome: object = "ok"
            except PolicyDeniedError:
                outcome = "denied"
            except OSError as error:
                outcome = error.errno
            if outcome == "denied":
                continue  # and the unwrapped copy does not make the call either
            try:
                await _call(plain, op, path, other)
                expected: object = "ok"
            except OSError as error:
                expected = error.errno
            assert outcome == expected, (op, path, other)
            assert before is not None
        # Hidden paths aside, both trees hold the same.
        assert [p for p in await state(plain) if not p[0].startswith("/c")] == await state(guarded)

    run("trio", body)


async def _call(tree: vfs.PosixFileSystem, op: str, path: str, other: str) -> None:
    if op == "write":
        await tree.write(path, "new")
    elif op == "delete":
        await tree.delete(path)
    elif op == "mkdir":
        await tree.mkdir(path)
    elif op == "rename":
        await tree.rename(path, other)
    elif op == "unlink":
        await tree.unlink(path)
    else:
        await tree.rmdir(path)
