"""Values a user hands tspec, made safe before anything is computed from them: paths (a str
or path object, no NUL), JSON text (its integers bounded before Python converts them, which
takes time quadratic in their digits and past 4,300 digits raises), and numbers from JSON,
TOML or the Python API (NumPy's scalars taken as Python's, and bounded before any arithmetic
or conversion to a float).

Each refusal is one of tspec's own errors (``spec.errors``), raised by the caller with its
place, or here as a ``UsageError`` for a path.
"""

import json
import math
import os
import re
from pathlib import Path

from tspec.errors import TspecError, UsageError, quoted
from tspec.numbers import approximate

# digits of an integer in JSON text that tspec converts: as many as a constant in a spec may
# have (spec.numbers.SHOWN_DIGITS); a size, an offset or a dim has at most 40
MAX_JSON_DIGITS = 1000
# nesting of the API's dicts and lists that ``plain`` follows (json.loads stops at about 1,000)
MAX_DEPTH = 200


class LongInteger(ValueError):
    """An integer in JSON text of more than MAX_JSON_DIGITS digits: where, and how long.
    ``str``: the refusal with its place in words; ``message``: without it (for an error
    that gives the line and column as its place)."""

    def __init__(self, digits: int, line: int | None, column: int | None):
        self.message = (f"an integer of {digits:,} digits; tspec reads integers of at most "
                        f"{MAX_JSON_DIGITS:,}")
        where = f" (line {line}, column {column})" if line is not None else ""
        super().__init__(self.message.replace(";", f"{where};", 1))
        self.digits, self.line, self.column = digits, line, column


def json_loads(text: str):
    """``json.loads``, every integer of more than MAX_JSON_DIGITS digits refused (a
    ``LongInteger``) before it is converted; other errors as json.loads raises them."""
    def integer(digits: str) -> int:
        if len(digits) - digits.startswith("-") > MAX_JSON_DIGITS:
            raise _long(text, digits)
        return int(digits)
    return json.loads(text, parse_int=integer)


def _long(text: str, digits: str) -> LongInteger:
    """The error for the first integer of the text that long (its place: where the digits
    first stand outside a string, as far as a search tells)."""
    count = len(digits) - digits.startswith("-")
    found = re.search(rf"(?<![\d.eE\"])-?\d{{{MAX_JSON_DIGITS + 1},}}", text)
    if found is None:
        return LongInteger(count, None, None)
    line = text.count("\n", 0, found.start()) + 1
    column = found.start() - (text.rfind("\n", 0, found.start()) + 1) + 1
    return LongInteger(count, line, column)


def user_path(value, what: str = "a path") -> Path:
    """A path a user gave (a str or a path object): refused, as a UsageError, when it is of
    another type or holds a NUL, which no file name holds (the system refuses it with a
    ValueError)."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise UsageError(f"{what} is a str or a path object, got {type(value).__name__}"
                         + (f" {short_repr(value)}" if _scalar(value) else ""))
    if "\0" in value:
        raise UsageError(f"{what} {quoted(value)} holds a NUL character, which no file name "
                         "holds")
    return Path(value)


def _scalar(value) -> bool:
    return isinstance(value, (int, float, bytes, bool)) or _numpy(value)


def _numpy(value) -> bool:
    """A NumPy scalar (np.int64(8), np.float32(1e-5), np.bool_(True)), known without importing
    NumPy."""
    kind = type(value)
    return kind.__module__ == "numpy" and hasattr(value, "item") and getattr(
        value, "shape", None) == ()


def plain(value, depth: int = 0):
    """``value`` (a config's dict, as the API was given it) with every NumPy scalar in it as
    the Python number or bool it holds (``item()``), so that a config read from a dict is
    read as its JSON would be; dicts, lists and tuples are copied (tuples as lists) to
    MAX_DEPTH levels, deeper ones kept as they are."""
    if _numpy(value):
        return value.item()
    if depth >= MAX_DEPTH:
        return value
    if isinstance(value, dict):
        return {key: plain(item, depth + 1) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item, depth + 1) for item in value]
    return value


def integer(value) -> int | None:
    """``value`` as a Python int when it is an integer (a Python or NumPy one; not a bool),
    else None."""
    if _numpy(value):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def real(value) -> float | None:
    """``value`` as a finite float when it is a finite number (an int or float, Python's or
    NumPy's; not a bool) that a float holds, else None: an integer past a float's range
    (10**400) is none, found before any conversion."""
    if _numpy(value):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, int):
        if value.bit_length() > 1024:           # float(value) would overflow
            return None
        value = float(value)
    return value if math.isfinite(value) else None


def short_repr(value, room: int = 80) -> str:
    """``repr(value)`` of a value read from a file or given to the API, cut short after
    ``room`` characters, and never converting a long integer to text: past 80 digits it is
    shown as ``~1.000e999`` (spec.numbers.integer_text), as it is inside a list or dict."""
    parts: list[str] = []
    _short(value, parts, room + 1, 0)
    text = "".join(parts)
    return text if len(text) <= room else text[:room - 3] + "..."


def _short(value, parts: list[str], room: int, depth: int) -> int:
    """Append the repr of ``value`` to ``parts`` until ``room`` characters are used; the
    characters left."""
    if room <= 0:
        return 0
    if isinstance(value, int) and not isinstance(value, bool):
        text = approximate(value) if value.bit_length() > 266 else repr(value)   # 80 digits
        parts.append(text)
        return room - len(text)
    if isinstance(value, (list, tuple, dict)) and depth < 32:
        items = value.items() if isinstance(value, dict) else value
        opening, closing = {list: "[]", tuple: "()", dict: "{}"}[
            dict if isinstance(value, dict) else list if isinstance(value, list) else tuple]
        parts.append(opening)
        room -= 1
        for index, item in enumerate(items):
            if room <= 0:
                return 0
            if index:
                parts.append(", ")
                room -= 2
            if isinstance(value, dict):
                room = _short(item[0], parts, room, depth + 1)
                parts.append(": ")
                room = _short(item[1], parts, room - 2, depth + 1)
            else:
                room = _short(item, parts, room, depth + 1)
        if isinstance(value, tuple) and len(value) == 1:
            parts.append(",")
            room -= 1
        parts.append(closing)
        return room - 1
    if isinstance(value, str) and len(value) > room:
        value = value[:room]                    # its repr is cut in any case
    try:
        text = repr(value)
    except TspecError:          # the time limit, fired in here
        raise
    except Exception:  # noqa: BLE001 (any object the API was given: its type then)
        text = f"<{type(value).__name__}>"
    text = text if text.isprintable() else ascii(text)
    parts.append(text[:room + 1])
    return room - len(text)


def count_text(n: int) -> str:
    """A count or a size read from a file, grouped (``36,893,488,147,419,103,232``), or past
    60 digits as ``approximate`` gives it."""
    return f"{n:,}" if n.bit_length() <= 199 else approximate(n)
