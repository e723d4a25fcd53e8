"""The ``s3`` layer of mount specs: checking (errors name file, key and problem) and building."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

import vfs
from mountd import _spec
from mountd._spec import S3Layer, SpecError, UnionLayer, parse_spec

from .conftest import Store


def parse(text: str, tmp_path: Path) -> _spec.Layer:
    return parse_spec(text, file="spec.toml", base_dir=tmp_path)


def test_an_s3_layer_parses_with_defaults(tmp_path: Path) -> None:
    layer = parse('[root]\ntype = "s3"\nbucket = "agentroot"\n', tmp_path)
    assert layer == S3Layer("agentroot")
    full = parse(
        """
        [root]
        type = "union"
        [root.mounts."/"]
        type = "s3"
        bucket = "agentroot"
        prefix = "agents/a1"
        endpoint = "http://127.0.0.1:8333"
        region = "eu-west-1"
        metadata_ttl = 2
        [root.mounts."/tmp"]
        type = "temp"
        """,
        tmp_path,
    )
    assert isinstance(full, UnionLayer)
    s3 = dict(full.mounts)["/"]
    assert s3 == S3Layer("agentroot", "agents/a1", "http://127.0.0.1:8333", "eu-west-1", 2.0)
    assert _spec.describe(full) == (
        "union(/ = s3 agentroot/agents/a1 at http://127.0.0.1:8333, /tmp = temp)"
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("", 'root: missing key "bucket" for a "s3" layer'),
        (
            'bucket = "Bad_Bucket"',
            'root.bucket: invalid bucket name "Bad_Bucket" (3 to 63 lowercase letters, digits,'
            " dots and hyphens)",
        ),
        ("bucket = 3", "root.bucket: expected a string, got integer 3"),
        (
            'bucket = "ok-bucket"\nprefix = "/agents/a1/"',
            'root.prefix: invalid prefix "/agents/a1/" (write it as "agents/a1")',
        ),
        (
            'bucket = "ok-bucket"\nendpoint = "127.0.0.1:8333"',
            'root.endpoint: expected a URL like "http://127.0.0.1:8333", got string'
            ' "127.0.0.1:8333"',
        ),
        (
            'bucket = "ok-bucket"\nmetadata_ttl = -1',
            "root.metadata_ttl: expected seconds (a number >= 0), got integer -1",
        ),
        (
            'bucket = "ok-bucket"\nmetadata_ttl = true',
            "root.metadata_ttl: expected seconds (a number >= 0), got boolean true",
        ),
        (
            'bucket = "ok-bucket"\naccess_key = "AKIA..."',
            'root.access_key: unknown key for a "s3" layer (expected one of: type, bucket,'
            " prefix, endpoint, region, metadata_ttl)",
        ),
    ],
)
def test_s3_errors_name_file_key_and_problem(tmp_path: Path, body: str, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse(f'[root]\ntype = "s3"\n{body}\n', tmp_path)
    assert str(caught.value) == f"spec.toml: {message}"


def test_a_built_s3_layer_is_the_bucket_under_the_prefix(
    s3: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Credentials come from the environment, as boto3 reads them."""
    for name, value in s3.server.credentials_env().items():
        monkeypatch.setenv(name, value)
    scope = s3.scope("spec")
    s3.client.put_object(Bucket=s3.bucket, Key=f"{scope}/hello.txt", Body=b"hi")
    layer = parse(
        f"""
        [root]
        type = "union"
        [root.mounts."/"]
        type = "s3"
        bucket = "{s3.bucket}"
        prefix = "{scope}"
        endpoint = "{s3.server.endpoint}"
        [root.mounts."/scratch"]
        type = "temp"
        """,
        tmp_path,
    )
    tree = _spec.build(layer)

    async def body() -> None:
        assert await tree.read("/hello.txt") == "hi"
        await tree.write("/new.txt", "durable")
        await tree.write("/scratch/local.txt", "scratch")
        assert [e.path async for e in tree.list("/")] == ["/hello.txt", "/new.txt", "/scratch"]

    anyio.run(body, backend="trio")
    stored = s3.client.list_objects_v2(Bucket=s3.bucket, Prefix=scope + "/")
    assert sorted(item["Key"] for item in stored["Contents"]) == [
        f"{scope}/hello.txt",
        f"{scope}/new.txt",
    ]
    assert isinstance(tree, vfs.Watchable)
