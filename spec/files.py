"""The files tspec writes and the ones users name for it to read: writing every file of a run
whole or none of them, telling when they are stale, reading a user's file within a limit, and
how generated files name the spec lines they come from."""

import difflib
import errno
import functools
import hashlib
import os
import re
import secrets
import shutil
import socket
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tspec.errors import TspecError, UsageError


def write_atomic(path: str | Path, content: str | bytes, *,
                 root: str | Path | None = None) -> Path:
    """Write one file whole (see ``write_files``); returns its path."""
    return write_files({path: content}, root=root)[0]


def write_files(contents: Mapping[str | Path, str | bytes], *,
                root: str | Path | None = None) -> list[Path]:
    """Write every file of ``contents`` (path -> text or bytes), or none: afterwards each is
    entirely old or entirely new, whichever write or rename fails.

    Each file is first written to a temporary name next to its target (so that the rename is
    atomic), with the mode the file it replaces has (a new file the umask's). Then each is
    renamed in, the file it replaces kept aside under another name (a hard link, so the target
    never goes missing) until every rename has succeeded; after an error the ones renamed in
    are put back, and the temporary files, backups and folders made are removed. A rename
    replaces the target's directory entry, so a hard link to the old file keeps the old text.
    Temporary names carry the writer's process id: a later run removes those its machine's
    dead processes left (a process killed before its renames), never a live one's.
    With ``root``, each path is relative to it and refused when it lands outside."""
    writes = [_Write(inside(root, path) if root is not None else Path(path),
                     content.encode("utf-8") if isinstance(content, str) else content)
              for path, content in contents.items()]
    _one_each(writes)
    made: list[Path] = []                       # the folders this run makes, outermost first
    current = None
    try:
        for current in writes:
            _make_folders(current.path.parent, made)
        for folder in dict.fromkeys(write.path.parent for write in writes):
            remove_stale(folder)
        for current in writes:
            _stage(current)
        for current in writes:
            _place(current)
    except BaseException as error:
        left = _roll_back(writes, made)
        if isinstance(error, OSError) or left:
            raise _unwritable(current.path, error, left) from None
        raise
    for write in writes:
        if write.backup is not None:
            _discard(write.backup)
    return [write.path for write in writes]


@dataclass
class _Write:
    path: Path                          # the target
    data: bytes
    replaces: bool = False              # whether something is there (a file, a link)
    mode: int | None = None             # the mode of the file it replaces; None: a new file
    staged: Path | None = None          # the new file, under a temporary name
    made: tuple[int, int] | None = None  # the staged file's (device, inode)
    backup: Path | None = None          # the file it replaces, under a temporary name


def _one_each(writes: list[_Write]) -> None:
    """Refuse two writes to one file ('a/../b' and 'b'): the second would undo the first."""
    seen: dict[Path, Path] = {}
    for write in writes:
        try:
            key = write.path.parent.resolve() / write.path.name
        except (OSError, RuntimeError):     # a loop of links: the write itself will say so
            key = write.path
        if key in seen:
            raise UsageError(f"cannot write {seen[key]} and {write.path}: they are one file")
        seen[key] = write.path


def _make_folders(folder: Path, made: list[Path]) -> None:
    """Make a folder and the ones above it that are missing, adding each to ``made`` (the
    roll-back removes them) as soon as it is made."""
    missing = []
    while not os.path.lexists(folder):
        missing.append(folder)
        if folder.parent == folder:
            break
        folder = folder.parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder)
        except FileExistsError:         # made meanwhile by a concurrent run: not ours
            if not folder.is_dir():
                raise
            continue
        made.append(folder)


def _stage(write: _Write) -> None:
    """Write the new file under a temporary name beside its target, with the target's mode."""
    write.replaces = os.path.lexists(write.path)
    try:
        status = os.stat(write.path)
    except FileNotFoundError:           # none, or a symbolic link to none
        status = None
    if status is not None:
        if stat.S_ISDIR(status.st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(write.path))
        if not stat.S_ISREG(status.st_mode):    # a device, a named pipe: never replaced
            raise NotARegularFile(status.st_mode)
        write.mode = stat.S_IMODE(status.st_mode)
    staged = temporary_name(write.path, "new")
    # a new file gets the umask's permissions from the kernel; a replacement is private
    # until it has its target's mode
    descriptor = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _CLOEXEC,
                         0o666 if write.mode is None else 0o600)
    write.staged = staged
    try:
        _write(descriptor, write.data)
        if write.mode is not None:
            os.fchmod(descriptor, write.mode)
        status = os.fstat(descriptor)
        write.made = (status.st_dev, status.st_ino)
    finally:
        os.close(descriptor)


def _write(descriptor: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(descriptor, view):]


def _place(write: _Write) -> None:
    """Rename the staged file over its target, the old file kept aside under a backup name."""
    if write.replaces:
        write.backup = _backup(write.path)
    os.replace(write.staged, write.path)


def _backup(path: Path) -> Path:
    """A second name for the file at ``path`` (a hard link: the file stays where it is);
    where the file system has no hard links, a copy."""
    backup = temporary_name(path, "old")
    try:
        os.link(path, backup, follow_symlinks=False)
    except (NotImplementedError, OSError) as error:
        if isinstance(error, OSError) and error.errno not in _NO_HARD_LINKS:
            raise
        try:
            shutil.copy2(path, backup, follow_symlinks=False)
        except BaseException:
            _discard(backup)
            raise
    return backup


_NO_HARD_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK, errno.ENOSYS,
                  errno.EXDEV}


def _roll_back(writes: list[_Write], made: list[Path]) -> list[str]:
    """Put back every file renamed in, and remove the staged files, backups and folders made;
    what could not be put back, as 'PATH (its old text is in BACKUP)'."""
    left = []
    for write in reversed(writes):
        if write.made is not None and _identity(write.path) == write.made:     # renamed in
            try:
                if write.backup is not None:
                    os.replace(write.backup, write.path)
                    write.backup = None
                else:
                    os.unlink(write.path)
            except OSError:
                left.append(f"{write.path} (its old text is in {write.backup})"
                            if write.backup is not None else str(write.path))
                continue
        elif write.staged is not None:
            _discard(write.staged)
        if write.backup is not None:
            _discard(write.backup)
    for folder in reversed(made):
        try:
            os.rmdir(folder)
        except OSError:                 # not empty: a concurrent run's files are in it
            pass
    return left


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        status = os.lstat(path)
    except OSError:
        return None
    return (status.st_dev, status.st_ino)


def _discard(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:                     # gone already; or left for a later run to remove
        pass


def _unwritable(path: Path, error: BaseException, left: list[str] = ()) -> UsageError:
    """A file that cannot be written (a full disk, a read-only file system, a file where a
    folder should be), named as the user gave it, never by the temporary file's name; with
    any file the roll-back could not put back."""
    in_the_way = next((folder for folder in reversed(path.parents)
                       if (folder.exists() or folder.is_symlink()) and not folder.is_dir()),
                      None)
    if in_the_way is not None:
        reason = f"{in_the_way} is not a folder"
    elif isinstance(error, OSError):
        reason = error.strerror or str(error) or type(error).__name__
    else:
        reason = str(error) or type(error).__name__
    if left:
        reason += f"; and could not put back {', '.join(left)}"
    return UsageError(f"cannot write {path}: {reason}")


# -- temporary files: named after their target, their writer's process and its machine

_TEMPORARY = re.compile(r"\.(?s:.*)\.tspec-(?:new|old)-(?P<host>[0-9a-f]{8})-(?P<pid>[0-9]+)-"
                        r"[0-9a-f]{8}\Z")
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


@functools.cache
def _machine() -> str:
    """This machine, and the process-id space on it, as 8 hex digits: a process id means
    something only there (a container has its own; a network file system is shared)."""
    try:
        space = str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        space = ""
    return hashlib.sha256(f"{socket.gethostname()}\n{space}".encode()).hexdigest()[:8]


def temporary_name(path: Path, kind: str) -> Path:
    """A fresh name beside ``path`` for its new text (kind 'new') or its old (kind 'old'):
    ``.NAME.tspec-KIND-MACHINE-PID-RANDOM``, with NAME cut short where the whole would pass
    the system's limit of 255 bytes."""
    name = path.name
    while len(name.encode("utf-8", "surrogateescape")) > 200:
        name = name[:-1]
    return path.with_name(f".{name}.tspec-{kind}-{_machine()}-{os.getpid()}-"
                          f"{secrets.token_hex(4)}")


def remove_stale(folder: Path) -> list[Path]:
    """Remove the temporary files in ``folder`` that processes of this machine which no longer
    exist left (killed between their writes and their renames); the ones removed."""
    removed = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        found = _TEMPORARY.fullmatch(entry.name)
        if found is None or found["host"] != _machine() or _alive(int(found["pid"])):
            continue
        try:
            os.unlink(entry.path)
        except OSError:
            continue
        removed.append(Path(entry.path))
    return removed


def _alive(pid: int) -> bool:
    """Whether a process runs under this id (when in doubt, yes: its files stay)."""
    if pid == os.getpid() or os.name != "posix":
        return True
    if not 0 < pid < 1 << 31:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:                     # EPERM: another user's, alive
        return True
    return True


# -- files users name: read only when they are regular files, and within a limit

class NotARegularFile(OSError):
    """A path that names a named pipe, a device, a socket or a folder where a file is read:
    an OSError whose text says which, as the callers' 'cannot read PATH: REASON' shows it."""

    def __init__(self, mode: int):
        kinds = ((stat.S_ISFIFO, "a named pipe"), (stat.S_ISCHR, "a character device"),
                 (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
                 (stat.S_ISDIR, "a folder"))
        kind = next((name for test, name in kinds if test(mode)), "not a file")
        super().__init__(errno.EINVAL, f"{kind}, not a regular file")

    def __str__(self) -> str:
        return self.strerror


def open_regular(path: str | Path):
    """A user's file opened for reading (binary), after its kind is known: a named pipe would
    wait for a writer and a device such as /dev/zero never ends, so those are refused
    (NotARegularFile) before a byte is read, and opening one never waits."""
    descriptor = os.open(path, os.O_RDONLY | _CLOEXEC | getattr(os, "O_NONBLOCK", 0)
                         | getattr(os, "O_NOCTTY", 0))
    try:
        mode = os.fstat(descriptor).st_mode
        if not stat.S_ISREG(mode):
            raise NotARegularFile(mode)
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def read_limited(path: str | Path, limit: int, what: str, error: type[TspecError]) -> bytes:
    """The bytes of a user's file (``open_regular``), refused by ``error`` ('WHAT is N bytes;
    the limit is LIMIT', at the file) when it holds more than ``limit``, before it is read."""
    with open_regular(path) as stream:
        size = os.fstat(stream.fileno()).st_size
        data = stream.read(limit + 1) if size <= limit else b""
    size = max(size, len(data))                 # it may grow as it is read
    if size > limit:
        raise error(f"{what} is {size} bytes; the limit is {limit}", file=str(path))
    return data


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
        with open_regular(path) as stream:      # a named pipe in its place: stale, no wait
            current = stream.read().decode("utf-8", "replace")
        current = current.replace("\r\n", "\n").replace("\r", "\n")   # as a text file reads
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
