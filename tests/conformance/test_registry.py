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

class WithDevice(OracleBackend):
    def __init__(self, device="cpu"):
        self.device = device

NOT_CALLABLE = 42

class NotABackend:  # a class, but no rope_ref Backend: what it makes is checked like a factory's result
    def __init__(self, precision=None):
        self.precision = precision
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
        ("torch:cpp", "rope_ref.backends.torch", {"device": "cpu", "kernel": "cpp"}),
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


def test_an_import_error_that_is_no_missing_module_is_one_line_too(tmp_path, monkeypatch):
    """``from os import nothing`` raises a plain ImportError (not ModuleNotFoundError): still one line."""
    (tmp_path / "user_backend_bad_name.py").write_text("from os import no_such_name_in_os\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(
        ValueError,
        match=r"backend 'user_backend_bad_name:X': cannot import module 'user_backend_bad_name' "
        r"\(cannot import name 'no_such_name_in_os'",
    ):
        get_backend("user_backend_bad_name:X")


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
    builtins = ["numpy", "torch", "torch:cuda", "torch:triton", "torch:cpp", "cupy", "array-api:<module>"]
    assert names[:7] == builtins


def test_a_builtin_module_without_available_is_made_with_precision_and_options(monkeypatch):
    made = []
    fake = type(sys)("h27_fake_always_there")
    fake.make_backend = lambda precision=None, **options: made.append((precision, options)) or OracleBackend()
    monkeypatch.setitem(sys.modules, "h27_fake_always_there", fake)
    backend = registry._from_module("h27_fake_always_there", {"device": "dev7", "kernel": "k2"}, "bf16")
    assert isinstance(backend, OracleBackend)
    assert made == [("bf16", {"device": "dev7", "kernel": "k2"})]


def test_a_builtin_checks_availability_with_its_own_options(monkeypatch):
    asked = []
    fake = type(sys)("h27_fake_checked")
    fake.available = lambda **options: asked.append(options) or (True, "")
    fake.make_backend = lambda precision=None, **options: OracleBackend()
    monkeypatch.setitem(sys.modules, "h27_fake_checked", fake)
    monkeypatch.setitem(registry._BUILTINS, "h27-checked", ("h27_fake_checked", {"device": "dev3"}))
    assert isinstance(get_backend("h27-checked"), OracleBackend)
    assert asked == [{"device": "dev3"}]


def test_peers_are_listed_after_the_builtins_and_resolved_by_the_peers_package(monkeypatch):
    import rope_ref.peers as peers

    assert registry.PEERS_PACKAGE == "rope_ref.peers"
    assert registry.builtin_names()[7:] == list(peers.PEERS)
    fake = type(sys)("h27_fake_peers")
    fake.PEERS = {"h27-peer": ("x", {})}
    fake.get_peer = lambda name, precision: ("peer", name, precision)
    monkeypatch.setattr(registry, "PEERS_PACKAGE", "h27_fake_peers")
    monkeypatch.setitem(sys.modules, "h27_fake_peers", fake)
    assert registry.builtin_names()[7:] == ["h27-peer"]
    assert get_backend("h27-peer", "fp16") == ("peer", "h27-peer", "fp16")


def test_without_the_peers_package_only_the_builtins_are_named(monkeypatch):
    monkeypatch.setitem(sys.modules, "rope_ref.peers", None)  # import raises ImportError
    assert registry._peer_names() == ()
    assert registry.builtin_names() == [
        "numpy",
        "torch",
        "torch:cuda",
        "torch:triton",
        "torch:cpp",
        "cupy",
        "array-api:<module>",
    ]


class _EntryPoint:
    def __init__(self, name, obj):
        self.name, self.obj = name, obj

    def load(self):
        return self.obj


def test_entry_points_of_the_group_are_resolved_by_name(monkeypatch):
    groups = []

    class Asked(OracleBackend):
        def __init__(self, precision=None):
            self.asked = precision

    def entry_points(group):
        groups.append(group)
        return [_EntryPoint("h27-other", OracleBackend()), _EntryPoint("h27-ep", Asked)]

    monkeypatch.setattr(registry.metadata, "entry_points", entry_points)
    assert registry.ENTRY_POINT_GROUP == "rope_ref.backends"
    assert get_backend("h27-ep", "fp32").asked == "fp32"
    assert groups == ["rope_ref.backends"]
    with pytest.raises(ValueError, match="is an instance; it cannot take precision='fp32'"):
        get_backend("h27-other", "fp32")
    with pytest.raises(
        ValueError, match=r"or use 'module:attr' or an entry point in the 'rope_ref.backends' group$"
    ):
        get_backend("h27-nothing")


@pytest.mark.parametrize(
    "name, is_file",
    [
        ("mine.py:X", True),
        ("dir/mod:X", True),
        ("runs:2026/mine.py:X", True),
        ("pkg.mod:X", False),
        ("mod:attr.py", False),
        ("mod:a/b", False),
    ],
)
def test_what_counts_as_a_file_spec(name, is_file):
    assert registry._is_file_spec(name) is is_file


def test_a_file_that_is_no_python_file_is_one_line(tmp_path):
    (tmp_path / "backend.txt").write_text(MODULE)
    with pytest.raises(
        BackendNotFound, match=r"^backend '.*backend\.txt:X': .*backend\.txt is not a Python file$"
    ):
        get_backend(f"{tmp_path}/backend.txt:X")


def test_a_file_module_is_named_from_its_file_and_its_folder_put_once_on_the_path(tmp_path, monkeypatch):
    (tmp_path / "my-rope.v2.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    before = sys.path.count(str(tmp_path))
    try:
        backend = get_backend(f"{tmp_path}/my-rope.v2.py:NoPrecision")
        assert type(backend).__module__ == "rope_ref_user_backend_my_rope_v2"
        assert "rope_ref_user_backend_my_rope_v2" in sys.modules
        assert sys.path.count(str(tmp_path)) == before == 1
    finally:
        sys.modules.pop("rope_ref_user_backend_my_rope_v2", None)


@pytest.mark.parametrize("parts", [("h27_cwd_pkg", "impl"), ("h27_top", "middle", "impl")])
def test_a_package_module_in_the_cwd_is_found_when_its_top_package_is_missing(tmp_path, monkeypatch, parts):
    """``a.b`` or ``a.b.c`` with ``a`` missing: the error names the top package ``a`` (not ``a.b``), and
    that is the module the retry from the cwd is for."""
    folder = tmp_path
    for part in parts[:-1]:
        folder = folder / part
        folder.mkdir()
        (folder / "__init__.py").write_text("")
    (folder / f"{parts[-1]}.py").write_text(MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    names = [".".join(parts[:n]) for n in range(len(parts), 0, -1)]
    try:
        assert isinstance(get_backend(f"{names[0]}:NoPrecision"), OracleBackend)
        assert sys.path[0] == str(tmp_path)
    finally:
        for name in names:
            sys.modules.pop(name, None)


@pytest.mark.parametrize("on_path", ["cwd", ""])
def test_no_retry_from_the_cwd_when_it_is_already_searched(tmp_path, monkeypatch, on_path):
    monkeypatch.chdir(tmp_path)
    entry = str(tmp_path) if on_path == "cwd" else ""
    monkeypatch.setattr(sys, "path", [entry] + [p for p in sys.path if p not in ("", str(tmp_path))])
    before = list(sys.path)
    with pytest.raises(ModuleNotFoundError, match="h27_nowhere_module"):
        registry._import_user_module("h27_nowhere_module")
    assert sys.path == before
    with pytest.raises(
        ValueError, match=r"^backend 'h27_nowhere_module:X': cannot import module 'h27_nowhere_module' \("
    ):
        get_backend("h27_nowhere_module:X")


@pytest.mark.parametrize("target", [".relative", "h27_no_pkg.sub"])
def test_an_array_api_module_that_cannot_be_looked_up_is_not_found(target):
    with pytest.raises(BackendNotFound, match=rf"^backend 'array-api:{target}': no module named '{target}'"):
        get_backend(f"array-api:{target}")


def test_a_non_string_name_is_refused():
    with pytest.raises(ValueError, match=r"^backend name must be a non-empty string, got 7$"):
        get_backend(7)


def test_backend_not_found_is_both_unavailable_and_a_value_error():
    assert issubclass(BackendNotFound, BackendUnavailable) and issubclass(BackendNotFound, ValueError)


def test_a_class_with_other_options_but_no_precision_takes_none(user_file):
    assert get_backend(f"{user_file}:WithDevice").device == "cpu"
    with pytest.raises(ValueError, match=r"WithDevice' takes no precision option, got precision='fp16'$"):
        get_backend(f"{user_file}:WithDevice", "fp16")


def test_a_file_under_the_home_folder(tmp_path, monkeypatch):
    (tmp_path / "h27_home_backend.py").write_text(MODULE)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir("/")
    try:
        assert isinstance(get_backend("~/h27_home_backend.py:NoPrecision"), OracleBackend)
    finally:
        sys.modules.pop("rope_ref_user_backend_h27_home_backend", None)


def test_a_peers_package_that_fails_to_import_names_no_peers(tmp_path, monkeypatch):
    (tmp_path / "h27_broken_peers.py").write_text("raise ImportError(\"cannot import name 'x' from 'y'\")\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "PEERS_PACKAGE", "h27_broken_peers")
    assert registry._peer_names() == ()
    assert registry.builtin_names()[-1] == "array-api:<module>"


def test_a_module_written_to_the_cwd_after_a_failed_lookup_is_found(tmp_path, monkeypatch):
    """The cwd's directory listing, cached by an earlier lookup, is refreshed before the retry (the file
    system may keep the folder's mtime when a file appears within one tick: set it back here)."""
    import importlib.machinery
    import os

    monkeypatch.chdir(tmp_path)
    cwd = os.getcwd()
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", cwd, str(tmp_path))])
    monkeypatch.setattr(sys, "path_importer_cache", dict(sys.path_importer_cache))
    assert importlib.machinery.PathFinder.find_spec("h27_late_backend", [cwd]) is None  # caches the listing
    stat = os.stat(cwd)
    (tmp_path / "h27_late_backend.py").write_text(MODULE)
    os.utime(cwd, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    try:
        assert isinstance(get_backend("h27_late_backend:NoPrecision"), OracleBackend)
        assert sys.path[0] == cwd
    finally:
        sys.modules.pop("h27_late_backend", None)


def test_a_relative_file_puts_its_absolute_folder_on_the_path(tmp_path, monkeypatch):
    """``sub/mine.py:X`` from the cwd: the folder goes on sys.path as an absolute path (a later chdir
    must not change what it names) and the module's file is absolute too."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "h27_relative.py").write_text(MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    try:
        backend = get_backend("sub/h27_relative.py:NoPrecision")
        module = sys.modules["rope_ref_user_backend_h27_relative"]
        assert type(backend).__module__ == module.__name__
        assert sys.path[0] == str(tmp_path / "sub") and "sub" not in sys.path
        assert module.__file__ == str(tmp_path / "sub" / "h27_relative.py")
    finally:
        sys.modules.pop("rope_ref_user_backend_h27_relative", None)


def test_a_folder_named_like_a_python_file_is_no_file(tmp_path):
    (tmp_path / "h27_dir.py").mkdir()
    with pytest.raises(BackendNotFound, match=r"^backend '.*h27_dir\.py:X': no such file .*h27_dir\.py$"):
        get_backend(f"{tmp_path}/h27_dir.py:X")


def test_a_file_that_exits_while_imported_is_not_left_imported(tmp_path):
    """Any exception (SystemExit too, not only Exception) unregisters the half-imported module."""
    (tmp_path / "h27_exits.py").write_text("raise SystemExit(3)\n")
    with pytest.raises(SystemExit):
        get_backend(f"{tmp_path}/h27_exits.py:X")
    assert "rope_ref_user_backend_h27_exits" not in sys.modules


def test_an_entry_point_whose_name_has_a_colon_wins_over_module_attr(monkeypatch):
    """Entry points are looked up before ``module:attr`` (and before file specs)."""
    points = [_EntryPoint("os:path", OracleBackend), _EntryPoint("h27/x.py:Y", OracleBackend)]
    monkeypatch.setattr(registry.metadata, "entry_points", lambda group: points)
    assert type(get_backend("os:path")) is OracleBackend
    assert type(get_backend("h27/x.py:Y")) is OracleBackend


@pytest.mark.parametrize(
    "attr, precision, error, message",
    [
        ("INSTANCE", "fp64", ValueError, "backend '{spec}' is an instance; it cannot take precision='fp64'"),
        (
            "NoPrecision",
            "fp32",
            ValueError,
            "backend '{spec}' takes no precision option, got precision='fp32'",
        ),
        ("bad_factory", None, TypeError, "factory '{spec}' returned str, not a rope_ref Backend"),
        ("NotABackend", None, TypeError, "factory '{spec}' returned NotABackend, not a rope_ref Backend"),
        ("NOT_CALLABLE", None, TypeError, "'{spec}' is a int, not a Backend class, instance or factory"),
    ],
)
def test_errors_of_what_a_name_resolves_to_name_the_whole_backend(user_file, attr, precision, error, message):
    spec = f"{user_file}:{attr}"
    with pytest.raises(error) as info:
        get_backend(spec, precision)
    assert str(info.value) == message.format(spec=spec)
