"""What an :class:`vfs.S3HostFiles` knows about its bucket: per-key metadata, listings and bodies.

Theory of operation
-------------------
Pure bookkeeping: no I/O, synchronous, one lock (so a store shared by threads or event loops
stays consistent). Keys are S3 object keys without a trailing slash; a directory is the key of
its prefix (``"scope/src"`` for ``scope/src/...``); the bucket's root is ``""``.

*Tickets order what the store said.* Every request is bracketed: :meth:`StoreCache.ticket` before
it is sent (an ``issued`` sequence number and the monotonic time), and the answer is recorded with
that ticket, which gives it a ``completed`` number. An answer is *newer* than the cached one when its
request was issued after the cached answer was recorded. Otherwise the two requests overlapped and
either answer may be the store's latest state: the cache keeps the answer of our own write if one of
them is (the write landed inside that window; a slow GET never undoes the PUT that overtook it),
else the new one, and marks the entry *stale* so that the next access asks the store again.

*Validity and retention are separate.* An entry answers without a request while its ticket is at
most ``ttl`` seconds old (the ticket's time is when the request was sent, so an answer is never
trusted for longer than ``ttl`` after the store was asked). Past that it is kept (bounded, least
recently used first out) for two purposes: to notice changes, and to answer when the store cannot
be reached (:meth:`StoreCache.known`, stale-if-error).

*Changes.* When a newer (or overlapping) answer for a key that was a file shows another etag, and
the answer is not our own write, the file was changed by another writer: :meth:`observe` returns
True and the caller reports a ``content`` change. Appearing and disappearing names are not reported
(see ``docs/decisions/s3.md``: the kernel only caches those for its short entry timeouts, and
invalidating a name needs the directory's lock, which a lookup in flight holds).

*Listings.* A directory's listing (child name -> kind) also has a ticket. While it is valid it
answers ``list`` and says that a name absent from it is missing (negative lookups cost nothing
after a ``readdir``), unless the cache learned about that name after the listing. Our own writes
and deletes edit the cached listings of their ancestors, so a listing stays exact.

*Bodies.* Object bytes are kept with their etag, bounded by total size, least recently used first
out. A body is self-validating: the store is asked with ``If-None-Match: <etag>`` and a 304 means
the kept bytes are current.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Literal

Kind = Literal["file", "directory", "missing"]

_STALE = float("-inf")


@dataclass(frozen=True, slots=True)
class Meta:
    """What the store said a key is. Files carry size, mtime (ns) and etag."""

    kind: Kind
    size: int = 0
    mtime_ns: int = 0
    etag: str | None = None


MISSING_META = Meta("missing")
DIRECTORY_META = Meta("directory")


@dataclass(frozen=True, slots=True)
class Ticket:
    """Taken just before a request is sent: its place in the issue order and the time."""

    issued: int
    at: float


@dataclass(frozen=True, slots=True)
class _Entry:
    meta: Meta
    issued: int
    completed: int
    at: float  # validity clock: the ticket's time, or -inf once stale
    wrote: bool  # the answer of our own write or delete


@dataclass(slots=True)
class _Listing:
    names: dict[str, Kind]
    issued: int
    completed: int
    at: float


def parent_key(key: str) -> str:
    """The key of the directory holding ``key`` (``""`` at the top)."""
    return key.rpartition("/")[0]


def child_key(directory: str, name: str) -> str:
    return f"{directory}/{name}" if directory else name


def ancestor_keys(key: str) -> Iterator[str]:
    """The directories above ``key``, nearest first, ending with the bucket's root ``""``."""
    while key:
        key = parent_key(key)
        yield key


class StoreCache:
    """Metadata, listings and bodies of one store (see the module docstring)."""

    def __init__(
        self,
        ttl: float,
        *,
        max_entries: int = 200_000,
        max_listings: int = 20_000,
        max_body_bytes: int = 64 << 20,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl = ttl
        self._clock = clock
        self._seq = itertools.count(1)
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._listings: OrderedDict[str, _Listing] = OrderedDict()
        self._bodies: OrderedDict[str, tuple[str, bytes]] = OrderedDict()
        self._body_bytes = 0
        self._max_entries = max_entries
        self._max_listings = max_listings
        self._max_body_bytes = max_body_bytes

    def ticket(self) -> Ticket:
        with self._lock:
            return Ticket(next(self._seq), self._clock())

    # --- metadata ----------------------------------------------------------------------------

    def fresh(self, key: str) -> Meta | None:
        """What ``key`` is, when the cache may answer without asking the store."""
        with self._lock:
            now = self._clock()
            entry = self._entries.get(key)
            if entry is not None and self._valid(entry.at, now):
                self._entries.move_to_end(key)
                return entry.meta
            listing = self._listings.get(parent_key(key)) if key else None
            if listing is None or not self._valid(listing.at, now):
                return None
            name = key.rpartition("/")[2]
            if name in listing.names:
                return None  # listed, but the details were evicted or went stale
            if entry is not None and entry.issued > listing.completed:
                return None  # learned about after the listing: the listing cannot tell
            return MISSING_META

    def known(self, key: str) -> Meta | None:
        """The last answer about ``key``, however old (to answer while the store is down)."""
        with self._lock:
            entry = self._entries.get(key)
            return None if entry is None else entry.meta

    def observe(self, key: str, meta: Meta, ticket: Ticket, *, wrote: bool = False) -> bool:
        """Record an answer about ``key``; True when it shows another writer changed a file."""
        with self._lock:
            return self._observe(key, meta, ticket, next(self._seq), wrote)

    def _observe(self, key: str, meta: Meta, ticket: Ticket, completed: int, wrote: bool) -> bool:
        new = _Entry(meta, ticket.issued, completed, ticket.at, wrote)
        old = self._entries.get(key)
        changed = False
        if old is None or ticket.issued > old.completed:
            changed = old is not None and not wrote and _other_bytes(old.meta, meta)
        else:
            # Overlapping answers: either may be the latest. A write is known to have landed in
            # the window, so its answer is kept; a difference between two reads is a change.
            if old.wrote and not wrote:
                new = old
            else:
                changed = not wrote and not old.wrote and _other_bytes(old.meta, meta)
            new = _Entry(new.meta, min(old.issued, new.issued), completed, _STALE, new.wrote)
        self._entries[key] = new
        self._entries.move_to_end(key)
        self._drop_body_unless(key, new.meta.etag if new.meta.kind == "file" else None)
        while len(self._entries) > self._max_entries:
            self._entries.popitem(last=False)
        return changed

    def unsure(self, key: str) -> None:
        """The outcome of a request about ``key`` is unknown: ask the store next time."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries[key] = _Entry(
                    entry.meta, entry.issued, entry.completed, _STALE, entry.wrote
                )
            listing = self._listings.get(parent_key(key))
            if listing is not None:
                listing.at = _STALE

    # --- our own writes and deletes -----------------------------------------------------------

    def wrote(self, key: str, meta: Meta, ticket: Ticket) -> None:
        """Our write of ``key`` succeeded: it is this file now, and its ancestors are directories."""
        with self._lock:
            completed = next(self._seq)
            self._observe(key, meta, ticket, completed, True)
            name_kind: tuple[str, Kind] = (key.rpartition("/")[2], "file")
            for directory in ancestor_keys(key):
                listing = self._listings.get(directory)
                if listing is not None:
                    listing.names[name_kind[0]] = name_kind[1]
                if directory:
                    self._observe(directory, DIRECTORY_META, ticket, completed, True)
                    name_kind = (directory.rpartition("/")[2], "directory")

    def removed(self, key: str, ticket: Ticket) -> None:
        """Our delete of ``key`` (a file, or an emptied directory we pruned) succeeded."""
        with self._lock:
            self._observe(key, MISSING_META, ticket, next(self._seq), True)
            listing = self._listings.get(parent_key(key))
            if listing is not None:
                listing.names.pop(key.rpartition("/")[2], None)
            self._listings.pop(key, None)

    # --- listings -----------------------------------------------------------------------------

    def fresh_listing(self, directory: str) -> dict[str, Meta] | None:
        """The children of ``directory`` when a valid listing has them all, else None."""
        with self._lock:
            listing = self._listings.get(directory)
            if listing is None or not self._valid(listing.at, self._clock()):
                return None
            self._listings.move_to_end(directory)
            return self._children(directory, listing)

    def known_listing(self, directory: str) -> dict[str, Meta] | None:
        """The last listing of ``directory``, however old (to answer while the store is down)."""
        with self._lock:
            listing = self._listings.get(directory)
            return None if listing is None else self._children(directory, listing)

    def _children(self, directory: str, listing: _Listing) -> dict[str, Meta] | None:
        children: dict[str, Meta] = {}
        for name in listing.names:
            entry = self._entries.get(child_key(directory, name))
            if entry is None:
                return None  # evicted: the listing alone has no sizes or etags
            if entry.meta.kind != "missing":
                children[name] = entry.meta
        return children

    def observe_listing(
        self, directory: str, children: Mapping[str, Meta], ticket: Ticket
    ) -> list[str]:
        """Record a listing of ``directory``; the keys of files another writer changed."""
        with self._lock:
            completed = next(self._seq)
            old = self._listings.get(directory)
            overlapped = old is not None and ticket.issued <= old.completed
            changed = [
                child_key(directory, name)
                for name, meta in children.items()
                if self._observe(child_key(directory, name), meta, ticket, completed, False)
            ]
            if old is not None:
                for name in old.names.keys() - children.keys():
                    self._observe(
                        child_key(directory, name), MISSING_META, ticket, completed, False
                    )
            names = {name: meta.kind for name, meta in children.items()}
            at = _STALE if overlapped else ticket.at
            self._listings[directory] = _Listing(names, ticket.issued, completed, at)
            self._listings.move_to_end(directory)
            while len(self._listings) > self._max_listings:
                self._listings.popitem(last=False)
            return changed

    # --- bodies -------------------------------------------------------------------------------

    def body(self, key: str) -> tuple[str, bytes] | None:
        """The kept bytes of ``key`` and their etag."""
        with self._lock:
            found = self._bodies.get(key)
            if found is not None:
                self._bodies.move_to_end(key)
            return found

    def keep_body(self, key: str, etag: str, data: bytes) -> None:
        """Keep ``data`` (the bytes whose etag is ``etag``) unless it would fill the cache."""
        with self._lock:
            self._drop_body_unless(key, None)
            if len(data) > self._max_body_bytes // 4:
                return
            self._bodies[key] = (etag, data)
            self._body_bytes += len(data)
            while self._body_bytes > self._max_body_bytes:
                _, (_, evicted) = self._bodies.popitem(last=False)
                self._body_bytes -= len(evicted)

    def _drop_body_unless(self, key: str, etag: str | None) -> None:
        found = self._bodies.get(key)
        if found is not None and found[0] != etag:
            del self._bodies[key]
            self._body_bytes -= len(found[1])

    def _valid(self, at: float, now: float) -> bool:
        return now - at <= self.ttl


def _other_bytes(old: Meta, new: Meta) -> bool:
    """Both are files and their etags differ: somebody wrote other bytes."""
    return old.kind == "file" and new.kind == "file" and old.etag != new.etag
