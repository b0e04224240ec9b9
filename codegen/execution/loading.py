"""Importing generated code: from generated/ or from freshly rendered text."""

import hashlib
import importlib.util
import os
import stat
import sys
import tempfile
from pathlib import Path
from types import ModuleType

from tspec.errors import UsageError
from tspec.files import write_atomic

_counter = 0


def load_module(path: str | Path, *, typecheck: bool = False) -> ModuleType:
    """Import a generated module from a file; ``typecheck`` turns on jaxtyping's run-time
    shape checks for it (as TSPEC_TYPECHECK=1 does)."""
    global _counter
    _counter += 1
    path = Path(path)
    name = f"_tspec_generated_{path.stem}_{_counter}"
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


def load_source(text: str, *, typecheck: bool = False) -> ModuleType:
    """Import generated source text. It is written once per content to a cache folder, so
    tracebacks show its lines and repeated loads add no files."""
    directory = _private_folder()
    path = directory / f"model_{hashlib.sha256(text.encode()).hexdigest()[:20]}.py"
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        write_atomic(path, text)
    return load_module(path, typecheck=typecheck)


def _private_folder() -> Path:
    """The cache folder of generated modules: this user's own, and no one else's to write in,
    since what is in it runs."""
    directory = Path(tempfile.gettempdir()) / f"tspec-generated-{os.getuid()}"
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
    if status.st_uid != os.getuid():
        raise UsageError(f"{directory} belongs to another user; generated code is not loaded "
                         f"from it {remedy}")
    if status.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UsageError(f"{directory} is writable by other users; generated code is not "
                         f"loaded from it {remedy}")
    return directory
