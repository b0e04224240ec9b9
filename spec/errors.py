"""The errors tspec raises on bad input: one small hierarchy, one place.

Every error names what went wrong and where (file, line, column when known). The CLI prints
``str(error)`` and exits 2; nothing else in tspec raises a bare exception at a user.
Shape problems in a well-formed spec are not errors: they are findings (see ``spec.findings``).
"""


import unicodedata

# Unicode categories of the characters that end a line (of Python source, of a terminal's
# output) or do not show: control and format characters, line and paragraph separators, and
# lone surrogates (how Python holds a byte of a file name that is not UTF-8; no encoder takes it)
HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


def hidden(char: str) -> bool:
    """Whether a character ends a line or does not show (HIDDEN_CATEGORIES)."""
    return unicodedata.category(char) in HIDDEN_CATEGORIES


def hidden_kind(char: str) -> str:
    """What an error calls a hidden character: "line separator", "paragraph separator", "lone
    surrogate" or "control character" (format characters too: they are as invisible)."""
    if unicodedata.category(char) in ("Zl", "Zp"):
        return unicodedata.name(char).lower()
    if unicodedata.category(char) == "Cs":
        return "lone surrogate"
    return "control character"


def quoted(text: str) -> str:
    """User text (a path, a command-line value) as an error names it: as it is, or quoted when
    it holds a line break or another character that does not print (an error is one line)."""
    return text if text.isprintable() else repr(text)


class TspecError(Exception):
    """Base class: bad input that tspec refuses, with the place it was found."""

    exit_status = 2           # the command line's: bad usage or unreadable input

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None,
                 column: int | None = None):
        super().__init__(message)
        self.message = message
        self.file = file
        self.line = line
        self.column = column

    @property
    def where(self) -> str:
        parts = [p for p in (self.file, self.line, self.column) if p is not None]
        return ":".join(str(p) for p in parts)

    def __str__(self) -> str:
        return f"{self.where}: {self.message}" if self.where else self.message


class SpecSyntaxError(TspecError):
    """Spec text that does not parse: a bad token, a missing '=', bad indentation."""


class SpecError(TspecError):
    """A spec that parses but means nothing: unknown or duplicate names, cycles, wrong ranks."""


class VariantError(TspecError):
    """A variant (TOML file or --set value) that names unknown things or gives bad values."""


class UsageError(TspecError):
    """The command line or API was called wrongly: unknown spec name, unreadable path."""


class CodegenError(TspecError):
    """A spec that cannot become code: not proved, or a construct code generation lacks."""


class FindingsError(CodegenError):
    """A command refused a spec or variant with findings (nothing to run, no code generated):
    ``findings`` holds them, which the command line lists before the message, as `tspec
    check` lists them. Not bad input: the model is at fault, and the command line exits 1."""

    exit_status = 1

    def __init__(self, message: str, findings: list, *, exit_status: int = 1, **place):
        super().__init__(message, **place)
        self.findings = findings
        self.exit_status = exit_status      # `tspec diff`: 2, its 1 says the two differ

    def __str__(self) -> str:
        first = self.findings[0] if self.findings else None
        if first is None:
            return super().__str__()
        return f"{super().__str__()} (the first: {first.where}: {first.kind}: {first.message})"


class ConfigError(TspecError):
    """A Hugging Face config that cannot become a variant (`tspec import`): malformed, of a
    model type tspec does not import, or with a field whose value the spec has no choice
    for, named with its value."""


class GridError(UsageError):
    """A grid that cannot be evaluated: bad --grid syntax, an unknown, derived or doubly given
    dim, values that are not positive integers, an empty range, or too many combinations."""


class LimitError(TspecError):
    """Work past a bound tspec sets so that no input can make it hang or exhaust the machine:
    the checker's time limit, the number of tensors a spec expands to."""


class RunError(TspecError):
    """The generated code of a variant the checker passed raised an error as it ran (`tspec
    run`): the message names the generated functions it was in. A finding about the model,
    not bad input: the command line exits 1, as for findings."""

    exit_status = 1
