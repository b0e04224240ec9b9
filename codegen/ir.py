"""The intermediate representation code generation renders: plain data, no behaviour.

Lowering (``codegen.lowering``) turns a proved spec under one choice of options into a
``Module``: helper functions (one per op that needs more than an operator), parameter
containers, and one ``Function`` per block plus one for the model. Every value carries its
shape as text in the spec's dims. The templates only loop over these records and place their
strings.
"""

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Argument:
    name: str
    annotation: str            # Float[np.ndarray, "B T d_model"]
    shape: str                 # the spec's shape text, [H] B T d_k


@dataclass(frozen=True)
class Keyword:
    """A keyword-only argument: a dim no array reveals (H), or a setting (eps)."""
    name: str
    annotation: str
    default: str | None        # code, or None when required
    meaning: str


@dataclass(frozen=True)
class Field:
    """One entry of a parameter container."""
    name: str
    annotation: str
    meaning: str


@dataclass(frozen=True)
class ParamsClass:
    name: str                  # MultiHeadAttentionParams
    doc: str
    fields: tuple[Field, ...]


@dataclass(frozen=True)
class Step:
    """One statement of a function body: lines of code, each ending in a shape comment."""
    lines: tuple[str, ...]


@dataclass(frozen=True)
class EquationDoc:
    plain: str
    latex: str
    where: str                 # spec/transformer.tspec:57


@dataclass(frozen=True)
class Function:
    name: str
    summary: str
    source: str                # the seed section it comes from
    where: str                 # spec file and line of the block
    equations: tuple[EquationDoc, ...]
    arguments: tuple[Argument, ...]
    params_class: str | None
    cache: bool                # takes its instance's key-value cache (a dict of states)
    keywords: tuple[Keyword, ...]
    returns: str               # the return annotation
    prologue: tuple[str, ...]  # dims read from array shapes
    steps: tuple[Step, ...]
    traced: tuple[str, ...]    # names recorded in the trace
    result: str                # the return expression
    traces: bool = True        # takes a trace argument
    notes: tuple[str, ...] = ()  # paragraphs of the docstring after the equations


@dataclass(frozen=True)
class Constant:
    """A module-level name the functions share: its comment and its value's lines."""
    name: str
    comment: str
    lines: tuple[str, ...]     # the value, the first line right after "NAME = "


@dataclass(frozen=True)
class Helper:
    name: str                  # the function's name
    template: str              # the template it is rendered from (the backend's choice)


@dataclass
class Module:
    spec_name: str
    title: str
    spec_file: str             # as shown: spec/transformer.tspec
    spec_hash: str
    choices: tuple[tuple[str, str], ...]
    backend: object            # codegen.backends.Backend
    imports: list[str] = field(default_factory=list)
    helpers: list[Helper] = field(default_factory=list)
    params_classes: list[ParamsClass] = field(default_factory=list)
    functions: list[Function] = field(default_factory=list)
    entry: str = ""            # the model's function
    constants: list[Constant] = field(default_factory=list)
