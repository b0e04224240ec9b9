"""The specs and variants tspec ships, and the checkout it may run from: their names and
files (``builtin_specs``, ``builtin_variants``, ``is_builtin``), a spec read by path or name
(``read_spec``, cached while the file is unchanged; ``resolve_spec``), and the default home
of generated files in a checkout (``checkout``, ``in_checkout``). Below the API and code
generation, which both read it."""

import functools
from pathlib import Path

from tspec.checking import limits
from tspec.errors import UsageError, quoted
from tspec.inputs import user_path
from tspec.language.model import Spec
from tspec.language.names import did_you_mean
from tspec.language.parser import parse_file
from tspec.language.variant import Variant

SPEC_DIR = Path(__file__).resolve().parent
BUILTIN_SPEC = SPEC_DIR / "transformer.tspec"


def builtin_specs() -> dict[str, Path]:
    """Built-in specs by name: the Transformer and the five seed transcriptions."""
    specs = {"transformer": BUILTIN_SPEC}
    for path in sorted((SPEC_DIR / "seeds").glob("*.tspec")):
        specs[path.stem] = path
    return specs


def builtin_variants() -> dict[str, Path]:
    return {path.stem: path for path in sorted((SPEC_DIR / "variants").glob("*.toml"))}


@functools.lru_cache(maxsize=64)
def _parse_cached(path: str, mtime_ns: int, size: int) -> Spec:
    return parse_file(path)


def read_spec(path: str | Path) -> Spec:
    """Parse a spec file (cached while the file is unchanged)."""
    path = user_path(path, "a spec path")
    try:
        stat = path.stat()
    except OSError as error:
        raise UsageError(f"cannot read {quoted(str(path))}: {error.strerror}") from None
    if not path.is_file():
        raise UsageError(f"{quoted(str(path))} is not a file")
    limits.doing("reading the spec", str(path))
    return _parse_cached(str(path), stat.st_mtime_ns, stat.st_size)


def is_builtin(variant: Variant) -> bool:
    """Whether a variant (or a bare spec) is one tspec ships, as it ships it: loaded by its
    built-in name, from the built-in's file (settings given on it aside: the caller knows)."""
    if variant.file is None:
        return False
    shipped = (builtin_specs() if variant.is_spec else builtin_variants()).get(variant.name)
    try:
        return shipped is not None and Path(variant.file).resolve() == shipped.resolve()
    except (OSError, RuntimeError):
        return False


def checkout() -> Path | None:
    """The project checkout tspec runs from (an editable install), or None when installed
    as a package: generated files have a default home only in a checkout."""
    root = SPEC_DIR.parent
    return root if (root / "pyproject.toml").is_file() and (root / "tests").is_dir() else None


def in_checkout(relative: str | Path, what: str, option: str) -> Path:
    """The default place of a generated file or folder: ``relative`` in the checkout; outside
    one there is no default and ``option`` must say where."""
    root = checkout()
    if root is None:
        raise UsageError(f"tspec is not running from a project checkout, so {what} has no "
                         f"default place: give {option}")
    return root / relative


def _exists(path: Path) -> bool:
    """Whether a path names a file or folder; a name the system refuses outright (one too long)
    is a UsageError, as an unreadable spec is."""
    try:
        return path.exists()
    except OSError as error:
        raise UsageError(f"cannot read {quoted(str(path))}: {error.strerror}") from None


def resolve_spec(name: str, base_dir: Path | None = None) -> Spec:
    """A spec by built-in name, or by path (relative to base_dir when given)."""
    builtin = builtin_specs()
    if name in builtin:
        return read_spec(builtin[name])
    path = Path(name)
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    if not _exists(path):
        raise UsageError(f"no spec named {name!r}: not a file, and not a built-in spec "
                         f"({', '.join(builtin)}){did_you_mean(name, builtin)}")
    return read_spec(path)
