"""Finding a backend by name, lazily (no backend library is imported until asked for).

Names resolve in this order:
1. built-in names: ``numpy`` (the oracle), ``torch``, ``torch:cuda``, ``torch:triton`` (the torch
   adapter's fused Triton kernel on CUDA), ``torch:cpp`` (its one-pass C++ kernel on CPU), ``cupy``,
   ``array-api:<module>``;
2. ``module:attr`` (``attr`` is a :class:`~rope_ref.conformance.protocol.Backend` subclass, an
   instance, or a factory called as ``factory(precision=...)``). If ``module`` cannot be found on
   ``sys.path``, the current working directory is added to the front of ``sys.path`` (as ``python -m``
   does) and the import is retried, so ``--backend my_backend:MyBackend`` finds ``./my_backend.py``
   under ``rope-ref conformance run`` and under ``pytest --pyargs rope_ref.conformance`` alike;
   ``path/to/file.py:attr`` imports that file (its folder first on ``sys.path``); a missing file or
   attribute is a one-line error;
3. the entry-point group ``rope_ref.backends`` (the entry's name is the backend name).

Each built-in lives in a module exposing ``make_backend(precision=None, **options)`` and
``available() -> (bool, reason)``.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
from importlib import metadata
from typing import Any

from .protocol import Backend, BackendUnavailable

__all__ = ["get_backend", "builtin_names", "BackendUnavailable", "BackendNotFound", "ENTRY_POINT_GROUP"]

ENTRY_POINT_GROUP = "rope_ref.backends"

# name -> (module, options passed to make_backend)
_BUILTINS: dict[str, tuple[str, dict[str, Any]]] = {
    "numpy": ("rope_ref.conformance.oracle_backend", {}),
    "torch": ("rope_ref.backends.torch", {"device": "cpu"}),
    "torch:cuda": ("rope_ref.backends.torch", {"device": "cuda"}),
    "torch:triton": ("rope_ref.backends.torch", {"device": "cuda", "kernel": "triton"}),
    "torch:cpp": ("rope_ref.backends.torch", {"device": "cpu", "kernel": "cpp"}),
    "cupy": ("rope_ref.backends.cupy", {}),
}
_ARRAY_API_PREFIX = "array-api:"
#: The peers (a floor above the suite) are plugins found by name, like the built-in backends above and the
#: entry points below: the registry resolves names at run time and imports nothing of theirs.
PEERS_PACKAGE = "rope_ref.peers"


def builtin_names() -> list[str]:
    """Built-in backend names (``array-api:<module>`` is a pattern, listed as such), then the peers."""
    return list(_BUILTINS) + [_ARRAY_API_PREFIX + "<module>"] + list(_peer_names())


def _peer_names() -> tuple[str, ...]:
    """Names of the built-in peer adapters (``rope_ref.peers``: other projects' RoPE under test)."""
    try:
        peers = importlib.import_module(PEERS_PACKAGE)
    except ImportError:
        return ()
    return tuple(peers.PEERS)


def _from_module(module_name: str, options: dict[str, Any], precision: str | None) -> Backend:
    module = importlib.import_module(module_name)
    available = getattr(module, "available", None)
    if available is not None:
        ok, reason = available(**options)
        if not ok:
            raise BackendUnavailable(reason)
    return module.make_backend(precision=precision, **options)


def _instantiate(obj: Any, name: str, precision: str | None) -> Backend:
    if isinstance(obj, Backend):
        if precision is not None:
            raise ValueError(f"backend {name!r} is an instance; it cannot take precision={precision!r}")
        return obj
    if inspect.isclass(obj) and issubclass(obj, Backend):
        params = inspect.signature(obj).parameters
        return obj(precision=precision) if "precision" in params else _no_precision(obj, name, precision)
    if callable(obj):
        backend = obj(precision=precision)
        if not isinstance(backend, Backend):
            raise TypeError(f"factory {name!r} returned {type(backend).__name__}, not a rope_ref Backend")
        return backend
    raise TypeError(f"{name!r} is a {type(obj).__name__}, not a Backend class, instance or factory")


def _no_precision(cls: type, name: str, precision: str | None) -> Backend:
    if precision is not None:
        raise ValueError(f"backend {name!r} takes no precision option, got precision={precision!r}")
    return cls()


def _import_user_module(module_name: str):
    """Import ``module_name``; if it (not one of its own imports) is missing, retry from the cwd."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        top = module_name.partition(".")[0]
        cwd = os.getcwd()
        if exc.name not in (module_name, top) or cwd in sys.path or "" in sys.path:
            raise
    sys.path.insert(0, cwd)
    importlib.invalidate_caches()
    return importlib.import_module(module_name)


def _is_file_spec(name: str) -> bool:
    """``path/to/file.py:Class`` (a path to a Python file, not a module name)."""
    path = name.rpartition(":")[0]
    return path.endswith(".py") or "/" in path or os.sep in path


def _import_file(name: str, path: str):
    """Import the Python file at ``path`` as a module of its own (its directory first on ``sys.path``, so
    it can import its neighbours); a missing file is a one-line :class:`BackendNotFound`."""
    file = os.path.abspath(os.path.expanduser(path))
    if not os.path.isfile(file):
        raise BackendNotFound(f"backend {name!r}: no such file {path}")
    module_name = "rope_ref_user_backend_" + "".join(
        ch if ch.isalnum() else "_" for ch in os.path.splitext(os.path.basename(file))[0]
    )
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        raise BackendNotFound(f"backend {name!r}: {path} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    folder = os.path.dirname(file)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


class BackendNotFound(BackendUnavailable, ValueError):
    """The backend names a module that does not exist (a typo, usually): a usage error, not a missing
    device. A :class:`BackendUnavailable` (and a ``ValueError``) for callers that catch either."""


def _require_module(name: str, module_name: str) -> None:
    """Raise :class:`BackendNotFound` if ``module_name`` cannot be found on ``sys.path``."""
    try:
        spec = importlib.util.find_spec(module_name)
    except (ImportError, ValueError):  # a missing parent package, or an invalid name
        spec = None
    if spec is None:
        raise BackendNotFound(f"backend {name!r}: no module named {module_name!r} (cannot import it)")


def get_backend(name: str, precision: str | None = None) -> Backend:
    """Resolve ``name`` to a ready backend instance (see the module docstring for the rules)."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"backend name must be a non-empty string, got {name!r}")
    if name in _BUILTINS:
        module_name, options = _BUILTINS[name]
        return _from_module(module_name, options, precision)
    if name.startswith(_ARRAY_API_PREFIX):
        target = name[len(_ARRAY_API_PREFIX) :]
        if not target:
            raise ValueError("backend 'array-api:' needs a module name, e.g. array-api:array_api_strict")
        _require_module(name, target)
        return _from_module("rope_ref.backends.array_api", {"namespace": target}, precision)
    if name in _peer_names():
        # raises BackendUnavailable with the reason
        return importlib.import_module(PEERS_PACKAGE).get_peer(name, precision)
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == name:
            return _instantiate(ep.load(), name, precision)
    if ":" in name and _is_file_spec(name):
        path, _, attr = name.rpartition(":")
        obj = getattr(_import_file(name, path), attr, None)
        if obj is None:
            raise BackendNotFound(f"backend {name!r}: file {path} defines no {attr!r}")
        return _instantiate(obj, name, precision)
    if ":" in name:
        module_name, _, attr = name.partition(":")
        try:
            module = _import_user_module(module_name)
        except ImportError as exc:
            raise ValueError(f"backend {name!r}: cannot import module {module_name!r} ({exc})") from None
        try:
            obj = getattr(module, attr)
        except AttributeError:
            raise ValueError(f"backend {name!r}: module {module_name!r} has no attribute {attr!r}") from None
        return _instantiate(obj, name, precision)
    raise ValueError(
        f"unknown backend {name!r}; built-in names are {builtin_names()}, or use 'module:attr' "
        f"or an entry point in the {ENTRY_POINT_GROUP!r} group"
    )
