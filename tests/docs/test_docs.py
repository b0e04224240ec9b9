"""`tspec docs` and the counts behind it: parameters, FLOPs and activation memory from the op
catalogue, checked against published counts, the scaling-law FLOP formulas, hand-written
formulas and the generated code's own tensors."""

import re

import numpy as np
import pytest

import tspec
from tspec import api, cli
from tspec.analysis.counts import Activations, costs, evaluate
from tspec.checking.findings import findings_text
from tspec.codegen.generate import source
from tspec.docs import site as docs
from tspec.execution import weights
from tspec.execution.loading import load_source
from tspec.ops.base import Value
from tspec.ops.catalogue import OPS
from tspec.symbolic.shape import Shape

SPEC = api.read_spec(api.BUILTIN_SPEC)
GPT2 = {"gpt2_small": (768, 12, 12), "gpt2_medium": (1024, 24, 16),
        "gpt2_large": (1280, 36, 20), "gpt2_xl": (1600, 48, 25)}


def model_cost(variant_name):
    variant = api.load(variant_name)
    choices = SPEC.choice_values(variant.choices)
    return variant, choices, costs(SPEC, choices)[SPEC.name]


def test_matrix_product_flops_are_two_per_term():
    import sympy
    B, T, d, e = sympy.symbols("B T d e")
    left, right = Value(Shape((B, T, d))), Value(Shape((d, e)))
    out = Value(Shape((B, T, e)))
    assert OPS["matmul"].flops([left, right], out, {}) == 2 * B * T * d * e
    assert OPS["matmul"].kind == "matmul" and OPS["add"].kind == "other"
    assert OPS["softmax"].flops([out], out, {}) == 5 * B * T * e
    assert OPS["layer_norm"].flops([out], out, {}) == 7 * B * T * e + 3 * B * T
    assert OPS["split_heads"].flops([out], out, {}) == 0


@pytest.mark.parametrize("name", sorted(GPT2))
def test_gpt2_parameter_counts_are_the_published_ones(name):
    variant, choices, model = model_cost(name)
    assert evaluate(model.parameters, SPEC, choices, variant.dims) == \
        variant.published.parameters


def test_transformer_base_and_big_counts_under_the_stated_assumptions():
    """Our count, from a hand-written formula: embeddings shared and tied, biases only in the
    feed-forward layers, two LayerNorm vectors per sublayer, vocabulary 37000."""
    for name, (d, d_ff, published) in {"transformer_base": (512, 2048, 65_000_000),
                                       "transformer_big": (1024, 4096, 213_000_000)}.items():
        variant, choices, model = model_cost(name)
        feed_forward = 2 * d * d_ff + d_ff + d
        encoder_layer = 4 * d * d + feed_forward + 2 * 2 * d
        decoder_layer = 8 * d * d + feed_forward + 3 * 2 * d
        expected = 37000 * d + 6 * encoder_layer + 6 * decoder_layer
        ours = evaluate(model.parameters, SPEC, choices, variant.dims)
        assert ours == expected
        assert abs(ours - published) / published < 0.031      # 63.0M vs 65M, 214.2M vs 213M
    assert evaluate(model_cost("transformer_base")[2].parameters, SPEC,
                    model_cost("transformer_base")[1], {"V": 37000, "d_model": 512, "H": 8,
                                                        "d_ff": 2048, "N": 6}) == 63_045_632


@pytest.mark.parametrize("name", sorted(GPT2))
def test_flops_agree_with_kaplan_and_chinchilla(name):
    """Kaplan et al. 2020, Table 1: C_forward = 2N + 2 n_layer n_ctx d_attn per token, N the
    non-embedding parameters 2 d_model n_layer (2 d_attn + d_ff). Hoffmann et al. 2022,
    Appendix F, per sequence. Ours (matrix products) differs by exactly the terms named."""
    d, layers, heads = GPT2[name]
    ctx, vocabulary, d_ff = 1024, 50257, 4 * d
    variant, choices, model = model_cost(name)
    dims = {**variant.dims, "B": 1, "T_dec": ctx}
    ours = evaluate(model.flops.matmul, SPEC, choices, dims)
    n = 2 * d * layers * (2 * d + d_ff)
    kaplan = 2 * n + 2 * layers * ctx * d
    # Kaplan leaves out the de-embedding and counts one n_ctx x d_attn product per layer
    assert ours / ctx == kaplan + 2 * d * vocabulary + 2 * layers * ctx * d
    chinchilla = (2 * ctx * vocabulary * d
                  + layers * (2 * 3 * ctx * d * d + 2 * ctx * ctx * d + 3 * heads * ctx * ctx
                              + 2 * ctx * ctx * d + 2 * ctx * d * d + 2 * ctx * 2 * d * d_ff)
                  + 2 * ctx * d * vocabulary)
    # Chinchilla counts the embedding as a one-hot product and softmax as 3 per score
    assert ours == chinchilla - 2 * ctx * vocabulary * d - layers * 3 * heads * ctx * ctx
    attention = evaluate(model.flops.attention, SPEC, choices, dims)
    # QK^T and AV (2 ctx^2 d each), the scale and the mask (1 each) and softmax (5) per score
    assert attention == layers * (4 * ctx * ctx * d + 7 * heads * ctx * ctx)


def test_activation_memory_is_the_size_of_every_tensor_the_generated_layer_makes():
    choices = {"arch": "encoder_only", "attention_bias": "all"}
    chosen = SPEC.choice_values(choices)
    dims = {"B": 2, "T": 5, "d_model": 8, "H": 2, "d_ff": 12, "N": 1, "V": 7}
    module = load_source(source(SPEC, chosen))
    params = weights.nest(weights.random_params(weights.expected_shapes(SPEC, chosen, dims),
                                                0, np.dtype(np.float32)))
    trace = {}
    t = np.random.default_rng(0).integers(0, 7, (2, 5))
    module.transformer(t, np.ones((2, 5), dtype=bool), params, H=2, trace=trace)
    seen, total = set(), 0

    def walk(node):
        nonlocal total
        for value in node.values():
            if isinstance(value, dict):
                walk(value)
            elif id(value) not in seen:
                seen.add(id(value))
                total += value.nbytes
    walk(trace["encoder"]["layers"][0])
    bodies = costs(SPEC, chosen)
    (path, binding, copies), = docs.call_paths(bodies, SPEC.name)["encoder_layer"]
    assert (path, str(binding), copies) == ("encoder.layers", "{T_x: T, T_keys: T}",
                                            SPEC.symbols()["N"])
    bytes_ = bodies["encoder_layer"].activations.subs(binding).bytes("float32")
    # per position: Q, K, V projected and split (3 x 8 twice), scores and weights (H T each),
    # O_h, O, O_proj, the first Add & LayerNorm, U (d_ff), F, the second Add & LayerNorm
    per_position = 3 * 8 + 3 * 8 + 2 * 2 * 5 + 8 + 8 + 8 + 8 + 12 + 8 + 8
    assert evaluate(bytes_, SPEC, chosen, dims) == total == 2 * 5 * 4 * per_position
    assert Activations(float=3).bytes("float16") == 6


def test_shipped_docs_are_current_and_say_what_they_count(capsys):
    assert cli.main(["docs", "--check"]) == 0
    assert capsys.readouterr().out == "docs/variants and docs/manual/ops.md are current\n"
    text = (api.SPEC_DIR.parent / "docs" / "variants" / "gpt2_small.md").read_text()
    assert "| `transformer` | $N \\left(2 H d_{k} d_{\\mathrm{model}}" in text
    assert text.count("124,439,808") >= 2
    assert "Counted here: 124,439,808 (+0, +0.00%)." in text
    assert "```mermaid\nflowchart TD\n" in text
    assert '    n0 -->|"Q_h: [H] B T_q d_k"| n4\n' in text
    assert "| $T$ | encoder (source) sequence length | — | not used under these choices |" \
        in text
    html = (api.SPEC_DIR.parent / "docs" / "variants" / "gpt2_small.html").read_text()
    assert html.count("<svg") == len(costs(SPEC, SPEC.choice_values(
        api.load("gpt2_small").choices)))
    assert '<math xmlns="http://www.w3.org/1998/Math/MathML" display="block">' in html
    assert "$" not in re.sub(r"<[^>]+>", "", html.split("<h2>Dimensions")[1])


def test_bert_base_page_counts_bert_model_and_names_what_it_computes():
    text = (api.SPEC_DIR.parent / "docs" / "variants" / "bert_base.md").read_text()
    assert "Counted here: 109,482,240 (+0, +0.00%)." in text
    assert ("Choices: arch = encoder_only, norm = post, activation = gelu, positional = "
            "learned, head_dims = split, attention_bias = all, encoder_io = bert, "
            "normalization = layer_norm, key_value_heads = all, feed_forward_bias = all.") in text
    assert "| `transformer.E_type` | V_type d_model | token-type (segment) embeddings | 1,536 |" \
        in text
    assert "| `transformer.W_pool` | d_model d_model | pooler weight | 589,824 | 1 | 589,824 |" \
        in text
    # the meanings of the declarations in force: learned positions, BERT's outputs
    assert "#### P: learned positions 0..T-1\n" in text
    assert "#### C: pooled output: the sequence's summary for classification\n" in text
    assert "$$\nZ_{\\mathrm{cls}} = {Z_{\\mathrm{enc}}}_{:,\\,1}\n$$" in text
    assert "#### logits" not in text and "W_out" not in text
    # Hoffmann et al. count final logits, which BertModel has not: a term of its own
    assert "| the final logits, which BertModel does not compute: it has no projection to the " \
        "vocabulary | $- 2 T V d_{\\mathrm{model}}$ | -24,003,477,504 |" in text
    # FLOPs: the embedding sum and LayerNorm, the pooler's product, bias and tanh
    variant, choices, _model = model_cost("bert_base")
    bodies = costs(SPEC, choices)
    steps = {step.output: step for step in bodies[SPEC.name].steps}
    dims = {**variant.dims, "B": 2, "T": 7}
    d = variant.dims["d_model"]
    assert evaluate(steps["Z_emb"].flops.total, SPEC, choices, dims) == \
        2 * 7 * d + 7 * 2 * 7 * d + 3 * 2 * 7
    assert evaluate(steps["C"].flops.matmul, SPEC, choices, dims) == 2 * 2 * d * d
    assert evaluate(steps["C"].flops.other, SPEC, choices, dims) == 2 * 2 * d
    assert evaluate(steps["Z_cls"].flops.total, SPEC, choices, dims) == 0


def test_docs_to_another_folder_and_a_stale_page(tmp_path, capsys):
    assert cli.main(["docs", "base", "--format", "md", "--out", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base.md", "index.md"]
    page = tmp_path / "base.md"
    page.write_text(page.read_text().replace("512", "513"))
    capsys.readouterr()
    assert cli.main(["docs", "base", "--format", "md", "--out", str(tmp_path),
                     "--check"]) == 1
    captured = capsys.readouterr()
    assert captured.err.endswith("is stale; run `tspec docs`\n")
    assert "-| $d_{\\mathrm{model}}$ | model width" in captured.out


def test_docs_of_a_variant_the_checker_rejects_lists_its_findings_as_check_does(capsys):
    assert cli.main(["docs", "base", "--set", "d_model=510", "--out", "/tmp/unused"]) == 1
    assert capsys.readouterr().err == "\n".join(findings_text(
        tspec.check("base", ["d_model=510"]).findings) + [
        "tspec: 1 finding in base: no documentation written"]) + "\n"


def test_a_dim_left_free_shows_a_dash_not_a_number():
    text = docs.files([api.load("base")], "md")["base.md"]
    assert "| `transformer.E` | V d_model | token embedding, shared by source and target | — " \
        "| 1 | — |" in text


def test_the_readme_shows_the_base_models_dimension_table_as_generated():
    readme = (api.SPEC_DIR.parent / "README.md").read_text()
    shown = readme.split("<!-- dimension table: generated, see tests/docs/test_docs.py -->\n")[1] \
        .split("\n<!-- end of dimension table -->")[0]
    page = docs.files([api.load("transformer_base")], "md")["transformer_base.md"]
    assert shown.startswith("| symbol | meaning | value | from | constraints |\n")
    assert "| $V$ | vocabulary size | 37,000 | the variant |" in shown
    assert shown in page


def test_the_manuals_built_in_names_are_every_built_in():
    # it left out llama3_8b; `A ... B` stands for the names of a family (gpt2_*, seed_*); the
    # list is the manual's now (docs/manual/commands.md)
    readme = (api.SPEC_DIR.parent / "docs" / "manual" / "commands.md").read_text()
    listed = " ".join(readme.split("A target is a built-in name (", 1)[1].split(")", 1)[0]
                      .split())
    names = set(re.findall(r"`(\w+)`", listed))
    families = {a.rsplit("_", 1)[0] for a, b in re.findall(r"`(\w+)` \.\.\. `(\w+)`", listed)}
    built_in = set(api.builtin_specs()) | set(api.builtin_variants())
    assert sorted(n for n in built_in if n not in names and n.rsplit("_", 1)[0] not in families) \
        == []
    assert names <= built_in


def test_variant_text_is_escaped_in_html(tmp_path):
    path = tmp_path / "hostile.toml"
    path.write_text('spec = "transformer"\ndescription = "<script>alert(1)</script> & more"\n'
                    '[dims]\nd_model = 16\nH = 2\nd_ff = 8\nN = 1\nV = 11\n')
    page = docs.files([api.load(str(path))], "html")["hostile.html"]
    assert "<script>" not in page
    assert "<h1>hostile: &lt;script&gt;alert(1)&lt;/script&gt; &amp; more</h1>" in page


def test_a_spec_without_a_batch_or_a_sequence_has_no_per_token_figures(tmp_path):
    # per token divides by B T (or B T_dec); a spec with neither used to be a KeyError
    path = tmp_path / "s.tspec"
    path.write_text('dim n "count" = 3\ndim m "more"\nlet m = 2*n + 1\ninput X "n m"\n'
                    'param W "m m"\nY "n m" = X @ W\noutput Y\n')
    page = docs.files([api.load(path)], "md")["s.md"]
    assert "| matrix products | $2 m^{2} n$ | 294 | — |\n" in page
    assert "| total | $2 m^{2} n$ | 294 | — |\n" in page


def test_a_decoder_only_spec_with_the_head_count_named_otherwise_has_no_scaling_rows(tmp_path):
    """The Kaplan and Chinchilla rows read the built-in spec's dims by name: a spec naming H
    otherwise made tspec docs a KeyError ('H'); its page has the rest and not these rows."""
    text = re.sub(r"\bH\b", "heads", api.BUILTIN_SPEC.read_text())
    (tmp_path / "heads.tspec").write_text(text)
    path = tmp_path / "heads_v.toml"
    path.write_text('spec = "heads.tspec"\n[choices]\narch = "decoder_only"\n[dims]\n'
                    'd_model = 16\nheads = 2\nd_ff = 8\nN = 1\nV = 11\n')
    page = docs.files([api.load(str(path))], "md")["heads_v.md"]
    assert "| $\\mathrm{heads}$ | number of attention heads | 2 | the variant |" in page
    assert "Kaplan" not in page
    assert "Kaplan" in docs.files([api.load("gpt2_small")], "md")["gpt2_small.md"]


def test_a_variant_without_a_description_is_titled_by_its_name_alone(tmp_path):
    # it was "# nodesc: ", a colon before nothing
    (tmp_path / "nodesc.toml").write_text('spec = "transformer"\n[dims]\nd_model = 64\nH = 4\n'
                                          'd_ff = 32\nN = 1\n')
    page = docs.page(api.load(str(tmp_path / "nodesc.toml")))
    assert page.heading == "nodesc"
    assert docs.page(api.load("gpt2_small")).heading.startswith("gpt2_small: GPT-2 small")


def test_an_index_of_markdown_pages_alone_links_no_html_page(tmp_path):
    # `tspec docs A B --format md` wrote an index whose HTML column linked pages not written
    variants = [api.load("base"), api.load("big")]
    docs.write(tmp_path, variants, "md")
    index = (tmp_path / "index.md").read_text()
    assert ".html" not in index
    assert "| base | " in index and "[base.md](base.md) |" in index
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base.md", "big.md", "index.md"]
    assert docs._indexed(tmp_path / "index.md", "md") == {"base", "big"}
    docs.write(tmp_path, variants, "md")          # tspec's own files: written again
    docs.write(tmp_path, variants, "all")         # both: each page links both formats
    assert "[base.html](base.html) |" in (tmp_path / "index.md").read_text()
    assert docs._indexed(tmp_path / "index.md", "md") == {"base", "big"}
