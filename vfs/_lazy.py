"""Names a package exports without importing their modules until first use.

``mountd run`` is a short-lived process whose start-up is mostly imports; trees it never builds
(the host-files and S3 trees, ``overlay_fs``, the host disk) need not cost it anything. A package
lists such names with the module that defines each; :func:`lazy_names` makes its module
``__getattr__`` (PEP 562), which imports the module on the first lookup of one of them and stores
the value in the package, so later lookups are plain attribute reads. Static checkers see the
names through the package's ``if TYPE_CHECKING:`` imports.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Mapping
from typing import Any


def publish(value: object, module: str) -> None:
    """Name ``module`` as where ``value`` (an export of a public module, defined in a private
    ``vfs._*`` one) lives: in tracebacks, reprs and docs, as trio does."""
    if getattr(value, "__module__", "").startswith("vfs._"):
        with contextlib.suppress(AttributeError, TypeError):  # (a typing alias)
            value.__module__ = module


def lazy_names(
    namespace: dict[str, Any], package: str, names: Mapping[str, str]
) -> Callable[[str], Any]:
    """The ``__getattr__`` of the module whose globals are ``namespace`` (named ``package``):
    ``names`` maps each lazy name to the module (relative to ``vfs``) that defines it."""

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, "vfs"), name)
        publish(value, package)
        namespace[name] = value
        return value

    return __getattr__
