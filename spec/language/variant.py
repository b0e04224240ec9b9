"""Variants: a spec plus dim values and choices, read from TOML or given with --set.

A variant file::

    spec = "transformer"          # a built-in spec name, or a path relative to this file
    description = "The base model of Vaswani et al. (2017), Table 3"

    [dims]
    d_model = 512
    H = 8

    [choices]
    norm = "post"

    [settings]
    eps = 1e-6                    # run-time numbers of the generated code (spec.ops.SETTINGS)

Everything is validated against the spec: unknown dims or choices, non-integer or
non-positive values, a name set twice, each get an error naming the file and line.
"""

import contextlib
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from tspec.errors import (
    LimitError,
    TspecError,
    UsageError,
    VariantError,
    hidden,
    hidden_kind,
    quoted,
)
from tspec.files import read_limited
from tspec.inputs import real, short_repr
from tspec.language.model import Spec
from tspec.language.names import did_you_mean
from tspec.ops.catalogue import SETTINGS

MAX_VARIANT_BYTES = 1_000_000
MAX_DIGITS = 40
# the sizes `tspec run` gives the dims of these names where a variant leaves them free (a
# batch, sequences, a vocabulary, a position table, token types); every other dim the choices
# use needs a value (the checker says which is missing)
RUN_DEFAULTS = {"B": 2, "T": 32, "T_dec": 32, "V": 1000, "max_len": 512, "V_type": 2}
_INTEGER = re.compile(r"[0-9]+(?:_[0-9]+)*\Z")
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")


@dataclass
class Variant:
    """A spec with some dims bound to values and some choices made."""
    name: str
    spec: Spec
    dims: dict[str, int] = field(default_factory=dict)
    choices: dict[str, str] = field(default_factory=dict)
    file: str | None = None
    description: str = ""
    is_spec: bool = False      # a bare spec: every combination of the choices not set
    published: "Published | None" = None
    settings: dict[str, float] = field(default_factory=dict)   # eps, theta: see SETTINGS
    # where each dim and choice the user gave is given: name -> (line in ``file``, or None,
    # and the text that gives it, ``H_kv = 8`` or ``--set H_kv=8``)
    places: dict[str, tuple[int | None, str]] = field(default_factory=dict)
    setting_places: dict[str, tuple[int | None, str]] = field(default_factory=dict)  # alike
    # the dims tspec gave a size the variant leaves free (tspec run's B, T, V ...): not the
    # user's, so never reported as set for nothing
    defaulted: frozenset[str] = frozenset()

    @property
    def given(self) -> dict[str, int]:
        """The dims the user gave values: the variant's own and --set's."""
        return {name: value for name, value in self.dims.items()
                if name not in self.defaulted}

    def with_settings(self, settings: list[str]) -> "Variant":
        """A copy with ``NAME=VALUE`` settings applied (command-line --set); ``settings`` of
        another type than a list or tuple of strings (the API's) is a UsageError."""
        if not isinstance(settings, (list, tuple)):
            got = f"the str {short_repr(settings)}" if isinstance(settings, str) else \
                type(settings).__name__
            raise UsageError(f"settings are a list of NAME=VALUE strings, got {got}")
        odd = next((item for item in settings if not isinstance(item, str)), None)
        if odd is not None:
            raise UsageError(f"settings are a list of NAME=VALUE strings, got "
                             f"{short_repr(odd)} among them")
        dims, choices, numbers = dict(self.dims), dict(self.choices), dict(self.settings)
        places, setting_places = dict(self.places), dict(self.setting_places)
        seen: set[str] = set()
        for setting in settings:
            name, value = parse_setting(setting)
            where = shown("--set", setting)
            if name in seen:
                raise VariantError(f"--set {name} is given twice")
            seen.add(name)
            if name in self.spec.choices or name in self.spec.dims:
                places[name] = (None, where)
            if name in self.spec.choices:
                choices[name] = _choice_value(self.spec, name, value, where)
            elif name in self.spec.dims and name in SETTINGS:
                try:
                    dims[name] = dim_value(value, where)
                except VariantError as error:
                    raise VariantError(f"{error.message}: {name} is a dim of this spec, which "
                                       f"--set sets; set the setting {name} in a variant's "
                                       "[settings]") from None
            elif name in self.spec.dims:
                dims[name] = dim_value(value, where)
            elif name in SETTINGS:
                numbers[name] = _setting_text(value, where)
                setting_places[name] = (None, where)
            else:
                raise VariantError(f"--set {name}: {_unknown(name, self.spec)}")
        return Variant(self.name, self.spec, dims, choices, self.file, self.description,
                       self.is_spec, self.published, numbers, places, setting_places,
                       self.defaulted - {name for name in seen if name in dims})


@dataclass(frozen=True)
class Published:
    """A variant's published parameter count, where it comes from, and how ours relates."""
    parameters: int
    source: str
    note: str = ""


def shown(option: str, text: str) -> str:
    """A command-line value as an error names it: ``--set H=8`` as given, or quoted when it
    holds a line break or another character that does not print (an error is one line)."""
    return f"{option} {quoted(text)}"


def parse_setting(setting: str) -> tuple[str, str]:
    if setting.count("=") != 1:
        raise VariantError(f"--set {setting!r}: expected NAME=VALUE")
    name, value = (part.strip() for part in setting.split("="))
    if not _NAME.match(name):
        raise VariantError(f"--set {setting!r}: {name!r} is not a dim or choice name")
    if not value:
        raise VariantError(f"--set {setting!r}: the value is empty")
    return name, value


def dim_value(text: str, where: str, error: type[TspecError] = VariantError) -> int:
    """A dim value written as text (``--set``, ``--grid``): a positive integer of at most
    MAX_DIGITS digits, or ``error`` naming ``where``."""
    if not _INTEGER.match(text):
        raise error(f"{where}: dim values are positive integers, got {text!r}")
    if len(text) > MAX_DIGITS:
        raise error(f"{where}: a value of {len(text)} digits; the limit is {MAX_DIGITS}")
    value = int(text)
    if value < 1:
        raise error(f"{where}: dim values are positive integers, got {value}")
    return value


def _setting_text(text: str, where: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise VariantError(f"{where}: settings are positive numbers, got {text!r}") from None
    return _setting_value(value, where)


def _setting_value(value, where: str, file=None, line=None) -> float:
    number = real(value)        # None past a float's range (an integer of 400 digits) too
    if number is None or number <= 0:
        raise VariantError(f"{where}: settings are positive finite numbers, got "
                           f"{short_repr(value)}", file=file, line=line)
    return number


def _choice_value(spec: Spec, name: str, value, where: str, file=None, line=None) -> str:
    options = spec.choices[name].options
    if not isinstance(value, str) or value not in options:
        raise VariantError(f"{where}: choice {name} has no option {value!r}; options: "
                           f"{', '.join(options)}", file=file, line=line)
    return value


def _unknown(name: str, spec: Spec) -> str:
    return _unknown_among(name, spec, "dim, choice or setting",
                          list(spec.dims) + list(spec.choices) + list(SETTINGS))


def _unknown_among(name: str, spec: Spec, what: str, known: list[str]) -> str:
    """'unknown WHAT NAME in spec S', with the closest known name as a suggestion."""
    return f"unknown {what} {name!r} in spec {spec.name}{did_you_mean(name, known)}"


def _line_of(text: str, section: str | None, key: str) -> int | None:
    """The line where a key is set, within a [section] (or at the top when None)."""
    current = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        header = re.match(r"\[\s*([A-Za-z0-9_.\"' -]+?)\s*\]\s*(#.*)?$", line)
        if header:
            current = header.group(1).strip().strip("\"'")
            continue
        if current == section and re.match(rf"[\"']?{re.escape(key)}[\"']?\s*=", line):
            return number
    return None


@contextlib.contextmanager
def _at_line(text: str, section: str, key: str):
    """A VariantError raised inside, placed at the line that sets ``key`` in [section]: found
    only for an error (finding it for every key would read the file once a key)."""
    try:
        yield
    except VariantError as error:
        if error.line is None:
            error.line = _line_of(text, section, key)
        raise


def load_variant(path: str | Path, resolve_spec) -> Variant:
    """Read a variant TOML file; ``resolve_spec(name_or_path, base_dir)`` finds its spec."""
    path = Path(path)
    file = str(path)
    try:
        raw = read_limited(path, MAX_VARIANT_BYTES, "variant", VariantError)
    except OSError as error:
        raise UsageError(f"cannot read {file}: {error.strerror}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise VariantError(f"not UTF-8 text ({error.reason} at byte {error.start})",
                           file=file) from None
    return variant_from_text(text, path, resolve_spec)


def variant_from_text(text: str, path: Path, resolve_spec, called: str | None = None) -> Variant:
    """A variant from its TOML text, placed as the file ``path`` (its spec found from path's
    folder) and named after it unless ``called`` names it, whether or not that file exists (an
    imported config's variant)."""
    file = str(path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise VariantError(f"malformed TOML: {error}", file=file) from None
    except ValueError as error:     # e.g. an integer past Python's digit limit
        raise VariantError(f"malformed TOML: {error}", file=file) from None
    allowed = {"spec", "description", "dims", "choices", "settings", "published"}
    for key in data:
        if key not in allowed:
            raise VariantError(f"unknown key {key!r} (allowed: {', '.join(sorted(allowed))})",
                               file=file, line=_line_of(text, None, key))
    spec_name = data.get("spec")
    if not isinstance(spec_name, str) or not spec_name:
        raise VariantError("a variant names its spec: spec = \"transformer\" or a path",
                           file=file, line=_line_of(text, None, "spec"))
    if spec_name.endswith(".toml"):
        raise VariantError(f"spec = {spec_name!r} names a variant; a variant's spec is a "
                           ".tspec file or a built-in spec name", file=file,
                           line=_line_of(text, None, "spec"))
    try:
        spec = resolve_spec(spec_name, path.parent)
    except LimitError:      # the time limit, fired reading it: itself, placed where it fired
        raise
    except TspecError as error:
        raise _pointed_at(error, spec_name, file, _line_of(text, None, "spec")) from None
    description = data.get("description", "")
    if not isinstance(description, str):
        raise VariantError("description must be a string", file=file,
                           line=_line_of(text, None, "description"))
    control = next((c for c in description if hidden(c)), None)
    if control is not None:
        raise VariantError(f"description holds the {hidden_kind(control)} U+{ord(control):04X}",
                           file=file, line=_line_of(text, None, "description"))
    dims: dict[str, int] = {}
    for section in ("dims", "choices", "settings"):
        table = data.get(section, {})
        if not isinstance(table, dict):
            raise VariantError(f"{section} must be a table: [{section}]", file=file,
                               line=_line_of(text, None, section))
    for name, value in data.get("dims", {}).items():
        with _at_line(text, "dims", name):
            if name not in spec.dims:
                raise VariantError(f"[dims] {unknown_dim(name, spec)}", file=file)
            if isinstance(value, bool) or not isinstance(value, int):
                raise VariantError(f"[dims] {name} = {value!r}: dim values are positive "
                                   "integers", file=file)
            if value < 1:
                raise VariantError(f"[dims] {name} = {value}: dim values are positive integers",
                                   file=file)
            if value >= 10 ** MAX_DIGITS:
                raise VariantError(f"[dims] {name}: a value of more than {MAX_DIGITS} digits",
                                   file=file)
        dims[name] = value
    places = {name: (_line_of(text, "dims", name), f"{name} = {dims[name]}") for name in dims}
    choices: dict[str, str] = {}
    for name, value in data.get("choices", {}).items():
        with _at_line(text, "choices", name):
            if name in dims:
                raise VariantError(f"{name} is set in both [dims] and [choices]", file=file)
            if name not in spec.choices:
                known = ", ".join(spec.choices) or "none"
                raise VariantError(f"[choices] unknown choice {name!r}; the spec's choices: "
                                   f"{known}", file=file)
            choices[name] = _choice_value(spec, name, value, f"[choices] {name}", file)
            places[name] = (_line_of(text, "choices", name), f'{name} = "{value}"')
    settings: dict[str, float] = {}
    setting_places: dict[str, tuple[int | None, str]] = {}
    for name, value in data.get("settings", {}).items():
        line = _line_of(text, "settings", name)
        if name not in SETTINGS:
            raise VariantError(f"[settings] unknown setting {name!r}; settings: "
                               f"{', '.join(SETTINGS)}", file=file, line=line)
        settings[name] = _setting_value(value, f"[settings] {name}", file, line)
        setting_places[name] = (line, f"{name} = {value}")
    published = _published(data.get("published"), text, file)
    return Variant(called or path.stem, spec, dims, choices, file, description, published=published,
                   settings=settings, places=places, setting_places=setting_places)


def _pointed_at(error: TspecError, spec_name: str, file: str, line: int | None) -> TspecError:
    """An error reading or parsing the spec a variant names, saying which variant named it:
    at the spec's line where it has one, else at the variant's ``spec =`` line."""
    if error.line is not None:
        where = f"{file}:{line}" if line is not None else file
        return type(error)(f"{error.message} (read as the spec of {where})",
                           file=error.file, line=error.line, column=error.column)
    return type(error)(f"spec = {spec_name!r}: {error}", file=file, line=line)


def _published(table, text: str, file: str) -> Published | None:
    """The [published] table: parameters (a positive integer), source and note (text)."""
    if table is None:
        return None
    if not isinstance(table, dict):
        raise VariantError("published must be a table: [published]", file=file,
                           line=_line_of(text, None, "published"))
    for key, value in table.items():
        line = _line_of(text, "published", key)
        if key not in ("parameters", "source", "note"):
            raise VariantError(f"[published] unknown key {key!r} (allowed: note, parameters, "
                               "source)", file=file, line=line)
        if key == "parameters" and (isinstance(value, bool) or not isinstance(value, int)
                                    or value < 1):
            raise VariantError(f"[published] parameters = {value!r}: a positive integer",
                               file=file, line=line)
        if key != "parameters" and not isinstance(value, str):
            raise VariantError(f"[published] {key} must be a string", file=file, line=line)
        control = next((c for c in value if hidden(c)), None) if key != "parameters" else None
        if control is not None:             # the docs place it as one line of text
            raise VariantError(f"[published] {key} holds the {hidden_kind(control)} "
                               f"U+{ord(control):04X}", file=file, line=line)
    if "parameters" not in table or "source" not in table:
        raise VariantError("[published] needs parameters and source", file=file,
                           line=_line_of(text, None, "published"))
    return Published(table["parameters"], table["source"], table.get("note", ""))


def unknown_dim(name: str, spec: Spec) -> str:
    return _unknown_among(name, spec, "dim", list(spec.dims))
