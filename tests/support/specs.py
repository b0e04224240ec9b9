"""Small specs that more than one test module runs."""

import re

# A decoder of one cached layer: the smallest spec with the choice `decoding` (test_decoding
# generates and decodes it; test_rules checks that what tspec check proves of its changed
# copies, code generation and tspec run accept).
TINY = """\
spec tiny "a decoder of one cached layer"
dim B "batch"
dim T "length"
dim T_past "positions decoded before"
dim T_new "positions a step adds"
dim d "width"
choice decoding = full | step "the whole sequence, or one step"

block attend(X "B T_x d") -> Y:
    dim T_x "length"
    param W "d d" "weight"
    K "B T_x d" "keys" = X @ W
    Y "B T_x d" "output" = K + X

block attend_cached(X "B T_x d") -> Y:
    dim T_x "positions this step adds"
    param W "d d" "weight"
    state K_past "B T_past d" "keys so far" from K
    K "B T_x d" "new keys" = X @ W
    K_all "B T_past+T_x d" "every key" = concat(K_past, K, axis=-2)
    update K_past = K_all
    Y "B T_x d" "output" = K + X

when decoding == full:
    input X "B T d" "input"
    Y "B T d" "output" = attend(X) as first
else:
    input X "B T_new d" "the new positions' input"
    Y "B T_new d" "output at the new positions" = attend_cached(X) as first
output Y
"""


def settings_for(spec, choices: dict, dims: dict) -> list[str]:
    """``--set NAME=VALUE`` for the choices in force, and for those of the dims they use: a
    value given for a dim nothing under the choices uses is a finding (unused-dim), as is an
    option no `when` consults (unused-choice), so a test that draws one set of sizes and
    options for every choice gives each variant its own."""
    from tspec.language.model import choices_in_force
    from tspec.language.uses import used_dims
    chosen = spec.choice_values(choices)
    used = used_dims(spec, chosen)
    return [f"{k}={v}" for k, v in choices_in_force(spec, chosen).items()] + \
        [f"{k}={v}" for k, v in dims.items() if k in used]


def builtin_line(text: str) -> int:
    """The line of the built-in spec (spec/transformer.tspec) that holds ``text``, found by
    its content, so that a test naming a line of the spec does not break when lines are added
    to it; ``text`` must be on exactly one line."""
    from tspec import api
    found = [number for number, line in enumerate(api.BUILTIN_SPEC.read_text().splitlines(), 1)
             if text in line]
    assert len(found) == 1, f"{text!r} is on lines {found} of the built-in spec, not on one"
    return found[0]


# Where `with_more_choices` adds its choices: block -> how many `when`s it reads there. The
# model families to come read theirs in the attention and layer blocks (q/k norms,
# soft-capping, sandwich norms, parallel blocks): 11 of the 15 sit there.
MORE_CHOICES = {
    "scaled_dot_product_attention": 3, "multi_head_attention": 3, "cached_self_attention": 1,
    "encoder_layer": 2, "decoder_layer": 2, "feed_forward": 2, "normalize": 1,
    "add_and_layer_norm": 1,
}
_EQUATION = re.compile(r'^( +)(\w+)(\[\w+\])? ("[^"]*")( "[^"]*")? = (.+)$')


def with_more_choices(text: str, places: dict[str, int] = MORE_CHOICES) -> tuple[str, dict]:
    """A spec's text with two-valued choices added (``extra_0 = plain | capped``...), each read
    by a `when` in the blocks ``places`` names: an equation of the block becomes
    `when extra_i == capped:` the same equation through tanh, `else:` as it was (ops that
    exist, shapes unchanged). Returns the text and the number added per block."""
    out, block, added, choices = [], None, {}, []
    for line in text.splitlines():
        opened = re.match(r"^block (\w+)\(", line)
        if opened:
            block = opened.group(1)
        elif line and not line.startswith((" ", "#")):
            block = None
        equation = _EQUATION.match(line)
        if block in places and equation and added.get(block, 0) < places[block] and \
                " as " not in equation.group(6) and " if " not in equation.group(6):
            indent, name, family, shape, meaning, expr = equation.groups()
            choice = f"extra_{len(choices)}"
            choices.append(f'choice {choice} = plain | capped "added by with_more_choices"')
            added[block] = added.get(block, 0) + 1
            head = f"{indent}    {name}{family or ''} {shape}{meaning or ''}"
            out += [f"{indent}when {choice} == capped:", f"{head} = tanh({expr})",
                    f"{indent}else:", f"{head} = {expr}"]
            continue
        out.append(line)
    first = next(i for i, line in enumerate(out) if line.startswith("choice "))
    return "\n".join(out[:first] + choices + out[first:]) + "\n", added
