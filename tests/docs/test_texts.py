"""What the docs pages say of their model is true of that model (issue 31, item 5): the variant
pages (variant.md.j2, variant.html.j2) and the index (index.md.j2, index.html.j2), pinned for a
decoder-only (gpt2_small), an encoder-only (bert_base) and an encoder-decoder (base) variant,
and for variants a user writes. Each sentence here was untrue somewhere before: T_past "not used"
on a page whose decoding figures use it, a cache "read and extended" that a cross-attention only
reads, an embedding "shared by source and target" with no source, "the shipped variants" over a
user's, and a command (`tspec check my_gqa`) that does not run as written."""

import functools
import re

import pytest
from support.command_line import run

from tspec import api
from tspec.docs import site as docs
from tspec.files import HEADERS

DECODER, ENCODER, BOTH = "gpt2_small", "bert_base", "base"


@functools.cache
def page(name: str, kind: str = "md") -> str:
    return docs.files([api.load(name)], kind)[f"{name}.{kind}"]


def row(text: str, first: str) -> str:
    """The table row whose first cell is ``first``."""
    return re.search(rf"^\| {re.escape(first)} \|.*$", text, re.MULTILINE).group()


DECODING = ("`prefill` runs the full model over the first positions and keeps the cache below; "
            "`decode_step` (the spec under `decoding = step`) then adds $T_{{\\mathrm{{new}}}}$ "
            "positions after the $T_{{\\mathrm{{past}}}}$ it holds, extending `K_past` and "
            "`V_past`{read}. The figures are those of the last step of a sequence of "
            "$T_{{\\mathrm{{dec}}}}$ = {length} positions, $T_{{\\mathrm{{past}}}}$ = {past} and "
            "$T_{{\\mathrm{{new}}}}$ = 1; the cache, in float32:")


@pytest.mark.parametrize("name, intro", [
    (DECODER, DECODING.format(read="", length="1,024", past="1,023")),
    (BOTH, DECODING.format(read=" and reading `K_src` and `V_src` as prefill left them",
                           length="512", past="511")),
])
def test_the_decoding_section_says_what_the_step_does_with_each_state(name, intro):
    assert f"## Decoding with a key-value cache\n\n{intro}\n" in page(name)


@pytest.mark.parametrize("name, past, new", [
    (DECODER, ("| $T_{\\mathrm{past}}$ | positions decoded before a decoding step: the length of "
              "each decoder layer's self-attention cache | 1,023 | the decoding step's figures "
              "(below) | `T_past + T_new <= max_len` |"),
     ("| $T_{\\mathrm{new}}$ | positions one decoding step adds (1 when decoding token by token) "
     "| 1 | the decoding step's figures (below) | `T_past + T_new <= max_len` |")),
    (BOTH, ("| $T_{\\mathrm{past}}$ | positions decoded before a decoding step: the length of each "
           "decoder layer's self-attention cache | 511 | the decoding step's figures (below) | — |"),
     ("| $T_{\\mathrm{new}}$ | positions one decoding step adds (1 when decoding token by token) "
     "| 1 | the decoding step's figures (below) | — |")),
    (ENCODER, ("| $T_{\\mathrm{past}}$ | positions decoded before a decoding step: the length of "
              "each decoder layer's self-attention cache | — | not used under these choices | — |"),
     ("| $T_{\\mathrm{new}}$ | positions one decoding step adds (1 when decoding token by token) "
     "| — | not used under these choices | — |")),
])
def test_the_decoding_dims_have_the_sizes_the_figures_take(name, past, new):
    text = page(name)
    assert (row(text, "$T_{\\mathrm{past}}$"), row(text, "$T_{\\mathrm{new}}$")) == (past, new)
    assert ("## Decoding with a key-value cache" in text) == (name != ENCODER)


@pytest.mark.parametrize("name, embedding, positions", [
    (DECODER, "| `transformer.E` | V d_model | token embedding | 38,597,376 | 1 | 38,597,376 |",
     ("| `transformer.P_table` | max_len d_model | learned position embeddings | 786,432 | 1 | "
     "786,432 |")),
    (ENCODER, "| `transformer.E` | V d_model | token embedding | 23,440,896 | 1 | 23,440,896 |",
     ("| `transformer.P_table` | max_len d_model | learned position embeddings | 393,216 | 1 | "
     "393,216 |")),
    (BOTH, ("| `transformer.E` | V d_model | token embedding, shared by source and target | — | 1 "
           "| — |"), None),
])
def test_only_an_encoder_decoder_shares_its_embedding_by_source_and_target(name, embedding,
                                                                           positions):
    text = page(name)
    assert row(text, "`transformer.E`") == embedding
    assert positions is None or row(text, "`transformer.P_table`") == positions
    assert row(text, "$V$").startswith("| $V$ | vocabulary size | ")
    assert ("source and target" in text) == (name == BOTH)


@pytest.mark.parametrize("name", [DECODER, ENCODER, BOTH])
def test_the_model_section_and_the_counting_rules_say_what_this_model_is(name):
    text = page(name)
    assert "\n### The Transformer (encoder-decoder, encoder-only, decoder-only), from the seeds: " \
           "the model under these choices (`transformer`)\n" in text
    assert "Attention scores\nare counted over the full block of every query by every key, " \
           "masked or not. Per token: divided\nby the positions the model produces outputs " \
           "for.\n" in text


SCALING = ("Against the scaling-law formulas, each as published, on the same configuration: "
           "their $n_{{ctx}}$ and $seq\\_len$ are ${sequence}$, their $d_{{attn}}$ and "
           "$key\\_size \\cdot num\\_heads$ are $H d_{{k}}$, and their $n_{{layer}}$ and "
           "$num\\_layers$ are our $N$ (Kaplan's $N$ counts parameters). Theirs, then each term "
           "by which our matrix products differ, with its formula in the dims above, then ours: "
           "each table adds up exactly.")


@pytest.mark.parametrize("name, said", [
    (DECODER, SCALING.format(sequence="T_{\\mathrm{dec}}")),
    (ENCODER, SCALING.format(sequence="T")),
    (BOTH, ("The scaling-law formulas of Kaplan et al. 2020 (Table 1) and Hoffmann et al. 2022 "
           "(Appendix F) count one stack of self-attention layers over one sequence; they cannot "
           "describe an encoder-decoder, with two stacks, cross-attention and a source and a "
           "target sequence, so this page gives no comparison with them.")),
])
def test_the_scaling_comparison_says_what_it_compares_or_why_it_has_none(name, said):
    assert f"\n{said}\n" in page(name)
    assert f"<p>{said[:60]}" in page(name, "html").replace("&#39;", "'") or name != BOTH


@pytest.mark.parametrize("name", [DECODER, BOTH])
def test_the_html_page_says_what_the_markdown_page_says(name):
    html = page(name, "html")
    assert "<p><code>prefill</code> runs the full model over the first positions and keeps the " \
           "cache below; <code>decode_step</code> (the spec under <code>decoding = step</code>) " \
           "then adds <math" in html
    if name == BOTH:
        assert "extending <code>K_past</code> and <code>V_past</code> and reading " \
               "<code>K_src</code> and <code>V_src</code> as prefill left them." in html
    assert "Attention scores are counted over the full block of every query by every key, " \
           "masked or not." in html
    assert "<td>token embedding</td>" in html or name == BOTH


def test_a_decoder_only_page_calls_nothing_of_its_model_an_encoder():
    """The spec's title, and the meaning of T, a dim the page says the model does not use,
    name the encoder; nothing else does."""
    text = page(DECODER).replace(
        "The Transformer (encoder-decoder, encoder-only, decoder-only)", "The Transformer")
    assert re.findall(r"(?i).*encoder.*", text) == [
        "| $T$ | encoder (source) sequence length | — | not used under these choices | — |"]


def test_an_encoder_only_language_model_predicts_tokens_not_next_tokens(tmp_path):
    path = tmp_path / "masked_lm.toml"
    path.write_text('spec = "transformer"\n[dims]\nd_model = 16\nH = 2\nd_ff = 24\nN = 1\nV = 11\n'
                    'max_len = 8\n[choices]\narch = "encoder_only"\npositional = "learned"\n')
    text = docs.files([api.load(str(path))], "md")["masked_lm.md"]
    assert "\n#### probs: token probabilities at each position, softmax over V\n" in text
    assert "next-token" not in text
    assert "\n#### probs: next-token probabilities, softmax over V\n" in page(DECODER)


def test_the_shipped_index_says_it_is_of_the_shipped_variants():
    index = docs.files(docs.shipped_variants(), "md")["index.md"]
    assert index.startswith(
        f"{HEADERS['.md']}# tspec documentation of the shipped variants\n\nGenerated by `tspec docs` from the "
        "spec; each page gives every dimension, shape, parameter count, FLOP count and "
        "activation size of one variant, with dataflow diagrams. Regenerate with `tspec docs`; "
        "`tspec docs --check` tells when these files are stale.\n")
    assert "| `tspec diff gpt2_small gpt2_medium` |" in index


GQA = ('spec = "transformer"\ndescription = "my GQA model"\n[dims]\nd_model = 256\nH = 8\n'
       'H_kv = 1\nd_ff = 512\nN = 2\nV = 100\n[choices]\narch = "decoder_only"\n'
       'key_value_heads = "grouped"\nnorm = "pre"\n')


def test_a_users_index_names_their_variants_and_its_commands_run_as_written(
        tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my_gqa.toml").write_text(GQA)
    (tmp_path / "my_wide.toml").write_text(GQA.replace("d_ff = 512", "d_ff = 1024"))
    code, _, err = run(capsys, "docs", "my_gqa.toml", "my_wide.toml", "--out", "out")
    assert (code, err) == (0, "")
    index = (tmp_path / "out" / "index.md").read_text()
    html = (tmp_path / "out" / "index.html").read_text()
    assert index.startswith(
        f"{HEADERS['.md']}# tspec documentation of my_gqa and my_wide\n\nGenerated by `tspec docs` from the spec; "
        "each page gives every dimension, shape, parameter count, FLOP count and activation size "
        "of one variant, with dataflow diagrams. Regenerate with `tspec docs my_gqa.toml "
        "my_wide.toml` and the `--out` and `--set` that wrote them; with `--check` it tells when "
        "these files are stale.\n")
    assert "<title>tspec documentation of my_gqa and my_wide</title>" in html
    assert "shipped" not in index and "shipped" not in html
    syntax = {"tspec diff A B", ("tspec check VARIANT --grid NAME=START:STOP:STEP --grid "
              "NAME=A,B,C")}           # the index's words for the commands, not commands
    commands = [c for c in re.findall(r"`(tspec (?:check|diff|docs) [^`]*)`", index)
                if c not in syntax]
    assert commands == ["tspec docs my_gqa.toml my_wide.toml",
                        "tspec diff my_gqa.toml my_wide.toml",
                        "tspec check my_gqa.toml --grid H=4,8,12 --grid d_model=128:384:128"]
    expected = {"docs": 0, "diff": 1, "check": 1}   # the same pages; they differ; some invalid
    for command in commands:
        words = command.split()[1:] + (["--out", "out", "--check"] if "docs" in command else [])
        code, out, err = run(capsys, *words)
        assert (code, err) == (expected[words[0]], ""), command
        assert out


@pytest.mark.parametrize("fields, description", [
    ({"num_key_value_heads": 1, "num_hidden_layers": 1},
     ("LlamaForCausalLM: d_model 64, 4 heads sharing one key-value head (multi-query), d_ff 96, "
     "1 layer, vocabulary 50")),
    ({"num_key_value_heads": 2, "num_hidden_layers": 3},
     ("LlamaForCausalLM: d_model 64, 4 heads sharing 2 key-value heads, d_ff 96, 3 layers, "
     "vocabulary 50")),
])
def test_an_imported_description_counts_its_heads_and_layers_in_english(fields, description):
    config = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
              "vocab_size": 50, "intermediate_size": 96, **fields}
    assert api.load(config).description == description


def test_a_dim_only_an_op_reads_is_used_not_unused():
    """A sliding window's W enters no shape and no FLOP count, only the mask's op: the page said
    "not used under these choices" of the window the model attends within (a new user's
    trial of an imported Mistral)."""
    config = {"model_type": "mistral", "hidden_size": 64, "num_attention_heads": 4,
              "num_key_value_heads": 1, "vocab_size": 50, "num_hidden_layers": 1,
              "intermediate_size": 96, "sliding_window": 8}
    text = docs.files([api.load(config)], "md")["mistral.md"]
    assert row(text, "$W$") == ("| $W$ | sliding attention window: the positions a decoder "
                                "query attends to, itself included | 8 | the variant | — |")


def test_a_pages_header_names_what_to_change_instead_of_it():
    """A spec's page (its default choices) has no variant to change."""
    assert "Do not edit: change the spec and regenerate.\n" in page("transformer")
    assert "Do not edit: change the spec or the variant and regenerate.\n" in page(DECODER)
