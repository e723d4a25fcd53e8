"""How file bytes become what ``read`` returns, and back.

``read`` answers text as ``str`` and images (jpeg, png, gif, webp, told by extension) as
``bytes``. Text that is not valid UTF-8 is decoded with replacement characters, never refused;
the exact bytes stay reachable through the POSIX layer (``OpenFile.read``).
"""

from __future__ import annotations

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".gif", ".webp"})


def is_image_path(path: str) -> bool:
    name = path.rsplit("/", 1)[-1].lower()
    dot = name.rfind(".")
    return dot > 0 and name[dot:] in IMAGE_SUFFIXES


def decode_contents(path: str, data: bytes) -> str | bytes:
    """What ``read`` returns for a file holding ``data``."""
    if is_image_path(path):
        return bytes(data)
    return bytes(data).decode("utf-8", "replace")


def encode_contents(contents: str | bytes | bytearray | memoryview) -> bytes:
    """The bytes ``write`` stores for ``contents`` (text is stored as UTF-8)."""
    if isinstance(contents, str):
        return contents.encode("utf-8", "surrogateescape")
    if isinstance(contents, (bytes, bytearray, memoryview)):
        return bytes(contents)
    raise TypeError(f"contents must be str or bytes, not {type(contents).__name__}")


def contents_for(path: str, data: bytes) -> str | bytes:
    """What to hand ``write`` for a file that should hold exactly ``data``: text when the bytes
    are UTF-8 and the path is not an image (an eight-verb tree then stores ``str`` as it always
    does), else the bytes themselves."""
    if is_image_path(path):
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data


def looks_binary(data: bytes) -> bool:
    """Whether grep should skip these bytes, as ripgrep does: a NUL in the first 8 KiB."""
    return b"\0" in data[:8192]
