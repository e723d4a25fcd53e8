"""What a model sends never escapes the envelope: lone surrogates, names that are not UTF-8.

JSON can spell a lone surrogate (``"\\ud800"``), and ``json.loads`` hands it to Python as is; no
UTF-8 encoder takes it. Every string argument of every tool gets one here, on every kind of
tree, and each call must answer an error envelope that itself encodes as UTF-8. The other way
round, a host name that is not UTF-8 reaches Python with surrogate escapes; what the tools show
of it must encode too.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import anyio
import pytest

import vfs
from vfs.tools import FILE_TOOL_NAMES, synthesize_tools
from vfs.tools._file_tools import SPECS

from .helpers import BACKENDS, call, ok
from .trees import WRITABLE, build

SURROGATE = json.loads('"a\\ud800b"')

# A call of each tool that succeeds (or fails cleanly) with plain arguments.
VALID: dict[str, dict[str, object]] = {
    "Read": {"path": "/a.txt"},
    "LS": {"path": "/"},
    "Grep": {"pattern": "a", "path": "/", "glob": "*.txt", "output_mode": "content"},
    "Glob": {"pattern": "*.txt", "path": "/"},
    "Write": {"path": "/w.txt", "fileText": "w"},
    "StrReplace": {"path": "/a.txt", "oldText": "alpha", "newText": "beta"},
    "Delete": {"path": "/a.txt"},
    "SemanticSearch": {"query": "a", "path": "/", "target_directories": ["/"]},
}

CASES = [
    pytest.param(tool, param.name, id=f"{tool}-{param.name}")
    for tool in FILE_TOOL_NAMES
    for param in SPECS[tool].params
    if param.type in ("string", "array") and param.name in VALID[tool]
]


def _encodes(text: str | None) -> None:
    assert text is not None
    text.encode("utf-8")
    json.dumps(text, ensure_ascii=False).encode("utf-8")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", WRITABLE)
@pytest.mark.parametrize(("tool", "argument"), CASES)
def test_a_lone_surrogate_in_any_argument_is_an_error_envelope(
    backend: str, kind: str, tool: str, argument: str, tmp_path: Path
) -> None:
    tree = build(kind, tmp_path, {"/a.txt": b"alpha\n"})
    arguments = dict(VALID[tool])
    if tool == "SemanticSearch" and argument in ("path", "target_directories"):
        arguments.pop("target_directories" if argument == "path" else "path")
    value = arguments[argument]
    arguments[argument] = [SURROGATE] if isinstance(value, list) else SURROGATE
    for key in ("path",):
        if key in arguments and key != argument and isinstance(arguments[key], str):
            arguments[key] = tree.p(str(arguments[key]))
    result = call(backend, tree.fs, tool, arguments)
    assert not result.ok, result
    _encodes(result.error)
    expected = "invalid path: " if argument in ("path", "target_directories") else f"{tool}: "
    assert result.error is not None and result.error.startswith(expected), result.error
    assert "lone surrogate (U+D800)" in result.error


@pytest.mark.parametrize("backend", BACKENDS)
def test_text_arguments_name_the_surrogate(backend: str) -> None:
    fs = vfs.temp_fs({"/a.txt": "alpha\n"})
    result = call(backend, fs, "Write", {"path": "/w.txt", "fileText": "ok " + SURROGATE})
    assert result.error == (
        "Write: fileText holds a lone surrogate (U+D800) at character 4, which is not text"
    )
    assert (anyio.run(fs.stat, "/w.txt")).kind == "missing"
    result = call(
        backend, fs, "StrReplace", {"path": "/a.txt", "oldText": "a", "new_string": "\udc80"}
    )
    assert result.error == (
        "StrReplace: new_string holds a lone surrogate (U+DC80) at character 0, which is not text"
    )
    assert call(backend, fs, "Read", {"path": "/a.txt"}) == ok("     1\talpha")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["dir", "local", "union"])
def test_names_that_are_not_utf8_are_shown_escaped(backend: str, kind: str, tmp_path: Path) -> None:
    """LS, Glob and Grep show a host name that is not UTF-8 with ``\\xNN`` escapes: text every
    JSON encoder takes (the name reached Python with surrogate escapes)."""
    tree = build(kind, tmp_path, {"/d/ok.txt": b"hit\n"})
    host = next(tmp_path.iterdir()) / "d"
    with open(os.path.join(os.fsencode(host), b"caf\xe9.txt"), "wb") as handle:
        handle.write(b"hit\n")
    d = tree.p("/d")

    async def main() -> None:
        tools = synthesize_tools(tree.fs)
        listed = await tools["LS"].invoke({"path": d})
        assert listed == ok(f"{d}/\n  caf\\xe9.txt\n  ok.txt")
        globbed = await tools["Glob"].invoke({"pattern": "*.txt", "path": d})
        assert globbed == ok(f"{d}/caf\\xe9.txt\n{d}/ok.txt")
        grepped = await tools["Grep"].invoke({"pattern": "hit", "path": d})
        assert grepped == ok(f"{d}/caf\\xe9.txt:1:hit\n{d}/ok.txt:1:hit")
        for result in (listed, globbed, grepped):
            assert isinstance(result.content, str)
            _encodes(result.content)
        # The surrogate-escaped spelling still names the file (a host name is bytes).
        read = await tools["Read"].invoke({"path": d + "/caf\udce9.txt"})
        assert read == ok("     1\thit")

    anyio.run(main, backend=backend)
