"""Small specs that more than one test module runs."""

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
