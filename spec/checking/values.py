"""A variant's dims against its choices: a value given for a dim nothing under the choices
uses (``H_kv`` without ``key_value_heads = grouped``: the model built has every head's keys),
and a dim the choices use that has no value and none that `tspec run` gives.

Only the user's values count: those of the variant's ``[dims]`` and of ``--set``, never the
spec's fixed dims nor the sizes tspec gives dims a variant leaves free. A bare spec checked
under every combination of its choices sets a dim for nothing only where no combination that
the fixed choices allow uses it; it needs no value.
"""

from tspec.checking.findings import Finding
from tspec.language.model import NEW, PAST, Let, select
from tspec.language.uses import (
    choice_uses,
    condition_text,
    dim_uses,
    holds,
    setting_uses,
    unused,
)
from tspec.language.variant import RUN_DEFAULTS, Variant


def value_findings(variant: Variant) -> list[Finding]:
    """The findings of a variant's values against its choices (see the module's docs), each
    at the line that gives the value (the variant's file), in the order the spec declares
    the dims."""
    spec = variant.spec
    given = variant.given
    if not given and variant.is_spec:
        return []
    where = variant.file or spec.file
    found = []
    # a bare spec: the choices it fixes; every other takes any option
    chosen = dict(variant.choices) if variant.is_spec else spec.choice_values(variant.choices)
    gone = unused(spec, chosen, [name for name in spec.dims if name in given])
    for item in gone:
        line, text = variant.places.get(item.dim, (None, f"{item.dim} = {given[item.dim]}"))
        under = item.under
        hint = (f"set {condition_text(under, spec)} to use it, or remove {item.dim}"
                if under else f"remove {item.dim}")
        found.append(Finding(
            kind="unused-dim",
            message=f"{item.dim} is set but unused: {item.text(spec)}",
            file=where, line=line, equation=text,
            # (a dim a grid varies has no one value: its --grid says them)
            dims={} if text.startswith("--grid") else {item.dim: given[item.dim]},
            hint=hint, scope="variant"))
    found += unused_choices(variant, chosen, where) + unused_settings(variant, chosen, where)
    if variant.is_spec:
        return found
    found += missing(variant, chosen, where)
    return found


def unused_choices(variant: Variant, chosen: dict[str, str], where: str | None) -> list:
    """The choices the user set to another option than the default that no `when` under the
    other choices consults (attention_window = sliding in an encoder-only model, which has no
    decoder self-attention to narrow): the model built is the default's, whatever it says."""
    spec = variant.spec
    given = [name for name, value in variant.choices.items()
             if value != spec.choices[name].default]
    found = []
    for item in unused(spec, chosen, given, choice_uses(spec)):
        value = variant.choices[item.dim]
        line, text = variant.places.get(item.dim, (None, f"{item.dim} = {value}"))
        found.append(Finding(
            kind="unused-choice",
            message=f"{item.dim} = {value} is set but unused: "
                    + (f"it is consulted under {condition_text(item.under, spec)}"
                       if item.under else "no `when` of the spec consults it"),
            file=where, line=line, equation=text,
            hint=(f"set {condition_text(item.under, spec)} for it to count, or remove "
                  f"{item.dim}" if item.under else f"remove {item.dim}"), scope="variant"))
    return found


def unused_settings(variant: Variant, chosen: dict[str, str], where: str | None) -> list:
    """The settings the user gave (eps, theta, rope_factor ...) that no op the choices apply
    reads (theta without rotary positions)."""
    spec = variant.spec
    found = []
    for item in unused(spec, chosen, list(variant.settings), setting_uses(spec)):
        line, text = variant.setting_places.get(
            item.dim, (None, f"{item.dim} = {variant.settings[item.dim]!r}"))
        found.append(Finding(
            kind="unused-setting",
            message=f"{item.dim} is set but unused: "
                    + (f"the ops that read it are applied under "
                       f"{condition_text(item.under, spec)}" if item.under else
                       "no op of the spec reads it under any choices"),
            file=where, line=line, equation=text,
            hint=(f"set {condition_text(item.under, spec)} for it to count, or remove "
                  f"{item.dim}" if item.under else f"remove {item.dim}"), scope="variant"))
    return found


def _decides(spec, dim: str, choice: str, chosen: dict[str, str]) -> bool:
    """Whether another option of ``choice``, the rest as chosen, leaves ``dim`` unused or
    derived."""
    for option in spec.choices[choice].options:
        if option == chosen[choice]:
            continue
        other = chosen | {choice: option}
        derived = {s.dim for s in select(spec.body, other) if isinstance(s, Let)}
        if dim in derived or not any(holds(c, other) for c in dim_uses(spec)[dim]):
            return True
    return False


def missing(variant: Variant, chosen: dict[str, str], where: str | None) -> list[Finding]:
    """The dims the choices use that have no value: neither given, nor fixed by the spec, nor
    derived under the choices, nor sized by `tspec run` (RUN_DEFAULTS, and the decoding
    step's positions, which `tspec run --decode` sets)."""
    spec = variant.spec
    derived = {s.dim for s in select(spec.body, chosen) if isinstance(s, Let)}
    sized = set(RUN_DEFAULTS) | {PAST, NEW}
    found = []
    for name, conditions in dim_uses(spec).items():
        if name in variant.dims or name in derived or name in sized or \
                spec.dims[name].value is not None:
            continue
        if not any(holds(c, chosen) for c in conditions):
            continue
        # the choices that make it needed: each one another option of which would leave the
        # dim unused or derived (head_dims = free for d_v), the user's own first
        decisive = [name_ for name_ in spec.choices if _decides(spec, name, name_, chosen)]
        mine = [c for c in decisive if c in variant.places]
        named = mine or decisive
        set_here = [c for c in named if c in variant.places]
        line = variant.places[set_here[0]][0] if set_here else None
        why = "under " + " and ".join(f"{c} = {chosen[c]}" for c in named) if named else \
            "under every choice"
        listed = [n for n in spec.dims if n in RUN_DEFAULTS]
        sizes = f"{', '.join(listed[:-1])} and {listed[-1]}" if len(listed) > 1 else \
            "".join(listed)
        found.append(Finding(
            kind="missing-dim",
            message=f"{name} has no value, and the model uses it ({why})",
            file=where, line=line, equation=variant.places[set_here[0]][1] if set_here else "",
            hint=f"give it a value: {name} = VALUE in the variant's [dims], or --set "
                 f"{name}=VALUE" + (f" (tspec run sizes {sizes} itself, no other dim)"
                                    if listed else ""), scope="variant"))
    return found
