"""Diffs: `tspec diff A B` and tspec.diff. The figures must be the docs pages' figures."""

import json
import re

import pytest
from support.command_line import ROOT, run
from support.specs import builtin_line

import tspec
from tspec import api
from tspec.docs import site as docs

# lines of the built-in spec, found by their text
HEADS = builtin_line("require d_model % H == 0")

pytestmark = pytest.mark.usefixtures("in_checkout")     # paths print relative to the checkout


def base_with(tmp_path, name, old, new):
    """A copy of the base variant with one line changed."""
    text = (ROOT / "spec" / "variants" / "base.toml").read_text()
    assert old in text
    path = tmp_path / f"{name}.toml"
    path.write_text(text.replace(old, new))
    return path


def test_a_variant_against_itself_is_the_same_and_exits_0(capsys):
    code, out, err = run(capsys, "diff", "base", "base")
    assert (code, err) == (0, "")
    assert out == """\
== base (spec/variants/base.toml) -> base (spec/variants/base.toml)
   counted at B=1, T=512, T_dec=512; activation memory in float32

choices: the same

dims: the same

settings: the same

totals:
  parameters        — -> —
  FLOPs             — -> —
  activation bytes  — -> —

blocks: the same

shapes: the same

base and base are the same model at the same sizes
"""


def test_fewer_layers(capsys, tmp_path):
    path = base_with(tmp_path, "layers2", "N = 6", "N = 2")
    code, out, err = run(capsys, "diff", "base", str(path), "--set", "V=37000")
    assert (code, err) == (1, "")
    assert out == f"""\
== base (spec/variants/base.toml) -> layers2 ({path})
   counted at B=1, T=512, T_dec=512; activation memory in float32

choices: the same

dims:
  N  6 -> 2

settings: the same

totals:
  parameters            81,989,632 ->     52,588,544  -29,401,088 (-35.9%)
  FLOPs             74,612,343,808 -> 37,868,112,896  -36,744,230,912 (-49.2%)
  activation bytes     728,006,656 ->    350,519,296  -377,487,360 (-51.9%)

blocks:
  scaled_dot_product_attention
    copies  18 -> 6  -12 (-66.7%)
  multi_head_attention
    copies  18 -> 6  -12 (-66.7%)
  add_and_layer_norm
    copies  30 -> 10  -20 (-66.7%)
  feed_forward
    copies  12 -> 4  -8 (-66.7%)
  encoder_layer
    copies  6 -> 2  -4 (-66.7%)
  encoder
    parameters            18,902,016 ->     6,300,672  -12,601,344 (-66.7%)
    FLOPs             22,675,998,720 -> 7,558,666,240  -15,117,332,480 (-66.7%)
    activation bytes     201,326,592 ->    67,108,864  -134,217,728 (-66.7%)
  decoder_layer
    copies  6 -> 2  -4 (-66.7%)
  decoder
    parameters            25,199,616 ->      8,399,872  -16,799,744 (-66.7%)
    FLOPs             32,440,347,648 -> 10,813,449,216  -21,626,898,432 (-66.7%)
    activation bytes     364,904,448 ->    121,634,816  -243,269,632 (-66.7%)

shapes: the same

base -> layers2: 1 dim, 8 blocks differ
"""


def test_more_heads_changes_derived_dims_and_shapes(tmp_path):
    path = base_with(tmp_path, "heads16", "H = 8", "H = 16")
    diff = tspec.diff("base", str(path), ["V=37000"])
    assert [(c.name, c.a, c.b) for c in diff.dims] == [("H", 8, 16), ("d_k", 64, 32),
                                                       ("d_v", 64, 32)]
    assert diff.totals[0].a == diff.totals[0].b == 81_989_632   # heads split d_model
    shapes = {(old.instance, old.tensor): (old.concrete, new.concrete)
              for old, new in diff.shapes}
    assert shapes["encoder.layers[i].self_attention.attention", "S_h"] == \
        ("[8] B T T", "[16] B T T")
    assert shapes["decoder.layers[i].cross_attention", "K_h"] == ("[8] B T 64", "[16] B T 32")
    assert ("encoder.layers[i].self_attention", "W_Q") not in shapes     # 512 x 512 both
    text = diff.text()
    assert "  encoder.layers[i].self_attention.attention (scaled_dot_product_attention)\n" \
           "    Q_h: [8] B T 64 -> [16] B T 32\n" in text
    assert text.endswith("base -> heads16: 3 dims, 6 blocks, 42 tensor shapes differ\n")


def test_json_gpt2_small_to_medium(capsys):
    code, out, err = run(capsys, "diff", "gpt2_small", "gpt2_medium", "--format", "json")
    assert (code, err) == (1, "")
    data = json.loads(out)
    assert data["same"] is False and data["dtype"] == "float32"
    assert data["a"]["target"] == "gpt2_small" and data["b"]["file"] == \
        "spec/variants/gpt2_medium.toml"
    assert data["a"]["sizes"] == data["b"]["sizes"] == {"B": 1, "T_dec": 1024}
    assert data["choices"] == [] and data["sizes"] == []
    assert data["dims"] == [{"name": "d_model", "a": 768, "b": 1024},
                            {"name": "H", "a": 12, "b": 16},
                            {"name": "d_ff", "a": 3072, "b": 4096},
                            {"name": "N", "a": 12, "b": 24}]
    totals = {t["name"]: (t["a"], t["b"]) for t in data["totals"]}
    assert totals["parameters"] == (124_439_808, 354_823_168)   # Hugging Face's counts
    blocks = {b["name"]: b for b in data["blocks"]}
    assert blocks["multi_head_attention"]["status"] == "changed"
    assert blocks["multi_head_attention"]["a"] == {
        "parameters": 2_362_368, "flops": blocks["multi_head_attention"]["a"]["flops"],
        "activation_bytes": blocks["multi_head_attention"]["a"]["activation_bytes"],
        "copies": 12}
    assert blocks["multi_head_attention"]["b"]["copies"] == 24
    assert "scaled_dot_product_attention" in blocks
    assert blocks["scaled_dot_product_attention"]["changed"] == ["flops", "activation_bytes",
                                                                  "copies"]
    shape = next(s for s in data["shapes"] if s["tensor"] == "W_1")
    assert shape == {"instance": "decoder.layers[i].feed_forward", "tensor": "W_1",
                     "a": {"symbolic": "d_model d_ff", "concrete": "768 3072"},
                     "b": {"symbolic": "d_model d_ff", "concrete": "1024 4096"}}


def test_different_architectures_add_and_remove_blocks():
    diff = tspec.diff("base", "gpt2_small", ["V=37000"])
    assert {c.name: (c.a, c.b) for c in diff.choices}["arch"] == \
        ("encoder_decoder", "decoder_only")
    status = {b.name: b.status for b in diff.blocks}
    # GPT-2's stack is the encoder's layer under a causal mask, named as a decoder's
    assert status["encoder_layer"] == status["add_and_layer_norm"] == "removed"
    assert status["decoder_layer"] == status["decoder"] == "changed"
    assert status["normalize"] == "added" and status["feed_forward"] == "changed"
    removed = next(s for s in diff.shapes if s[0] is not None and s[0].tensor == "m_src")
    assert removed[1] is None
    assert "  encoder_layer (only in base)\n" in diff.text()
    assert "  normalize (only in gpt2_small)\n" in diff.text()


def _figure(cell: str) -> int | None:
    """A docs table's number: '1,048,576' or '32.0 MiB (33,554,432 bytes)'; '—' is None."""
    if cell == "—":
        return None
    found = re.search(r"\(([\d,]+) bytes\)", cell)
    return int((found.group(1) if found else cell).replace(",", ""))


@pytest.mark.parametrize("name", ["gpt2_small", "bert_base", "transformer_base"])
def test_the_figures_are_the_docs_pages(name):
    variant = api.load(name)
    page = docs.page(variant)
    diff = tspec.diff(name, name)
    assert diff.same
    bodies = diff.a.bodies
    for row in page.parameters:
        assert bodies[row.cells[0].strip("`")].parameters == _figure(row.cells[2])
    model = next(iter(bodies.values()))
    assert model.activation_bytes == _figure(page.memory[-1].cells[2])
    assert model.flops == _figure(page.flops[2].cells[2])
    layers = 0
    for row in page.memory[:-1]:           # "`encoder_layer` (each of `encoder.layers`)"
        block, path = re.findall(r"`([^`]+)`", row.cells[0])
        first_call = next(p for p, b in diff.a.blocks.items() if b == block)
        if path == first_call:             # a block's figures are at its first call
            assert bodies[block].activation_bytes == _figure(row.cells[2])
            layers += 1
    assert layers == (2 if name == "transformer_base" else 1)


def test_settings_apply_to_both_sides(capsys):
    code, out, _ = run(capsys, "diff", "base", "big", "--set", "V=37000")
    assert code == 1
    assert "  parameters            81,989,632 ->     252,059,648  +170,070,016 (+207.4%)" \
        in out.splitlines()


@pytest.mark.parametrize("argv, message", [
    (["base", "nope"], "no spec or variant named 'nope': not a file, and not a built-in"),
    (["base", "big", "--set", "Hx=1"], ("--set Hx: unknown dim, choice or setting 'Hx' in spec "
                                       "transformer; did you mean 'H'?")),
])
def test_bad_diffs_are_one_line_errors(capsys, argv, message):
    code, out, err = run(capsys, "diff", *argv)
    assert (code, out) == (2, "")
    assert err.startswith(f"tspec: error: {message}") and err.count("\n") == 1


def test_a_side_with_findings_is_counted_as_check_counts_it_and_compares_nothing(capsys):
    code, out, err = run(capsys, "diff", "base", "base", "--set", "H=10")
    assert (code, out) == (2, "")       # 1 would say the two differ
    assert err == ("tspec: error: 1 finding in base and 1 finding in base: nothing compared "
                   f"(the first: spec/transformer.tspec:{HEADS}: constraint-violated: d_model=512 is "
                   "not divisible by H=10)\n")


def test_the_docs_index_compares_each_variant_with_the_next_larger_of_its_kind():
    from tspec.docs.comparisons import comparisons, grid_example
    variants = [api.load(name) for name in ("gpt2_medium", "base", "gpt2_small", "big",
                                            "bert_base")]
    rows = comparisons(variants)
    assert [row.command for row in rows] == ["tspec diff gpt2_small gpt2_medium",
                                             "tspec diff base big"]
    assert rows[0].dims == "d_model 768 → 1,024; H 12 → 16; d_ff 3,072 → 4,096; N 12 → 24"
    assert rows[0].parameters == "124,439,808 → 354,823,168 (+185.1%)"
    assert rows[1].parameters == "—"                 # V is free in both
    example = grid_example(variants)                 # the first with every count bound
    assert example.command == "tspec check gpt2_medium --grid H=12,16,20 --grid " \
                              "d_model=896:1152:128"
    assert len(example.rows) == 9 and example.summary == "9 combinations: 4 valid, 5 invalid"


def llama_with(tmp_path, name, settings):
    """A copy of the llama3_8b variant with its [settings] table replaced."""
    text = (ROOT / "spec" / "variants" / "llama3_8b.toml").read_text()
    old = "[settings]\neps = 1e-5\ntheta = 500000.0\n"
    assert old in text
    path = tmp_path / f"{name}.toml"
    path.write_text(text.replace(old, f"[settings]\n{settings}\n"))
    return path


def test_a_rope_theta_alone_makes_two_variants_differ(capsys, tmp_path):
    a = llama_with(tmp_path, "theta_low", "eps = 1e-5\ntheta = 10000.0")
    b = llama_with(tmp_path, "theta_high", "eps = 1e-5\ntheta = 500000.0")
    code, out, err = run(capsys, "diff", str(a), str(b))
    assert (code, err) == (1, "")
    assert "\nsettings:\n  theta  10000.0 -> 500000.0\n\ntotals:\n" in out
    assert "\nchoices: the same\n\ndims: the same\n" in out
    assert "\nblocks: the same\n\nshapes: the same\n" in out
    assert out.endswith("\ntheta_low -> theta_high: 1 setting differ\n")
    code, out, err = run(capsys, "diff", str(a), str(b), "--format", "json")
    assert (code, err) == (1, "")
    data = json.loads(out)
    assert data["same"] is False
    assert data["settings"] == [{"name": "theta", "a": 10000.0, "b": 500000.0}]
    defaults = {"rope_factor": 1.0, "rope_low": 1.0, "rope_high": 4.0, "rope_context": 8192.0}
    assert data["a"]["settings"] == {"eps": 1e-5, "theta": 10000.0} | defaults
    assert data["b"]["settings"] == {"eps": 1e-5, "theta": 500000.0} | defaults


def test_settings_on_both_sides_and_eps_are_named_with_both_values(capsys, tmp_path):
    a = llama_with(tmp_path, "a", "eps = 1e-6\ntheta = 500000.0")
    code, out, _ = run(capsys, "diff", str(a), "llama3_8b")
    assert code == 1
    assert "\nsettings:\n  eps  1e-06 -> 1e-05\n\n" in out
    # --set applies to both sides: the same model again
    code, out, _ = run(capsys, "diff", str(a), "llama3_8b", "--set", "eps=1e-5")
    assert code == 0
    assert out.endswith("\na and llama3_8b are the same model at the same sizes\n")


def test_a_setting_left_at_its_default_equals_the_default_written_out(capsys, tmp_path):
    a = llama_with(tmp_path, "written", "eps = 1e-5\ntheta = 10000.0")
    b = llama_with(tmp_path, "unwritten", "eps = 1e-5")
    code, out, _ = run(capsys, "diff", str(a), str(b))
    assert code == 0 and "\nsettings: the same\n" in out
    code, out, _ = run(capsys, "diff", str(b), "llama3_8b")
    assert code == 1
    assert "\nsettings:\n  theta  10000.0 (default) -> 500000.0\n" in out


def test_a_setting_new_to_the_catalogue_is_compared_with_no_change_to_diff(
        capsys, tmp_path, monkeypatch):
    import dataclasses

    from tspec.ops.base import Setting
    from tspec.ops.catalogue import OPS, SETTINGS
    monkeypatch.setitem(SETTINGS, "test_scale", Setting("1.0", "a test setting"))
    # read by an op the model applies, as a setting is (one no op reads is a finding)
    monkeypatch.setitem(OPS, "rms_norm", dataclasses.replace(
        OPS["rms_norm"], settings=(*OPS["rms_norm"].settings, "test_scale")))
    a = llama_with(tmp_path, "scaled", "eps = 1e-5\ntheta = 500000.0\ntest_scale = 8.0")
    code, out, _ = run(capsys, "diff", str(a), "llama3_8b")
    assert code == 1
    assert "\nsettings:\n  test_scale  8.0 -> 1.0 (default)\n" in out
    diff = tspec.diff(str(a), "llama3_8b")
    assert [(c.name, c.a, c.b) for c in diff.settings] == [("test_scale", 8.0, 1.0)]
    assert diff.a.settings == {"eps": 1e-5, "theta": 500000.0, "rope_factor": 1.0,
                               "rope_low": 1.0, "rope_high": 4.0, "rope_context": 8192.0,
                               "test_scale": 8.0}
