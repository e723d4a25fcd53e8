"""The conformance suite (``tests/vfs/conformance.py``) over ``host_fs(S3HostFiles)`` on SeaweedFS.

Every rule x backend is its own test, on a fresh scope seeded through boto3 directly (so the tree
under test starts with nothing cached). Rules run with the default cache validity and with none
(``metadata_ttl=0``: every answer comes from the store), on trio and asyncio.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import vfs
from tests.vfs.conformance import Capabilities, Files, Harness, Rule, Subject, rules_for
from vfs._content import encode_contents

from .conftest import Store

CAPS = Capabilities()
CASES = [pytest.param(rule, id=rule.name) for rule in rules_for(CAPS)]


def harness(s3: Store, **options: Any) -> Harness:
    async def make(files: Files) -> Subject:
        scope = s3.scope("conformance")
        for path, contents in files.items():
            s3.client.put_object(Bucket=s3.bucket, Key=scope + path, Body=encode_contents(contents))
        return Subject(vfs.host_fs(s3.files(**options), scope))

    return Harness(make, CAPS)


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
@pytest.mark.parametrize("rule", CASES)
def test_conformance(s3: Store, rule: Rule, backend: str) -> None:
    anyio.run(rule.check, harness(s3), backend=backend)


@pytest.mark.parametrize("rule", CASES)
def test_conformance_uncached(s3: Store, rule: Rule) -> None:
    anyio.run(rule.check, harness(s3, metadata_ttl=0.0), backend="trio")
