"""Generated files: where they go by default, writing them whole, and telling when they are
stale."""

import difflib
import os
import tempfile
from pathlib import Path


def write_atomic(path: str | Path, text: str) -> None:
    """Write text to path through a temporary file and a rename: no half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="\n") as stream:
            stream.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def stale_diff(path: str | Path, text: str) -> str:
    """A unified diff from the file on disk (missing: empty) to ``text``; '' when they match."""
    path = Path(path)
    try:
        current = path.read_text(encoding="utf-8")
    except OSError:
        current = ""
    if current == text:
        return ""
    return "".join(difflib.unified_diff(current.splitlines(True), text.splitlines(True),
                                        str(path), "generated"))
