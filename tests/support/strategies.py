"""Hypothesis strategies more than one test module draws from."""

from hypothesis import strategies as st

from tspec import api

SPEC = api.read_spec(api.BUILTIN_SPEC)


@st.composite
def variants(draw):
    """A random variant of the built-in spec, (choices, dims): every choice drawn, small dims
    the checker proves (the full forward; test_decoding draws the step)."""
    choices = {name: draw(st.sampled_from(choice.options))
               for name, choice in SPEC.choices.items()}
    choices["decoding"] = "full"      # the step is drawn in test_decoding, against this forward
    H = draw(st.integers(1, 3))
    # rotary positions turn pairs of a head's features (d_k even); the others take any width
    d_model = H * (2 * draw(st.integers(1, 3)) if choices["positional"] == "rotary" else
                   draw(st.integers(1, 6)))
    T, T_dec = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    dims = {"B": draw(st.integers(1, 3)), "T": T, "T_dec": T_dec, "d_model": d_model, "H": H,
            "d_ff": draw(st.integers(1, 9)), "V": draw(st.integers(2, 9)),
            "N": draw(st.integers(1, 2)), "max_len": max(T, T_dec) + draw(st.integers(0, 2)),
            "V_type": draw(st.integers(1, 3))}
    if choices["head_dims"] == "free":
        # rotary positions turn pairs of a query's or key's features: d_k even
        d_k = draw(st.sampled_from([2, 4] if choices["positional"] == "rotary" else [1, 2, 3, 4]))
        dims |= {"d_k": d_k, "d_v": draw(st.integers(1, 4))}
    if choices["key_value_heads"] == "grouped":
        dims["H_kv"] = draw(st.sampled_from([g for g in range(1, H + 1) if H % g == 0]))
    if choices["attention_window"] == "sliding":      # shorter or longer than the sequence
        dims["W"] = draw(st.integers(1, 6))
    return choices, dims
