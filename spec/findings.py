"""Findings: what the checker reports about a well-formed spec, and how they are shown.

A finding is a record, never an exception: the checker collects all of them. Each names the
spec file and line, the equation, the tensor, expected vs inferred shape, a counterexample (the
smallest sizes allowed by the constraints that break the claim), the dim values involved, and a
hint for the fix.
"""

import json
import os
from dataclasses import asdict, dataclass, field
from fractions import Fraction

from spec.numbers import shown_json, value_text

# Every kind of finding, with what it means. Tests pin one message per kind.
KINDS = {
    "shape-mismatch": "an equation's declared shape differs from the shape its ops produce",
    "dtype-mismatch": "an equation's declared dtype differs from the dtype its ops produce",
    "operand-mismatch": "an op's operands do not fit together (matmul inner dims, broadcasting)",
    "argument-mismatch": "a block call passes a tensor whose shape differs from the block input",
    "repeat-mismatch": "a repeated block's output cannot feed its next copy",
    "not-divisible": "an op needs one dim to divide another (heads, rotary's feature pairs)",
    "not-integral": "a derived dim is not a whole number for every allowed size",
    "out-of-range": "an op needs one size not to exceed another (positions vs table length)",
    "unproved": "a claim neither proved nor refuted by a counterexample",
    "unstated-shape": "a parameter's or input's shape is unstated: what its source implies "
                      "(or its uses need) is reported",
    "name-reused": "the source uses one name for different things (the spec names each)",
    "constraint-violated": "a variant's dim values break a constraint",
    "unsatisfiable": "no sizes meet every constraint, so every claim would hold vacuously",
    "decoding-mismatch": "a decoding step does not fit the full model that starts it: a state "
                         "kept outside the step or started from a tensor the full model lacks, "
                         "or a step input the full model does not take",
}


def format_value(value) -> str:
    return value_text(value)


@dataclass
class Finding:
    kind: str
    message: str
    file: str | None = None
    line: int | None = None
    equation: str = ""
    tensor: str = ""
    expected: str | None = None
    inferred: str | None = None
    counterexample: dict | None = None
    dims: dict = field(default_factory=dict)
    hint: str = ""
    scope: str = "all sizes"             # 'all sizes' (the proof) or 'variant' (given values)
    choices: str = ""                    # which choice combinations show it
    # the checker's own record of the choices it saw the finding under, before ``choices``
    # describes the combinations; not part of the finding's text or data
    selection: dict = field(default_factory=dict, repr=False, compare=False)

    def key(self) -> tuple:
        return (self.kind, self.file, self.line, self.message, self.expected, self.inferred,
                self.scope)

    @property
    def where(self) -> str:
        if self.file is None:
            return "<spec>"
        file = display_path(self.file)
        return f"{file}:{self.line}" if self.line is not None else file

    def details(self) -> list[tuple[str, str]]:
        """The finding's facts as (label, text) pairs, in the order they are shown."""
        facts = [("equation", self.equation), ("tensor", self.tensor),
                 ("expected", self.expected), ("inferred", self.inferred),
                 ("counterexample", _pairs(self.counterexample or {})),
                 ("dims", _pairs(self.dims)), ("choices", self.choices), ("hint", self.hint)]
        return [(label, text) for label, text in facts if text]

    def text(self) -> str:
        lines = [f"{self.where}: {self.kind}: {self.message}"]
        lines += [f"    {label}: {text}" for label, text in self.details()]
        return "\n".join(lines)

    def as_dict(self) -> dict:
        data = asdict(self)
        del data["selection"]
        for name in ("counterexample", "dims"):
            if data[name] is not None:
                data[name] = {k: (format_value(v) if isinstance(v, Fraction) else v)
                              for k, v in data[name].items()}
        return data


def display_path(path: str, base: str | None = None) -> str:
    """A path relative to ``base`` (default: the working directory) when it lies inside it."""
    try:
        relative = os.path.relpath(path, base or os.getcwd())
    except ValueError:
        return path
    return path if relative.startswith("..") else relative


def _pairs(values: dict) -> str:
    return ", ".join(f"{k}={format_value(v)}" for k, v in values.items())


def to_json(payload) -> str:
    return json.dumps(shown_json(payload), indent=2, sort_keys=False)
