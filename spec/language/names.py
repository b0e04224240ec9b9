"""Which names a spec may use: every name becomes code, so only plain identifiers pass."""

import builtins
import difflib
import keyword
import re

from tspec.errors import SpecError

MAX_NAME_LENGTH = 64
_IDENTIFIER = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")
# The spec language's own words, which no name may be.
KEYWORDS = frozenset({
    "spec", "source", "note", "dim", "let", "require", "choice", "when", "else", "input",
    "param", "tensor", "output", "block", "as", "in", "repeat", "float", "int", "bool", "reused",
    "state", "update", "rename",
})
# Generated code keeps its own names (settings, locals, constants, its helpers behind `rt.`) out
# of the spec's: a spec name like one of them is spelt otherwise there
# (tspec.codegen.lowering.spelling), so the language reserves only its own words.
RESERVED = KEYWORDS


def check_name(name: str, what: str, *, file: str | None = None, line: int | None = None,
               value_only: bool = False) -> str:
    """Return ``name`` if it is safe to become a Python identifier in generated code.

    A name must be ASCII letters, digits and underscores, start with a letter, be at most
    MAX_NAME_LENGTH long, and be neither a Python keyword, a builtin, nor a reserved word.
    ``value_only`` names (choice options) never become identifiers, so only the first rules
    apply to them.
    """
    if len(name) > MAX_NAME_LENGTH:
        raise SpecError(f"{what} name {name[:20]!r}... is {len(name)} characters long; "
                        f"the limit is {MAX_NAME_LENGTH}", file=file, line=line)
    if not _IDENTIFIER.match(name):
        raise SpecError(f"{what} name {name!r} is not a plain identifier "
                        "(ASCII letter first, then letters, digits, underscores)",
                        file=file, line=line)
    if keyword.iskeyword(name) or keyword.issoftkeyword(name):
        raise SpecError(f"{what} name {name!r} is a Python keyword", file=file, line=line)
    if value_only:
        return name
    if name in RESERVED:
        raise SpecError(f"{what} name {name!r} is a word of the spec language",
                        file=file, line=line)
    if hasattr(builtins, name):
        raise SpecError(f"{what} name {name!r} shadows a Python builtin", file=file, line=line)
    return name


def module_name_like(text: str) -> str:
    """``text`` as a Python module name: every character but ASCII letters, digits and
    underscores an underscore, ``model_`` before one that does not start with a letter, an
    underscore after a keyword (``Meta-Llama-3.1-8B``: ``Meta_Llama_3_1_8B``)."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", text)
    if not name[:1].isalpha():
        name = f"model_{name}"
    return name + "_" if keyword.iskeyword(name) else name


def did_you_mean(name: str, known) -> str:
    """``; did you mean 'X'?`` for the known name closest to ``name``, or '' where none is
    close: the end of a message that names an unknown name."""
    close = difflib.get_close_matches(name, list(known), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""
