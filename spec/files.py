"""Generated files: writing them whole, telling when they are stale, and how they name the
spec lines they come from."""

import difflib
import os
import tempfile
from pathlib import Path

from spec.errors import UsageError


def write_atomic(path: str | Path, text: str, *, root: str | Path | None = None) -> None:
    """Write text to path through a temporary file and a rename: no half-written file, ever.
    The file gets the permissions a plain write would give it (the umask's), not the
    temporary file's private ones. With ``root``, ``path`` is relative to it and refused
    when it lands outside."""
    path = Path(path)
    if root is not None:
        path = inside(root, path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as error:
        raise _unwritable(path, error) from None
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="\n") as stream:
            stream.write(text)
        os.chmod(temporary, 0o666 & ~_umask())
        os.replace(temporary, path)
    except BaseException as error:
        Path(temporary).unlink(missing_ok=True)
        if isinstance(error, OSError):
            raise _unwritable(path, error) from None
        raise


def _unwritable(path: Path, error: OSError) -> UsageError:
    """A file that cannot be written (a full disk, a read-only file system, a file where a
    folder should be), named as the user gave it, never by the temporary file's name."""
    in_the_way = next((folder for folder in reversed(path.parents)
                       if (folder.exists() or folder.is_symlink()) and not folder.is_dir()),
                      None)
    if in_the_way is not None:
        return UsageError(f"cannot write {path}: {in_the_way} is not a folder")
    return UsageError(f"cannot write {path}: {error.strerror or error}")


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def inside(root: str | Path, path: str | Path) -> Path:
    """``path`` (relative to ``root``, or absolute), refused unless it lies inside ``root``
    once every '..' and symbolic link is followed: what tspec writes stays where it is told."""
    root = Path(root)
    path = root / path
    try:
        resolved_root, resolved = root.resolve(), path.resolve()
    except RuntimeError:                # Python before 3.13: "Symlink loop from ..."
        raise UsageError(f"cannot write {path}: symbolic links in its path lead round in a "
                         "loop") from None
    if resolved == resolved_root or not resolved.is_relative_to(resolved_root):
        raise UsageError(f"{path} lies outside {root}, where tspec writes; refused")
    return path


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


SPEC_DIR = Path(__file__).resolve().parent


def shown(file: str) -> str:
    """A spec file as generated files name it: relative to tspec's own tree for the built-in
    specs (the same text from any working directory), else as given, with any byte of its name
    that is not UTF-8 as an escape (``\\xff``): a file holds text, not Python's stand-ins for
    such bytes, which no encoder takes."""
    path = Path(file)
    try:
        return path.resolve().relative_to(SPEC_DIR.parent.resolve()).as_posix()
    except ValueError:
        return file.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def where(record) -> str:
    """``file:line`` of a spec record (an equation, a block, a spec), as generated files show it."""
    file = getattr(record, "file", None)
    if file is None:
        return "<spec>"
    line = getattr(record, "line", None)
    return f"{shown(file)}:{line}" if line else shown(file)
