"""Importing generated code: from generated/ or from freshly rendered text."""

import hashlib
import importlib.util
import os
import sys
import tempfile
from pathlib import Path
from types import ModuleType

from spec.files import write_atomic

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
    directory = Path(tempfile.gettempdir()) / f"tspec-generated-{os.getuid()}"
    directory.mkdir(mode=0o700, exist_ok=True)
    path = directory / f"model_{hashlib.sha256(text.encode()).hexdigest()[:20]}.py"
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        write_atomic(path, text)
    return load_module(path, typecheck=typecheck)
