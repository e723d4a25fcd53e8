"""Spec files: every layer type parses and builds the right tree; every error names its key."""

from __future__ import annotations

import subprocess
import textwrap
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import vfs
from mountd._spec import (
    CowLayer,
    DirLayer,
    EmptyLayer,
    HostLayer,
    OverlayLayer,
    SpecError,
    TempLayer,
    UnionLayer,
    build,
    build_tree,
    default_layer,
    describe,
    load_spec,
    parse_spec,
    tomllib,  # the stdlib's, or tomli on 3.10
)
from vfs._mounts import FRESH_FOR


def write_spec(directory: Path, text: str, name: str = "spec.toml") -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(text))
    return path


def run_both(fn: Callable[[], Awaitable[Any]]) -> None:
    for backend in ("trio", "asyncio"):
        anyio.run(fn, backend=backend)


async def names(fs: vfs.FileSystem, prefix: str = "/") -> list[str]:
    return [entry.path async for entry in fs.list(prefix)]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A spec directory with host directories to point `dir` layers at."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "main.py").write_text("print('hi')\n")
    (tmp_path / "upper").mkdir()
    (tmp_path / "upper" / "shared.txt").write_text("from upper")
    (tmp_path / "lower").mkdir()
    (tmp_path / "lower" / "shared.txt").write_text("from lower")
    (tmp_path / "lower" / "only-lower.txt").write_text("lower only")
    (tmp_path / "plain-file").write_text("not a dir")
    return tmp_path


# --- parsing: every layer type -----------------------------------------------------------------


def test_every_layer_type_parses_to_values(tree: Path) -> None:
    spec = write_spec(
        tree,
        """
        [root]
        type = "union"

        [root.mounts."/"]
        type = "dir"
        path = "src"
        read_only = true

        [root.mounts."/tmp"]
        type = "temp"
        files = { "/README.md" = "scratch space", "/notes/a.txt" = "a" }

        [root.mounts."/data"]
        type = "overlay"
        layers = [ { type = "dir", path = "./upper" }, { type = "dir", path = "lower", read_only = true } ]

        [root.mounts."/nothing"]
        type = "empty"

        [root.mounts."/host"]
        type = "host"
        scope = "workspace"
        files = { "/h.txt" = "hosted" }
        """,
    )
    assert load_spec(spec) == UnionLayer(
        (
            ("/", DirLayer(tree / "src", read_only=True)),
            (
                "/data",
                OverlayLayer((DirLayer(tree / "upper"), DirLayer(tree / "lower", read_only=True))),
            ),
            ("/host", HostLayer((("/h.txt", "hosted"),), "workspace")),
            ("/nothing", EmptyLayer()),
            ("/tmp", TempLayer((("/README.md", "scratch space"), ("/notes/a.txt", "a")))),
        )
    )


def test_dir_paths_resolve_against_the_spec_directory_not_the_cwd(
    tree: Path, monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    monkeypatch.chdir(tmp_path_factory.mktemp("elsewhere"))
    spec = write_spec(tree, '[root]\ntype = "dir"\npath = "."\n')
    assert load_spec(spec) == DirLayer(tree)
    monkeypatch.setenv("HOME", str(tree))
    assert load_spec(write_spec(tree, '[root]\ntype = "dir"\npath = "~/src"\n')) == DirLayer(
        tree / "src"
    )


def test_nesting_to_any_depth(tree: Path) -> None:
    spec = write_spec(
        tree,
        """
        [root]
        type = "overlay"
        [[root.layers]]
        type = "union"
        [root.layers.mounts."/a"]
        type = "overlay"
        layers = [ { type = "union", mounts = { "/b" = { type = "temp", files = { "/c" = "deep" } } } } ]
        [[root.layers]]
        type = "empty"
        """,
    )
    layer = load_spec(spec)
    assert layer == OverlayLayer(
        (
            UnionLayer(
                (("/a", OverlayLayer((UnionLayer((("/b", TempLayer((("/c", "deep"),))),)),))),)
            ),
            EmptyLayer(),
        )
    )
    assert describe(layer) == "overlay(union(/a = overlay(union(/b = temp (1 file)))), empty)"


def test_default_layer_is_the_cwd_under_copy_on_write_with_a_temp_tmp(tmp_path: Path) -> None:
    layer = default_layer(tmp_path)
    assert layer == UnionLayer((("/", CowLayer(DirLayer(tmp_path))), ("/tmp", TempLayer())))
    assert describe(layer) == f"union(/ = cow(dir {tmp_path}), /tmp = temp)"
    (tmp_path / ".git").mkdir()  # a git repository gets the repository policy
    layer = default_layer(tmp_path)
    assert layer == UnionLayer(
        (
            ("/", CowLayer(DirLayer(tmp_path), None, "repository")),
            ("/tmp", TempLayer()),
        )
    )
    assert describe(layer) == (f"union(/ = cow(dir {tmp_path}; repository policy), /tmp = temp)")


# --- building: the tree behaves as the spec says ------------------------------------------------


def test_built_tree_serves_every_layer_through_vfs_verbs(tree: Path) -> None:
    spec = write_spec(
        tree,
        """
        [root]
        type = "union"
        [root.mounts."/"]
        type = "dir"
        path = "src"
        read_only = true
        [root.mounts."/tmp"]
        type = "temp"
        files = { "/README.md" = "scratch space" }
        [root.mounts."/data"]
        type = "overlay"
        layers = [ { type = "dir", path = "upper" }, { type = "dir", path = "lower", read_only = true } ]
        [root.mounts."/rw"]
        type = "dir"
        path = "upper"
        [root.mounts."/nothing"]
        type = "empty"
        """,
    )
    fs = build(load_spec(spec))

    async def check() -> None:
        assert await fs.read("/main.py") == "print('hi')\n"
        with pytest.raises(vfs.ReadOnlyMountError) as error:
            await fs.write("/new.py", "x")
        assert str(error.value) == "read-only mount: /new.py"
        assert not (tree / "src" / "new.py").exists()

        assert await fs.read("/tmp/README.md") == "scratch space"
        await fs.write("/tmp/scratch.txt", "temp data")
        assert await fs.read("/tmp/scratch.txt") == "temp data"
        assert await names(fs, "/tmp") == ["/tmp/README.md", "/tmp/scratch.txt"]

        assert await fs.read("/data/shared.txt") == "from upper"  # earlier layer wins
        assert await fs.read("/data/only-lower.txt") == "lower only"
        assert await names(fs, "/data") == ["/data/only-lower.txt", "/data/shared.txt"]

        await fs.write("/rw/made.txt", "written")
        assert (tree / "upper" / "made.txt").read_text() == "written"
        await fs.delete("/rw/made.txt")

        assert await names(fs, "/nothing") == []
        assert (await fs.stat("/nothing/x")).kind == "missing"

    run_both(check)


@pytest.mark.mount
def test_a_dir_layer_leaves_out_mounts_below_it_unless_it_crosses_them(tree: Path) -> None:
    spec = write_spec(
        tree,
        """
        [root]
        type = "union"
        [root.mounts."/plain"]
        type = "dir"
        path = "src"
        [root.mounts."/crossing"]
        type = "dir"
        path = "src"
        cross_mounts = true
        """,
    )
    layer = load_spec(spec)
    assert describe(layer) == (
        f"union(/crossing = dir {tree}/src (crossing mounts), /plain = dir {tree}/src)"
    )
    fs = build(layer)
    inside = tree / "src" / "mounted"
    inside.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(inside)], check=True)
    try:
        (inside / "x.txt").write_text("on the tmpfs")

        async def check() -> None:
            await anyio.sleep(2 * FRESH_FOR)
            assert "/plain/mounted" not in await names(fs, "/plain")
            assert (await fs.stat("/plain/mounted/x.txt")).kind == "missing"
            assert "/crossing/mounted" in await names(fs, "/crossing")
            assert await fs.read("/crossing/mounted/x.txt") == "on the tmpfs"

        run_both(check)
    finally:
        subprocess.run(["umount", "-l", str(inside)], check=True)


def test_built_temp_and_empty_layers(tree: Path) -> None:
    temp = build(
        parse_spec('[root]\ntype = "temp"\nfiles = { "/a/b.txt" = "b" }\n', file="t", base_dir=tree)
    )
    empty = build(parse_spec('[root]\ntype = "empty"\n', file="t", base_dir=tree))

    async def check() -> None:
        assert await temp.read("/a/b.txt") == "b"
        assert await names(temp) == ["/a"]
        assert await names(empty) == []
        with pytest.raises(vfs.ReadOnlyMountError):
            await empty.write("/x", "x")

    run_both(check)


def test_built_host_layer(tree: Path) -> None:
    spec = '[root]\ntype = "host"\nfiles = { "/h.txt" = "hosted" }\n'
    host = build(parse_spec(spec, file="t", base_dir=tree))

    async def check() -> None:
        assert await host.read("/h.txt") == "hosted"
        await host.write("/new.txt", "new")
        assert await host.read("/new.txt") == "new"

    run_both(check)


def test_built_nested_union_inside_overlay(tree: Path) -> None:
    spec = write_spec(
        tree,
        """
        [root]
        type = "overlay"
        layers = [
          { type = "union", mounts = { "/etc" = { type = "temp", files = { "/motd" = "upper motd" } } } },
          { type = "temp", files = { "/etc/motd" = "lower motd", "/etc/hosts" = "lower hosts" } },
        ]
        """,
    )
    fs = build(load_spec(spec))

    async def check() -> None:
        assert await fs.read("/etc/motd") == "upper motd"
        assert await fs.read("/etc/hosts") == "lower hosts"

    run_both(check)


def test_built_default_root(tmp_path: Path) -> None:
    (tmp_path / "project.txt").write_text("mine")
    built = build_tree(default_layer(tmp_path))
    assert built.description == f"union(/ = cow(dir {tmp_path}), /tmp = temp)"

    async def check() -> None:
        fs = build_tree(default_layer(tmp_path)).fs  # a fresh copy for each backend
        assert await fs.read("/project.txt") == "mine"
        await fs.write("/project.txt", "changed")  # in the copy, not in the directory
        assert await fs.read("/project.txt") == "changed"
        assert (tmp_path / "project.txt").read_text() == "mine"
        await fs.write("/tmp/t.txt", "scratch")
        assert await fs.read("/tmp/t.txt") == "scratch"
        assert not (tmp_path / "tmp").exists()

    run_both(check)


# --- errors: file, key and problem, literally ---------------------------------------------------

ERRORS = [
    pytest.param(
        '[root]\ntype = "tmpp"\n',
        'root.type: unknown layer type "tmpp" (expected one of: temp, dir, empty, union, overlay, host, cow, s3;'
        ' did you mean "temp"?)',
        id="unknown-type",
    ),
    pytest.param(
        '[root]\ntype = "union"\n[root.mounts."/tmp"]\ntype = "tmpp"\n',
        'root.mounts."/tmp".type: unknown layer type "tmpp" (expected one of: temp, dir, empty, union,'
        ' overlay, host, cow, s3; did you mean "temp"?)',
        id="unknown-type-nested",
    ),
    pytest.param(
        '[root]\ntype = "zzz"\n',
        'root.type: unknown layer type "zzz" (expected one of: temp, dir, empty, union, overlay, host, cow, s3)',
        id="unknown-type-no-hint",
    ),
    pytest.param(
        "[root]\ntype = 3\n",
        "root.type: expected a string, got integer 3",
        id="type-not-string",
    ),
    pytest.param(
        '[root]\npath = "."\n',
        'root: missing key "type" (expected one of: temp, dir, empty, union, overlay, host, cow, s3)',
        id="missing-type",
    ),
    pytest.param(
        'roots = 1\n[root]\ntype = "empty"\n',
        'roots: unknown key (did you mean "root"?)',
        id="unknown-top-level-key",
    ),
    pytest.param("", 'spec.toml: missing key "root"', id="missing-root"),
    pytest.param(
        'root = "temp"\n',
        'root: expected a layer table like { type = "temp" }, got string "temp"',
        id="root-not-table",
    ),
    pytest.param(
        '[root]\ntype = "dir"\n',
        'root: missing key "path" for a "dir" layer',
        id="dir-missing-path",
    ),
    pytest.param(
        '[root]\ntype = "dir"\npath = "nope"\n',
        "root.path: directory does not exist: {dir}/nope",
        id="dir-does-not-exist",
    ),
    pytest.param(
        '[root]\ntype = "dir"\npath = "plain-file"\n',
        "root.path: not a directory: {dir}/plain-file",
        id="dir-is-a-file",
    ),
    pytest.param(
        '[root]\ntype = "dir"\npath = 7\n',
        "root.path: expected a directory path as a string, got integer 7",
        id="dir-path-not-string",
    ),
    pytest.param(
        '[root]\ntype = "dir"\npath = "src"\nread_only = "yes"\n',
        'root.read_only: expected true or false, got string "yes"',
        id="read-only-not-bool",
    ),
    pytest.param(
        '[root]\ntype = "dir"\npath = "src"\ncross_mounts = 1\n',
        "root.cross_mounts: expected true or false, got integer 1",
        id="cross-mounts-not-bool",
    ),
    pytest.param(
        '[root]\ntype = "dir"\npath = "src"\nreadonly = true\n',
        'root.readonly: unknown key for a "dir" layer (did you mean "read_only"?)',
        id="unknown-key-did-you-mean",
    ),
    pytest.param(
        '[root]\ntype = "empty"\nfiles = {}\n',
        'root.files: unknown key for a "empty" layer (expected one of: type)',
        id="unknown-key-no-hint",
    ),
    pytest.param(
        '[root]\ntype = "temp"\nfiles = ["a"]\n',
        'root.files: expected a table of path = text, like { "/a.txt" = "hi" }, got an array',
        id="files-not-table",
    ),
    pytest.param(
        '[root]\ntype = "temp"\nfiles = { "/a" = 1 }\n',
        'root.files."/a": expected the file\'s text as a string, got integer 1',
        id="file-contents-not-string",
    ),
    pytest.param(
        '[root]\ntype = "temp"\nfiles = { "a/../b/" = "x" }\n',
        'root.files."a/../b/": invalid file path "a/../b/" (write it as "/b")',
        id="file-path-not-normalized",
    ),
    pytest.param(
        '[root]\ntype = "union"\n[root.mounts.tmp]\ntype = "temp"\n',
        'root.mounts.tmp: invalid mount prefix "tmp" (prefixes are absolute, like "/tmp")',
        id="prefix-relative",
    ),
    pytest.param(
        '[root]\ntype = "union"\n[root.mounts."/tmp/"]\ntype = "temp"\n',
        'root.mounts."/tmp/": invalid mount prefix "/tmp/" (write it as "/tmp")',
        id="prefix-trailing-slash",
    ),
    pytest.param(
        '[root]\ntype = "union"\n[root.mounts."/a/../b"]\ntype = "temp"\n',
        'root.mounts."/a/../b": invalid mount prefix "/a/../b" (write it as "/b")',
        id="prefix-dotdot",
    ),
    pytest.param(
        '[root]\ntype = "union"\nmounts = {}\n',
        "root.mounts: a union needs at least one mount",
        id="union-empty",
    ),
    pytest.param(
        '[root]\ntype = "union"\n',
        'root: missing key "mounts" for a "union" layer',
        id="union-missing-mounts",
    ),
    pytest.param(
        '[root]\ntype = "union"\nmounts = "/"\n',
        'root.mounts: expected a table of prefix = layer, like [root.mounts."/tmp"], got string "/"',
        id="union-mounts-not-table",
    ),
    pytest.param(
        '[root]\ntype = "overlay"\nlayers = []\n',
        "root.layers: an overlay needs at least one layer",
        id="overlay-empty",
    ),
    pytest.param(
        '[root]\ntype = "overlay"\nlayers = { type = "temp" }\n',
        "root.layers: expected an array of layers, got a table",
        id="overlay-layers-not-array",
    ),
    pytest.param(
        '[root]\ntype = "overlay"\nlayers = [ { type = "temp" }, { type = "dir", path = "gone" } ]\n',
        "root.layers[1].path: directory does not exist: {dir}/gone",
        id="overlay-nested-error-indexed",
    ),
    pytest.param(
        '[root]\ntype = "overlay"\nlayers = [ "temp" ]\n',
        'root.layers[0]: expected a layer table like { type = "temp" }, got string "temp"',
        id="overlay-layer-not-table",
    ),
    pytest.param(
        '[root]\ntype = "host"\nscope = 1\n',
        "root.scope: expected a string, got integer 1",
        id="host-scope-not-string",
    ),
    pytest.param(
        "[root\n",
        "spec.toml: invalid TOML: Expected ']' at the end of a table declaration (at line 1, column 6)",
        id="toml-syntax",
    ),
]


@pytest.mark.parametrize(("text", "message"), ERRORS)
def test_errors_name_file_key_and_problem(tree: Path, text: str, message: str) -> None:
    spec = write_spec(tree, text)
    with pytest.raises(SpecError) as error:
        load_spec(spec)
    expected = message.replace("{dir}", str(tree))
    if not expected.startswith("spec.toml"):
        expected = f"{spec}: {expected}"
    else:
        expected = f"{tree}/{expected}"
    assert str(error.value) == expected
    assert error.value.file == str(spec)


def test_error_names_the_file_as_given(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tree)
    write_spec(tree, '[root]\ntype = "union"\n[root.mounts."/tmp"]\ntype = "tmpp"\n')
    with pytest.raises(SpecError) as error:
        load_spec("spec.toml")
    assert str(error.value).startswith(
        'spec.toml: root.mounts."/tmp".type: unknown layer type "tmpp"'
    )
    assert error.value.key == 'root.mounts."/tmp".type'


def test_unreadable_spec(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as error:
        load_spec(tmp_path / "missing.toml")
    assert (
        str(error.value) == f"{tmp_path}/missing.toml: cannot read spec: No such file or directory"
    )
    (tmp_path / "bin.toml").write_bytes(b"\xff\xfe")
    with pytest.raises(SpecError) as error:
        load_spec(tmp_path / "bin.toml")
    assert str(error.value) == f"{tmp_path}/bin.toml: not UTF-8 text (invalid start byte)"


def test_keys_that_are_not_bare_are_quoted(tree: Path) -> None:
    text = '[root]\ntype = "union"\n[root.mounts."/a b"]\ntype = "temp"\n[root.mounts."/a b".files]\n"/x" = 1\n'
    with pytest.raises(SpecError) as error:
        parse_spec(text, file="s.toml", base_dir=tree)
    assert error.value.key == 'root.mounts."/a b".files."/x"'


@settings(max_examples=60, deadline=None)
@given(st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12))
def test_error_keys_are_toml_keys_that_address_the_bad_entry(name: str) -> None:
    """Whatever the file name, the key in the error, read back as TOML, leads to that entry."""
    document = {"root": {"type": "temp", "files": {name: 1}}}
    text = f'root = {{ type = "temp", files = {{ {_quote_key(name)} = 1 }} }}\n'
    assert tomllib.loads(text) == document
    with pytest.raises(SpecError) as error:
        parse_spec(text, file="s.toml", base_dir=Path("/"))
    assert error.value.key is not None
    assert tomllib.loads(f"{error.value.key} = 1\n") == {"root": {"files": {name: 1}}}


def _quote_key(name: str) -> str:
    return '"' + "".join(f"\\U{ord(c):08x}" for c in name) + '"'  # every character escaped
