"""``S3HostFiles``: a :class:`vfs.HostFilesApi` over S3-compatible object storage (boto3).

Theory of operation
-------------------
*Layout.* A scope is a key prefix in one bucket (``"agents/a1"``; ``""`` is the whole bucket), so
the file ``/src/a.ts`` of scope ``agents/a1`` is the object ``agents/a1/src/a.ts``. Directories are
not stored: a directory is a prefix that some key lies under. When a name is both an object and a
prefix (another S3 client can make that), the object wins everywhere: ``list``, ``stat`` and
``read`` all see a file. Keys that no path can name (``a//b``, a segment over 255 bytes, ``.``)
are left out of listings. Keys are UTF-8 text, so a path holding a surrogate-escaped byte (a
host name that is not UTF-8) names no object: it is missing, and writing it is
``InvalidPathError``.

*Verbs and requests* (each blocking boto3 call runs in a worker thread, so an event loop, such as
the one serving a mount, never waits on the network):

- ``list``: ``ListObjectsV2`` with ``Delimiter="/"`` (every page); common prefixes are directories.
- ``stat``: one *probe*, ``ListObjectsV2(Prefix=key, Delimiter="/")``, which shows in one answer
  whether the key is an object (with size, etag, mtime) or a prefix or neither.
- ``read``: ``GetObject``; when bytes of the object are kept, ``If-None-Match: <their etag>``,
  and a 304 answers with the kept bytes.
- ``write``: ``PutObject`` with ``If-Match: <etag>`` for compare-and-swap and ``If-None-Match: *``
  for create-only. From ``multipart_threshold`` bytes on, a multipart upload whose
  ``CompleteMultipartUpload`` carries the precondition: parts are invisible until completion, so a
  failed or interrupted upload never shows, and the precondition is checked atomically at the end.
  An unconditional write first checks the path is not a directory and that no parent is a file
  (from the cache when it knows, else one probe per unknown level); when that finds no file
  there, the write is create-only, so a name another host created meanwhile is never replaced
  unseen (``ESTALE``; through a mount the kernel then looks the name up again and retries).
- ``delete``: ``DeleteObject`` with ``If-Match`` (or, with ``conditional_delete=False``, for stores
  that ignore it, a probe and compare first: best effort, a writer landing in between is lost).
  S3 deletes of missing keys succeed, so an unconditional delete probes first to raise
  ``FileNotFoundError``. Then the emptied parents are pruned: stores with real directories
  (SeaweedFS) keep a directory after its last object is gone, and here a directory exists only while
  something lies beneath it. Pruning deletes ``dir/`` only when a recursive listing under it is
  empty; a store refuses to delete a directory that is not empty.

*Preconditions.* A lost race (412 ``PreconditionFailed``, 409 ``ConditionalRequestConflict``, or 404
for ``If-Match`` on a key that is gone) is ``WriteFailedError`` with errno ``ESTALE``; a failed
create-only write has ``EEXIST``; the store being unreachable (or a 5xx) is ``WriteFailedError``
with ``EIO``: the write may or may not have landed. No write request is retried: a retried PUT
whose first attempt landed would fail its own precondition and report a lost race that was not one.
Read requests are retried once on a connection error (a pooled connection the store closed).

*Caching* (``vfs._s3_cache``, one per instance, shared by every scope): answers are valid for
``metadata_ttl`` seconds (0 asks the store every time); object bytes are kept (``cache_bytes``) and
revalidated with conditional GETs; our own writes and deletes update the cache at once (read your
writes). When the store cannot be reached, ``list``/``stat``/``read`` answer from what the cache
last saw, however old (stale-if-error), and raise ``PathError`` with ``EIO`` where it saw nothing.

*Changes seen.* When an answer shows that a file this instance knew has other bytes now (another
host wrote it), the watchers of every scope holding it get a ``vfs.Change(path, "content")`` whose
origin is this instance, never a mount's, so :func:`vfs.host_fs` forwards it and a mount drops the
pages and attributes the kernel cached. Names that appear or disappear are not reported (see
``docs/decisions/s3.md``).

*Credentials* come from boto3's usual chain (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, a
profile, an instance role) unless a ready ``client`` is given.
"""

from __future__ import annotations

import builtins
import errno
import functools
import importlib
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread

from ._errors import (
    DirectoryNotEmptyError,
    FileNotFoundError,
    InvalidPathError,
    IsADirectoryError,
    NotADirectoryError,
    PathError,
    PermissionDeniedError,
    WriteFailedError,
)
from ._host import HostEntry, HostFile
from ._paths import NAME_MAX, ROOT, base_name, normalize_path, printable
from ._s3_cache import (
    DIRECTORY_META,
    MISSING_META,
    Meta,
    StoreCache,
    ancestor_keys,
)
from ._types import Change, ChangeCallback

log = logging.getLogger("vfs.s3")

DEFAULT_PART_SIZE = 8 << 20
_LOST_RACE = (412, 409)


class _StoreAnswer(Exception):
    """The store answered with an error status (raised in the worker thread, mapped by verbs)."""

    def __init__(self, status: int, code: str, headers: Mapping[str, str]) -> None:
        super().__init__(f"{status} {code}")
        self.status = status
        self.code = code
        self.headers = headers


class _Unreachable(Exception):
    """No answer: the connection failed or broke, or the store answered 5xx."""


class S3HostFiles:
    """Durable files in an S3 bucket: one scope per key prefix (see the module docstring).

    ``S3HostFiles("agentroot", endpoint_url="http://127.0.0.1:8333")`` talks to a self-hosted store
    (path-style addressing); leave ``endpoint_url`` out for AWS. ``client`` is a ready boto3 S3
    client to use instead of making one (tests and benchmarks share one).
    """

    def __init__(
        self,
        bucket: str,
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        client: Any = None,
        metadata_ttl: float = 1.0,
        cache_bytes: int = 64 << 20,
        multipart_threshold: int = DEFAULT_PART_SIZE,
        part_size: int = DEFAULT_PART_SIZE,
        upload_concurrency: int = 4,
        conditional_delete: bool = True,
        connect_timeout: float = 5.0,
        read_timeout: float = 60.0,
    ) -> None:
        if metadata_ttl < 0:
            raise ValueError(f"metadata_ttl must be >= 0, not {metadata_ttl!r}")
        if part_size < 5 << 20:
            raise ValueError("part_size must be at least 5 MiB (the S3 minimum)")
        self.bucket = bucket
        self.endpoint_url = endpoint_url
        self.multipart_threshold = multipart_threshold
        self.part_size = part_size
        self.conditional_delete = conditional_delete
        self._upload_limiter = anyio.CapacityLimiter(upload_concurrency)
        self._cache = StoreCache(metadata_ttl, max_body_bytes=cache_bytes)
        self._watchers: list[tuple[str, ChangeCallback]] = []
        self._unreachable = False
        self._exceptions = importlib.import_module("botocore.exceptions")
        self._own_client = client is None
        self._client = (
            client
            if client is not None
            else _make_client(endpoint_url, region, connect_timeout, read_timeout)
        )
        _require_conditional_writes(self._client)

    def __repr__(self) -> str:
        where = f", endpoint_url={self.endpoint_url!r}" if self.endpoint_url else ""
        return f"S3HostFiles({self.bucket!r}{where})"

    @property
    def metadata_ttl(self) -> float:
        return self._cache.ttl

    def close(self) -> None:
        """Close the connection pool of the client this instance made (not a given one)."""
        if self._own_client:
            self._client.close()

    # --- watching ----------------------------------------------------------------------------

    def watch(self, scope: str, callback: ChangeCallback) -> Callable[[], None]:
        """Call ``callback`` with a ``content`` change for each file of ``scope`` that an answer
        of the store shows another writer changed. :func:`vfs.host_fs` subscribes here."""
        item = (_scope_key(scope), callback)
        self._watchers.append(item)

        def unsubscribe() -> None:
            if item in self._watchers:
                self._watchers.remove(item)

        return unsubscribe

    async def _report(self, keys: Sequence[str]) -> None:
        for key in keys:
            for scope, callback in list(self._watchers):
                path = _path_in(scope, key)
                if path is None:
                    continue
                pending = callback(Change(path, "content", origin=self))
                if pending is not None:
                    await pending

    # --- the five verbs ----------------------------------------------------------------------

    async def list(self, scope: str, path: str) -> Sequence[HostEntry]:
        path = normalize_path(path)
        if not _keyable(path):
            return []  # no object can have this name
        directory = _key(_scope_key(scope), path)
        children = self._cache.fresh_listing(directory)
        if children is None:
            ticket = self._cache.ticket()
            try:
                children = await self._ask(self._list_sync, directory, retry=True)
            except _Unreachable:
                children = self._cache.known_listing(directory)
                if children is None:
                    raise PathError(path, errno=errno.EIO) from None
            except _StoreAnswer as answer:
                raise _read_error(path, answer) from None
            else:
                await self._report(self._cache.observe_listing(directory, children, ticket))
        return [_entry(name, meta) for name, meta in sorted(children.items())]

    async def stat(self, scope: str, path: str) -> HostEntry | None:
        path = normalize_path(path)
        if path == ROOT:
            return HostEntry("", "directory")
        if not _keyable(path):
            return None
        meta = await self._meta(path, _key(_scope_key(scope), path))
        return None if meta.kind == "missing" else _entry(base_name(path), meta)

    async def read(self, scope: str, path: str) -> HostFile:
        path = normalize_path(path)
        if path == ROOT:
            raise IsADirectoryError(path)
        if not _keyable(path):
            raise FileNotFoundError(path)
        key = _key(_scope_key(scope), path)
        known = self._cache.fresh(key)
        kept = self._cache.body(key)
        if known is not None and known.kind != "file":
            raise _not_a_file(path, known)
        if known is not None and kept is not None and kept[0] == known.etag:
            return HostFile(kept[1], kept[0])
        ticket = self._cache.ticket()
        try:
            data, meta = await self._ask(self._get_sync, key, kept, retry=True)
        except _Unreachable:
            if kept is None:
                raise PathError(path, errno=errno.EIO) from None
            return HostFile(kept[1], kept[0])  # stale, but the store cannot say otherwise now
        except _StoreAnswer as answer:
            if answer.status == 304 and kept is not None:
                before = self._cache.known(key)
                meta = Meta("file", len(kept[1]), _mtime_304(answer, before, kept[0]), kept[0])
                await self._report([key] if self._cache.observe(key, meta, ticket) else [])
                return HostFile(kept[1], kept[0])
            if answer.status != 404:
                raise _read_error(path, answer) from None
            self._cache.observe(key, MISSING_META, ticket)
            raise _not_a_file(path, await self._meta(path, key, cached=False)) from None
        await self._report([key] if self._cache.observe(key, meta, ticket) else [])
        assert meta.etag is not None
        self._cache.keep_body(key, meta.etag, data)
        return HostFile(data, meta.etag)

    async def write(
        self,
        scope: str,
        path: str,
        content: bytes,
        *,
        if_match: str | None = None,
        if_none_match: bool = False,
    ) -> str:
        path = normalize_path(path)
        if path == ROOT:
            raise IsADirectoryError(path)
        if not _keyable(path):
            raise InvalidPathError(printable(path), _NOT_KEYABLE)
        scope_key = _scope_key(scope)
        key = _key(scope_key, path)
        data = bytes(content)
        # A compare-and-swap names an existing file; anything else may be a new name. A write
        # of a name believed new is create-only: if another host made it meanwhile, this write
        # must not replace what nobody here has seen (it fails with ESTALE instead).
        new = if_match is None and await self._check_writable(scope_key, path, key)
        conditions: dict[str, str] = {}
        if if_match is not None:
            conditions["IfMatch"] = if_match
        if if_none_match or new:
            conditions["IfNoneMatch"] = "*"
        ticket = self._cache.ticket()
        try:
            if len(data) >= self.multipart_threshold:
                etag = await self._put_multipart(key, data, conditions)
            else:
                answer = await self._ask(self._put_sync, key, data, conditions)
                etag = str(answer["ETag"])
        except _StoreAnswer as answer:
            self._cache.unsure(key)
            lost = answer.status in _LOST_RACE or (answer.status == 404 and if_match is not None)
            if lost:
                code = errno.EEXIST if if_none_match else errno.ESTALE
                raise WriteFailedError(path, errno=code) from None
            raise _write_error(path, answer) from None
        except _Unreachable:
            self._cache.unsure(key)
            raise WriteFailedError(path) from None
        self._cache.wrote(key, Meta("file", len(data), _now_ns(), etag), ticket)
        self._cache.keep_body(key, etag, data)
        return etag

    async def delete(self, scope: str, path: str, *, if_match: str | None = None) -> None:
        path = normalize_path(path)
        if path == ROOT:
            raise DirectoryNotEmptyError(path)
        if not _keyable(path):
            raise FileNotFoundError(path)
        scope_key = _scope_key(scope)
        key = _key(scope_key, path)
        ticket = self._cache.ticket()
        if if_match is not None and self.conditional_delete:
            try:
                await self._ask(self._delete_sync, key, if_match)
            except _StoreAnswer as answer:
                self._cache.unsure(key)
                if answer.status not in (*_LOST_RACE, 404):
                    raise _write_error(path, answer) from None
                meta = await self._meta(path, key, cached=False, writing=True)
                if meta.kind != "file":
                    raise _not_a_file(path, meta, deleting=True) from None
                raise WriteFailedError(path, errno=errno.ESTALE) from None
            except _Unreachable:
                self._cache.unsure(key)
                raise WriteFailedError(path) from None
        else:
            meta = await self._meta(path, key, cached=False, writing=True)
            if meta.kind != "file":
                raise _not_a_file(path, meta, deleting=True)
            if if_match is not None and meta.etag != if_match:
                raise WriteFailedError(path, errno=errno.ESTALE)
            try:
                await self._ask(self._delete_sync, key, None)
            except _StoreAnswer as answer:
                self._cache.unsure(key)
                raise _write_error(path, answer) from None
            except _Unreachable:
                self._cache.unsure(key)
                raise WriteFailedError(path) from None
        self._cache.removed(key, ticket)
        await self._prune(scope_key, key)

    # --- helpers of the verbs ----------------------------------------------------------------

    async def _meta(
        self, path: str, key: str, *, cached: bool = True, writing: bool = False
    ) -> Meta:
        """What ``key`` is: from the cache while valid (``cached``), else one probe.

        ``writing``: the probe checks a write or delete, which fails (``WriteFailedError``) when
        the store cannot answer, instead of going on with what the cache last saw.
        """
        if cached:
            known = self._cache.fresh(key)
            if known is not None:
                return known
        ticket = self._cache.ticket()
        try:
            meta: Meta = await self._ask(self._probe_sync, key, retry=True)
        except _Unreachable:
            known = None if writing else self._cache.known(key)
            if known is None:
                raise (WriteFailedError if writing else PathError)(path, errno=errno.EIO) from None
            return known
        except _StoreAnswer as answer:
            raise (_write_error if writing else _read_error)(path, answer) from None
        await self._report([key] if self._cache.observe(key, meta, ticket) else [])
        return meta

    async def _check_writable(self, scope_key: str, path: str, key: str) -> bool:
        """Refuse a write onto a directory or beneath a file (``HostFilesApi``'s rule); whether
        the name is new (as far as the cache or a probe can tell)."""
        meta = await self._meta(path, key, writing=True)
        if meta.kind == "directory":
            raise IsADirectoryError(path)
        if meta.kind == "file":
            return False  # an existing file: its parents are directories
        for directory in ancestor_keys(key):
            if directory == scope_key or not directory.startswith(scope_key):
                break
            found = await self._meta(path, directory, writing=True)
            if found.kind == "directory":
                break
            if found.kind == "file":
                raise NotADirectoryError(path)
        return True

    async def _put_multipart(self, key: str, data: bytes, conditions: dict[str, str]) -> str:
        upload = (await self._ask(self._create_upload_sync, key))["UploadId"]
        try:
            parts: list[dict[str, Any]] = []
            failures: list[_StoreAnswer | _Unreachable] = []
            async with anyio.create_task_group() as group:
                for number, start in enumerate(range(0, len(data), self.part_size), start=1):
                    chunk = data[start : start + self.part_size]
                    group.start_soon(
                        self._upload_part, key, upload, number, chunk, parts, failures, group
                    )
            if failures:
                raise failures[0]
            parts.sort(key=lambda part: int(part["PartNumber"]))
            answer = await self._ask(self._complete_upload_sync, key, upload, parts, conditions)
            return str(answer["ETag"])
        except BaseException:
            with anyio.CancelScope(shield=True):
                try:
                    await self._ask(self._abort_upload_sync, key, upload)
                except (_StoreAnswer, _Unreachable) as error:
                    # Parts of an upload never completed are invisible; a bucket lifecycle rule
                    # (AbortIncompleteMultipartUpload) reclaims their space.
                    log.warning("could not abort multipart upload of %s: %s", key, error)
            raise

    async def _upload_part(
        self,
        key: str,
        upload: str,
        number: int,
        chunk: bytes,
        parts: builtins.list[dict[str, Any]],
        failures: builtins.list[_StoreAnswer | _Unreachable],
        group: anyio.abc.TaskGroup,
    ) -> None:
        """Upload one part; a failure is recorded (not raised: the caller maps it like any
        other request's) and stops the other parts."""
        call = functools.partial(self._upload_part_sync, key, upload, number, chunk)
        try:
            etag = await anyio.to_thread.run_sync(self._guarded, call, limiter=self._upload_limiter)
        except (_StoreAnswer, _Unreachable) as error:
            failures.append(error)
            group.cancel_scope.cancel()
            return
        parts.append({"PartNumber": number, "ETag": etag})

    async def _prune(self, scope_key: str, key: str) -> None:
        """Remove the directories a delete emptied (see the module docstring)."""
        for directory in ancestor_keys(key):
            if directory == scope_key or not directory.startswith(scope_key):
                return
            ticket = self._cache.ticket()
            try:
                if not await self._ask(self._is_empty_sync, directory):
                    return
                await self._ask(self._delete_sync, directory + "/", None)
            except (_StoreAnswer, _Unreachable) as error:
                log.warning("could not prune the emptied directory %s: %s", directory, error)
                return
            self._cache.removed(directory, ticket)

    # --- requests (worker threads) -----------------------------------------------------------

    async def _ask(self, call: Callable[..., Any], *args: Any, retry: bool = False) -> Any:
        """Run one blocking request in a worker thread; ``retry`` once on a broken connection."""
        bound = functools.partial(call, *args)
        for attempt in range(2 if retry else 1):
            try:
                result = await anyio.to_thread.run_sync(self._guarded, bound)
            except _Unreachable:
                if attempt or not retry:
                    self._note_reachable(False)
                    raise
            except _StoreAnswer:
                self._note_reachable(True)
                raise
            else:
                self._note_reachable(True)
                return result
        raise AssertionError("unreachable")  # pragma: no cover

    def _note_reachable(self, reachable: bool) -> None:
        """Log once when the store stops answering, and once when it answers again."""
        if reachable == self._unreachable:
            self._unreachable = not reachable
            where = self.endpoint_url or self.bucket
            if reachable:
                log.warning("S3 store %s is reachable again", where)
            else:
                log.warning("S3 store %s is unreachable: answering from the cache", where)

    def _guarded(self, call: Callable[[], Any]) -> Any:
        """Turn boto3's exceptions into :class:`_StoreAnswer` / :class:`_Unreachable`."""
        exceptions = self._exceptions
        try:
            return call()
        except exceptions.ClientError as error:
            response = error.response
            status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
            if status >= 500:
                raise _Unreachable(str(error)) from None
            headers = response.get("ResponseMetadata", {}).get("HTTPHeaders", {})
            code = str(response.get("Error", {}).get("Code", status))
            raise _StoreAnswer(status, code, headers) from None
        except exceptions.NoCredentialsError as error:
            raise _StoreAnswer(403, "NoCredentials", {}) from error
        except (
            exceptions.ConnectionError,
            exceptions.HTTPClientError,
            exceptions.IncompleteReadError,
        ) as error:
            raise _Unreachable(str(error)) from None

    def _list_sync(self, directory: str) -> dict[str, Meta]:
        prefix = directory + "/" if directory else ""
        files: dict[str, Meta] = {}
        dirs: set[str] = set()
        for page in self._pages(Prefix=prefix, Delimiter="/"):
            for item in page.get("Contents", ()):
                name = item["Key"][len(prefix) :]
                if _is_name(name):
                    files[name] = _file_meta(item)
            for item in page.get("CommonPrefixes", ()):
                name = item["Prefix"][len(prefix) : -1]
                if _is_name(name):
                    dirs.add(name)
        children: dict[str, Meta] = {name: DIRECTORY_META for name in dirs}
        children.update(files)  # an object wins over a prefix of the same name
        return children

    def _probe_sync(self, key: str) -> Meta:
        marker = key + "/"
        for page in self._pages(Prefix=key, Delimiter="/"):
            contents = page.get("Contents", ())
            if contents and contents[0]["Key"] == key:
                return _file_meta(contents[0])  # the key itself sorts first
            if any(item["Prefix"] == marker for item in page.get("CommonPrefixes", ())):
                return DIRECTORY_META
            last = max(
                [item["Key"] for item in contents]
                + [item["Prefix"] for item in page.get("CommonPrefixes", ())],
                default="",
            )
            if last > marker:
                break
        return MISSING_META

    def _pages(self, **params: Any) -> Iterator[dict[str, Any]]:
        token: str | None = None
        while True:
            extra = {"ContinuationToken": token} if token else {}
            page: dict[str, Any] = self._client.list_objects_v2(
                Bucket=self.bucket, **params, **extra
            )
            yield page
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return

    def _is_empty_sync(self, directory: str) -> bool:
        page = self._client.list_objects_v2(Bucket=self.bucket, Prefix=directory + "/", MaxKeys=1)
        return not page.get("Contents")

    def _get_sync(self, key: str, kept: tuple[str, bytes] | None) -> tuple[bytes, Meta]:
        extra = {"IfNoneMatch": kept[0]} if kept is not None else {}
        answer = self._client.get_object(Bucket=self.bucket, Key=key, **extra)
        body = answer["Body"]
        try:
            data: bytes = body.read()
        finally:
            body.close()
        etag = str(answer["ETag"])
        return data, Meta("file", len(data), _ns(answer["LastModified"]), etag)

    def _put_sync(self, key: str, data: bytes, conditions: dict[str, str]) -> dict[str, Any]:
        answer: dict[str, Any] = self._client.put_object(
            Bucket=self.bucket, Key=key, Body=data, **conditions
        )
        return answer

    def _delete_sync(self, key: str, if_match: str | None) -> None:
        extra = {"IfMatch": if_match} if if_match is not None else {}
        self._client.delete_object(Bucket=self.bucket, Key=key, **extra)

    def _create_upload_sync(self, key: str) -> dict[str, Any]:
        answer: dict[str, Any] = self._client.create_multipart_upload(Bucket=self.bucket, Key=key)
        return answer

    def _upload_part_sync(self, key: str, upload: str, number: int, chunk: bytes) -> str:
        answer = self._client.upload_part(
            Bucket=self.bucket, Key=key, UploadId=upload, PartNumber=number, Body=chunk
        )
        return str(answer["ETag"])

    def _complete_upload_sync(
        self,
        key: str,
        upload: str,
        parts: builtins.list[dict[str, Any]],
        conditions: dict[str, str],
    ) -> dict[str, Any]:
        answer: dict[str, Any] = self._client.complete_multipart_upload(
            Bucket=self.bucket,
            Key=key,
            UploadId=upload,
            MultipartUpload={"Parts": parts},
            **conditions,
        )
        return answer

    def _abort_upload_sync(self, key: str, upload: str) -> None:
        self._client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload)


# --- pure helpers ------------------------------------------------------------------------------


def _make_client(
    endpoint_url: str | None, region: str | None, connect_timeout: float, read_timeout: float
) -> Any:
    boto3 = importlib.import_module("boto3")
    config = importlib.import_module("botocore.config").Config(
        retries={"total_max_attempts": 1},  # see the module docstring: writes are never retried
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        max_pool_connections=32,
        s3={"addressing_style": "path"} if endpoint_url else {},
    )
    session = boto3.session.Session()
    return session.client("s3", endpoint_url=endpoint_url, region_name=region, config=config)


def _require_conditional_writes(client: Any) -> None:
    """Refuse a botocore too old to send ``If-Match`` on writes (it would reject the parameter
    on every compare-and-swap, long after the tree was built)."""
    model = client.meta.service_model
    for operation in ("PutObject", "CompleteMultipartUpload", "DeleteObject"):
        if "IfMatch" not in model.operation_model(operation).input_shape.members:
            version = importlib.import_module("botocore").__version__
            raise RuntimeError(
                f"S3HostFiles needs boto3 >= 1.36 for conditional writes ({operation} has no "
                f"IfMatch in botocore {version})"
            )


def _scope_key(scope: str) -> str:
    """The key prefix of a scope: ``"agents/a1/"`` and ``"/agents/a1"`` are ``"agents/a1"``."""
    return normalize_path(scope)[1:]


def _key(scope_key: str, path: str) -> str:
    """The object key of a normalized path within a scope (the scope's root is ``scope_key``)."""
    if path == ROOT:
        return scope_key
    return scope_key + path if scope_key else path[1:]


_NOT_KEYABLE = "an S3 object key is UTF-8 text, and this name holds bytes that are not UTF-8"


def _keyable(path: str) -> bool:
    """Whether a path can be an object key: keys are UTF-8, so a surrogate-escaped byte of a
    host name that is not UTF-8 cannot be in one (such a path is missing; writing it is
    ``InvalidPathError``)."""
    return path.isascii() or printable(path) == path


def _path_in(scope_key: str, key: str) -> str | None:
    """The path of ``key`` within a scope, or None when it lies outside."""
    if not scope_key:
        return "/" + key if key else ROOT
    if key == scope_key:
        return ROOT
    if key.startswith(scope_key + "/"):
        return key[len(scope_key) :]
    return None


def _is_name(name: str) -> bool:
    """A key segment that a path can name (what ``normalize_path`` keeps as one segment)."""
    return (
        bool(name)
        and name not in (".", "..")
        and "/" not in name
        and "\0" not in name
        and len(name.encode("utf-8", "surrogateescape")) <= NAME_MAX
    )


def _entry(name: str, meta: Meta) -> HostEntry:
    if meta.kind == "file":
        return HostEntry(name, "file", meta.size, meta.mtime_ns, meta.etag)
    return HostEntry(name, "directory")


def _file_meta(item: Mapping[str, Any]) -> Meta:
    return Meta("file", int(item["Size"]), _ns(item["LastModified"]), str(item["ETag"]))


def _ns(moment: datetime) -> int:
    return int(moment.timestamp()) * 1_000_000_000


def _now_ns() -> int:
    # What the store will report as LastModified: whole seconds.
    return time.time_ns() // 1_000_000_000 * 1_000_000_000


def _mtime_304(answer: _StoreAnswer, before: Meta | None, etag: str) -> int:
    header = answer.headers.get("last-modified")
    if header:
        return _ns(parsedate_to_datetime(header))
    return before.mtime_ns if before is not None and before.etag == etag else 0


def _not_a_file(path: str, meta: Meta, *, deleting: bool = False) -> PathError:
    """The error for reading (or deleting) ``path`` when it is a directory or nothing."""
    if meta.kind == "directory":
        return DirectoryNotEmptyError(path) if deleting else IsADirectoryError(path)
    return FileNotFoundError(path)


def _read_error(path: str, answer: _StoreAnswer) -> PathError:
    if answer.status == 403:
        return PermissionDeniedError(path)
    log.warning("S3 answered %s %s for %s", answer.status, answer.code, path)
    return PathError(path, errno=errno.EIO)


def _write_error(path: str, answer: _StoreAnswer) -> PathError:
    if answer.status == 403:
        return PermissionDeniedError(path)
    log.warning("S3 answered %s %s writing %s", answer.status, answer.code, path)
    return WriteFailedError(path)
