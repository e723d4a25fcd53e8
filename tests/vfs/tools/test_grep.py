"""Grep: output modes, head_limit/offset, the max_results pushdown, filters and errors."""

from __future__ import annotations

from pathlib import Path

import pytest

import vfs

from ..eightverb import EightVerbTree
from .helpers import BACKENDS, call, err, ok

FILES: dict[str, str | bytes] = {
    "/a.py": "import os\nimport re\nx = 1\n",
    "/b.md": "# Import\nimport nothing\n",
    "/src/c.py": "import sys\n",
    "/src/deep/d.py": "IMPORT = 2\nimport json\n",
    "/p.png": b"\x89PNG import",
}

CONTENT = [
    "/a.py:1:import os",
    "/a.py:2:import re",
    "/b.md:2:import nothing",
    "/src/c.py:1:import sys",
    "/src/deep/d.py:2:import json",
]


def lines(*rows: str) -> str:
    return "\n".join(rows)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("arguments", "shown"),
    [
        ({"pattern": "^import"}, lines(*CONTENT)),
        ({"pattern": "^import", "output_mode": "content"}, lines(*CONTENT)),
        ({"pattern": "^import", "head_limit": 2}, lines(*CONTENT[:2])),
        ({"pattern": "^import", "head_limit": 2, "offset": 2}, lines(*CONTENT[2:4])),
        ({"pattern": "^import", "offset": 4}, lines(*CONTENT[4:])),
        ({"pattern": "^import", "head_limit": 0}, lines(*CONTENT)),
        ({"pattern": "^import", "offset": 5}, "No matches found"),
        (
            {"pattern": "^import", "output_mode": "files_with_matches"},
            lines("/a.py", "/b.md", "/src/c.py", "/src/deep/d.py"),
        ),
        (
            {
                "pattern": "^import",
                "output_mode": "files_with_matches",
                "head_limit": 2,
                "offset": 1,
            },
            lines("/b.md", "/src/c.py"),
        ),
        (
            {"pattern": "^import", "output_mode": "count"},
            lines("/a.py:2", "/b.md:1", "/src/c.py:1", "/src/deep/d.py:1"),
        ),
        ({"pattern": "^import", "output_mode": "count", "head_limit": 1}, "/a.py:2"),
        ({"pattern": "^import", "output_mode": "count", "offset": 3}, "/src/deep/d.py:1"),
        (
            {"pattern": "^import", "-i": True},
            lines(
                "/a.py:1:import os",
                "/a.py:2:import re",
                "/b.md:2:import nothing",
                "/src/c.py:1:import sys",
                "/src/deep/d.py:1:IMPORT = 2",
                "/src/deep/d.py:2:import json",
            ),
        ),
        (
            {"pattern": "import", "case_insensitive": True, "glob": "*.md"},
            lines("/b.md:1:# Import", "/b.md:2:import nothing"),
        ),
        (
            {"pattern": "import", "glob": "*.py", "path": "/src"},
            lines("/src/c.py:1:import sys", "/src/deep/d.py:2:import json"),
        ),
        (
            {"pattern": "import", "glob": "*.py", "path": "src"},
            lines("/src/c.py:1:import sys", "/src/deep/d.py:2:import json"),
        ),
        (
            {"pattern": "import", "glob": "deep/*.py", "path": "/src"},
            "/src/deep/d.py:2:import json",
        ),
        ({"pattern": "import", "path": "/src/c.py"}, "/src/c.py:1:import sys"),
        ({"query": "x = 1", "include_pattern": "*.py"}, "/a.py:3:x = 1"),
        ({"pattern": "x = \\d", "outputMode": "count", "headLimit": 5}, "/a.py:1"),
        ({"pattern": "import", "path": "/nowhere"}, "No matches found"),
        ({"pattern": "zzz"}, "No matches found"),
    ],
)
def test_grep(backend: str, arguments: dict[str, object], shown: str) -> None:
    assert call(backend, vfs.temp_fs(FILES), "Grep", arguments) == ok(shown)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"pattern": "("}, "invalid grep pattern: ("),
        ({}, "Grep: missing required argument: pattern"),
        (
            {"pattern": "x", "output_mode": "lines"},
            "Grep: output_mode must be one of content, files_with_matches, count, not 'lines'",
        ),
        ({"pattern": "x", "head_limit": -1}, "Grep: head_limit must be at least 0, not -1"),
        ({"pattern": "x", "offset": -1}, "Grep: offset must be at least 0, not -1"),
        ({"pattern": "x", "-A": 2}, "Grep: unknown argument: -A"),
        ({"pattern": "x", "-i": "yes"}, "Grep: -i must be a boolean, not a string"),
    ],
)
def test_grep_errors(backend: str, arguments: dict[str, object], error: str) -> None:
    assert call(backend, vfs.temp_fs(FILES), "Grep", arguments) == err(error)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("arguments", "cap"),
    [
        ({"pattern": "import"}, None),
        ({"pattern": "import", "head_limit": 2}, 2),
        ({"pattern": "import", "head_limit": 2, "offset": 3}, 5),
        ({"pattern": "import", "head_limit": 0, "offset": 3}, None),
        ({"pattern": "import", "output_mode": "count", "head_limit": 2}, None),
        ({"pattern": "import", "output_mode": "files_with_matches", "head_limit": 2}, None),
    ],
)
def test_max_results_pushdown(backend: str, arguments: dict[str, object], cap: int | None) -> None:
    tree = EightVerbTree({k: v for k, v in FILES.items() if isinstance(v, str)})
    assert call(backend, tree, "Grep", arguments).ok
    assert tree.grep_caps == [cap]


@pytest.mark.parametrize("backend", BACKENDS)
def test_file_modes_stop_reading_early(backend: str) -> None:
    """files_with_matches stops at the last path shown; count at the next path's first hit."""
    files = {f"/f{i}.txt": "hit\n" * 3 for i in range(10)}
    tree = EightVerbTree(files)
    arguments = {"pattern": "hit", "output_mode": "files_with_matches", "head_limit": 2}
    assert call(backend, tree, "Grep", arguments) == ok("/f0.txt\n/f1.txt")
    assert tree.hits_produced == 4  # three in f0, the first in f1
    tree = EightVerbTree(files)
    arguments = {"pattern": "hit", "output_mode": "count", "head_limit": 2}
    assert call(backend, tree, "Grep", arguments) == ok("/f0.txt:3\n/f1.txt:3")
    assert tree.hits_produced == 7  # all of f0 and f1, then the first hit of f2


@pytest.mark.parametrize("backend", BACKENDS)
def test_grep_on_a_union_with_a_read_only_mount(backend: str, tmp_path: Path) -> None:
    (tmp_path / "r.txt").write_text("import ro\n")
    union = vfs.union_fs(
        {"/": vfs.temp_fs({"/w.txt": "import w\n"}), "/ro": vfs.dir_fs(tmp_path, read_only=True)}
    )
    assert call(backend, union, "Grep", {"pattern": "import"}) == ok(
        "/ro/r.txt:1:import ro\n/w.txt:1:import w"
    )
