"""``conformance.registry``: how a backend name resolves (built-ins and their options, availability,
``module:attr``, ``file.py:attr``, instances, classes and factories) and the one-line errors of each
wrong name. User modules are written to ``tmp_path`` here."""

from __future__ import annotations

import sys

import pytest
from rope_ref.conformance import registry
from rope_ref.conformance.oracle_backend import OracleBackend
from rope_ref.conformance.protocol import BackendUnavailable
from rope_ref.conformance.registry import BackendNotFound, get_backend

MODULE = """
from rope_ref.conformance.oracle_backend import OracleBackend

class NoPrecision(OracleBackend):
    pass

class WithPrecision(OracleBackend):
    def __init__(self, precision=None):
        self.asked = precision

INSTANCE = OracleBackend()

def factory(precision=None):
    return WithPrecision(precision)

def bad_factory(precision=None):
    return "not a backend"

NOT_CALLABLE = 42
"""


@pytest.fixture
def user_file(tmp_path):
    path = tmp_path / "h27_user_backends.py"
    path.write_text(MODULE)
    return path


@pytest.mark.parametrize(
    "name,module,options",
    [
        ("numpy", "rope_ref.conformance.oracle_backend", {}),
        ("torch", "rope_ref.backends.torch", {"device": "cpu"}),
        ("torch:cuda", "rope_ref.backends.torch", {"device": "cuda"}),
        ("torch:triton", "rope_ref.backends.torch", {"device": "cuda", "kernel": "triton"}),
        ("cupy", "rope_ref.backends.cupy", {}),
        ("array-api:numpy", "rope_ref.backends.array_api", {"namespace": "numpy"}),
    ],
)
def test_builtin_names_and_their_options(monkeypatch, name, module, options):
    seen = []
    monkeypatch.setattr(registry, "_from_module", lambda m, o, p: seen.append((m, o, p)) or "made")
    assert get_backend(name, "fp32") == "made"
    assert seen == [(module, options, "fp32")]


def test_an_unavailable_builtin_raises_its_reason(monkeypatch):
    fake = type(sys)("h27_fake_backend_module")
    fake.available = lambda **options: (False, f"no device for {options}")
    fake.make_backend = lambda precision=None, **options: OracleBackend()
    monkeypatch.setitem(sys.modules, "h27_fake_backend_module", fake)
    with pytest.raises(BackendUnavailable, match=r"^no device for \{'device': 'x'\}$"):
        registry._from_module("h27_fake_backend_module", {"device": "x"}, None)
    fake.available = lambda **options: (True, "")
    assert isinstance(registry._from_module("h27_fake_backend_module", {"device": "x"}, None), OracleBackend)


def test_instances_classes_and_factories_from_a_file(user_file):
    spec = f"{user_file}:"
    assert isinstance(get_backend(spec + "INSTANCE"), OracleBackend)
    with pytest.raises(ValueError, match="is an instance; it cannot take precision='fp64'"):
        get_backend(spec + "INSTANCE", "fp64")
    assert isinstance(get_backend(spec + "NoPrecision"), OracleBackend)
    with pytest.raises(ValueError, match="takes no precision option, got precision='fp64'"):
        get_backend(spec + "NoPrecision", "fp64")
    assert get_backend(spec + "WithPrecision", "fp64").asked == "fp64"
    assert get_backend(spec + "factory", "bf16").asked == "bf16"
    with pytest.raises(TypeError, match="factory .* returned str, not a rope_ref Backend"):
        get_backend(spec + "bad_factory")
    with pytest.raises(TypeError, match="is a int, not a Backend class, instance or factory"):
        get_backend(spec + "NOT_CALLABLE")
    with pytest.raises(BackendNotFound, match=f"file {user_file} defines no 'Missing'"):
        get_backend(spec + "Missing")


def test_a_file_in_a_folder_with_a_colon(tmp_path, monkeypatch):
    folder = tmp_path / "runs:2026"
    folder.mkdir()
    (folder / "mine.py").write_text(MODULE)
    monkeypatch.chdir(tmp_path)
    assert isinstance(get_backend("runs:2026/mine.py:NoPrecision"), OracleBackend)  # split at the last colon


def test_a_file_imports_its_neighbours_from_its_own_folder(tmp_path, monkeypatch):
    """The file's folder (not the cwd, not on sys.path before) is put first on sys.path."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "h27_neighbour_base.py").write_text(MODULE)
    (folder / "h27_uses_neighbour.py").write_text(
        "from h27_neighbour_base import NoPrecision\n\nclass Derived(NoPrecision):\n    pass\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path), str(folder))])
    try:
        backend = get_backend(f"{folder}/h27_uses_neighbour.py:Derived")
        assert type(backend).__mro__[1].__module__ == "h27_neighbour_base"
        assert sys.path[0] == str(folder)
    finally:
        for name in ("h27_neighbour_base", "rope_ref_user_backend_h27_uses_neighbour"):
            sys.modules.pop(name, None)


def test_a_missing_or_broken_file(tmp_path):
    with pytest.raises(BackendNotFound, match=r"no such file .*nowhere\.py"):
        get_backend(f"{tmp_path}/nowhere.py:X")
    broken = tmp_path / "h27_broken_backend.py"
    broken.write_text("raise RuntimeError('import-time failure')\n")
    with pytest.raises(RuntimeError, match="import-time failure"):
        get_backend(f"{broken}:X")
    assert "rope_ref_user_backend_h27_broken_backend" not in sys.modules


def test_module_attr_splits_at_the_first_colon():
    with pytest.raises(ValueError, match=r"module 'os' has no attribute 'path:sep'"):
        get_backend("os:path:sep")


def test_a_missing_import_inside_the_users_module_is_not_retried_from_the_cwd(tmp_path, monkeypatch):
    lib, cwd = tmp_path / "lib", tmp_path / "cwd"
    lib.mkdir(), cwd.mkdir()
    (lib / "h27_inner_missing.py").write_text("import h27_no_such_dependency\n")
    monkeypatch.syspath_prepend(str(lib))
    monkeypatch.chdir(cwd)
    with pytest.raises(
        ValueError, match=r"cannot import module 'h27_inner_missing' .*h27_no_such_dependency"
    ):
        get_backend("h27_inner_missing:X")
    assert str(cwd) not in sys.path


def test_a_module_in_the_cwd_is_found(tmp_path, monkeypatch):
    (tmp_path / "h27_cwd_backend.py").write_text(MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    assert isinstance(get_backend("h27_cwd_backend:NoPrecision"), OracleBackend)


@pytest.mark.parametrize(
    "name,error,match",
    [
        ("", ValueError, r"^backend name must be a non-empty string, got ''$"),
        (None, ValueError, "backend name must be a non-empty string, got None"),
        ("array-api:", ValueError, r"needs a module name, e.g. array-api:array_api_strict"),
        ("array-api:h27_no_such_namespace", BackendNotFound, "no module named 'h27_no_such_namespace'"),
        ("h27-unknown", ValueError, "unknown backend 'h27-unknown'; built-in names are"),
    ],
)
def test_bad_names_are_one_line_errors(name, error, match):
    with pytest.raises(error, match=match):
        get_backend(name)


def test_builtin_names_list():
    names = registry.builtin_names()
    assert names[:6] == ["numpy", "torch", "torch:cuda", "torch:triton", "cupy", "array-api:<module>"]
