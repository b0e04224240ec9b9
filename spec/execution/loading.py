"""Importing generated code: from generated/, from a `--out` folder, or freshly rendered text.

A model module imports its backend's runtime as ``from . import _runtime as rt``: it is a
module of a package, the folder it lies in. ``load_module`` imports a model file as a module
of a package made for its folder (and a tag: loads under different tags get runtimes of their
own); ``load_source`` writes fresh text beside the runtime rendered with it, so that fresh code
always runs on its own runtime, even where a committed _runtime.py is stale.
"""

import hashlib
import importlib.util
import itertools
import os
import re
import stat
import sys
import tempfile
from pathlib import Path
from types import ModuleType

from tspec.codegen.backends import backend as backend_named
from tspec.codegen.generate import variant_source
from tspec.codegen.rendering.render import runtime_named, runtime_version
from tspec.errors import UsageError
from tspec.files import write_atomic
from tspec.language.variant import Variant

_private_loads = itertools.count()
# the line of a model that names the runtime it was generated with (module.py.j2)
_REQUIRED = re.compile(r'^rt\.require_version\("([0-9a-f]{16})", __name__\)', re.MULTILINE)


def load_module(path: str | Path, *, typecheck: bool = False, private: bool = False,
                tag: str = "") -> ModuleType:
    """Import a generated model from a file, as a module of a package over its folder.

    The models of one folder loaded under one ``tag`` share its runtime (_runtime.py), which is
    imported once; each call executes the model afresh. ``private`` gives the model a runtime
    of its own, for a caller that changes the runtime's state (its pool, QUERY_BLOCK).
    ``typecheck`` turns on jaxtyping's run-time shape checks (as TSPEC_TYPECHECK=1 does) for
    the model and for a runtime of its own, imported with them on."""
    path = Path(path).resolve()
    if private:
        tag = f"{tag}-private-{next(_private_loads)}"
    package = _package(path.parent, f"{tag}-typecheck" if typecheck else tag, private)
    _forget_a_changed_runtime(package)
    name = f"{package.__name__}.{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    previous = os.environ.get("TSPEC_TYPECHECK")
    if typecheck:
        os.environ["TSPEC_TYPECHECK"] = "1"
    try:
        sys.modules[name] = module        # beartype resolves annotations through it
        spec.loader.exec_module(module)
    finally:
        if typecheck:
            if previous is None:
                os.environ.pop("TSPEC_TYPECHECK", None)
            else:
                os.environ["TSPEC_TYPECHECK"] = previous
    return module


def load_source(text: str, *, typecheck: bool = False, private: bool = False,
                tag: str = "", runtime: str | None = None) -> ModuleType:
    """Import generated model text. It is written once per content to a cache folder, beside
    the runtime it was generated with (as this process's templates render it; or ``runtime``,
    a runtime's text, when given), so tracebacks show its lines and repeated loads add no
    files. ``typecheck``, ``private`` and ``tag`` as for ``load_module``."""
    directory = _private_folder()
    required = _REQUIRED.search(text)
    if runtime is not None:                 # a folder for each runtime's text
        directory /= f"given-{hashlib.sha256(runtime.encode()).hexdigest()[:16]}"
    elif required is None:                  # no runtime: plain Python
        directory /= "plain"
    else:
        found = runtime_named(required[1])
        if found is None:
            raise ImportError(f"this code was generated with runtime {required[1]}, which "
                              "this tspec does not render: generate it again")
        backend, runtime = found
        directory /= f"{backend}-{required[1]}"
    _make_folder(directory)
    if runtime is not None or required is not None:
        _write_once(directory / "__init__.py", "")
        _write_once(directory / "_runtime.py", runtime)
    path = directory / f"model_{hashlib.sha256(text.encode()).hexdigest()[:20]}.py"
    _write_once(path, text)
    return load_module(path, typecheck=typecheck, private=private, tag=tag)


def _package(folder: Path, tag: str, private: bool = False) -> ModuleType:
    """The package over ``folder`` for loads under ``tag``: made on first use, so that its
    models' ``from . import _runtime`` finds the folder's runtime. ``private``: a package for
    one load alone (its ``private`` attribute says so)."""
    key = hashlib.sha256(f"{folder}\0{tag}".encode()).hexdigest()[:16]
    name = f"_tspec_{key}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_loader(name, None, is_package=True)
        spec.submodule_search_locations.append(str(folder))
        package = importlib.util.module_from_spec(spec)
        package.private = private
        sys.modules[name] = package
    return sys.modules[name]


def _forget_a_changed_runtime(package: ModuleType) -> None:
    """Where the package's runtime file has changed since it was imported (regenerated), the
    next model loaded imports it anew; the models loaded before keep the one they have."""
    runtime = sys.modules.get(f"{package.__name__}._runtime")
    if runtime is None:
        return
    try:
        text = Path(runtime.__file__).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return                              # the import says what is wrong
    if runtime_version(text) != getattr(runtime, "VERSION", None):
        del sys.modules[runtime.__name__]
        delattr(package, "_runtime")


def _write_once(path: Path, text: str) -> None:
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        write_atomic(path, text)


def _make_folder(directory: Path) -> None:
    try:
        directory.mkdir(mode=0o700, exist_ok=True)
    except OSError as error:
        raise UsageError(f"cannot make {directory} for generated code: {error.strerror}") \
            from None


def _private_folder() -> Path:
    """The cache folder of generated modules: this user's own, and no one else's to write in,
    since what is in it runs (the checks of its owner and mode where the system has them)."""
    uid = os.getuid() if hasattr(os, "getuid") else None     # Unix only
    directory = Path(tempfile.gettempdir()) / ("tspec-generated" if uid is None else
                                               f"tspec-generated-{uid}")
    try:
        directory.mkdir(mode=0o700, exist_ok=True)
        status = directory.lstat()
    except OSError as error:
        raise UsageError(f"cannot make {directory} for generated code: {error.strerror}") \
            from None
    remedy = "(remove it, or set TMPDIR)"
    if stat.S_ISLNK(status.st_mode):
        raise UsageError(f"{directory} is a symbolic link; generated code is not loaded "
                         f"through it {remedy}")
    if not stat.S_ISDIR(status.st_mode):
        raise UsageError(f"{directory} is not a folder {remedy}")
    if uid is not None and status.st_uid != uid:
        raise UsageError(f"{directory} belongs to another user; generated code is not loaded "
                         f"from it {remedy}")
    if uid is not None and status.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UsageError(f"{directory} is writable by other users; generated code is not "
                         f"loaded from it {remedy}")
    return directory


def load_variant(variant: Variant, backend: str = "numpy", *,
                 typecheck: bool = False) -> ModuleType:
    """One model's module (``codegen.generate.variant_source``), imported: its text is written
    once per content to this user's cache folder of generated code, beside the runtime it was
    generated with, as `tspec run` loads its code (``load_source``)."""
    chosen = backend_named(backend)
    text = variant_source(variant, chosen.name)
    try:
        __import__(chosen.module)
    except ImportError:
        raise UsageError(f"backend {chosen.name} needs the {chosen.module} package, which is "
                         "not installed") from None
    return load_source(text, typecheck=typecheck)
