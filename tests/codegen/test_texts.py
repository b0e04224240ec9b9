"""What generated code says of its model is true of that model (issue 31, item 5): the module
docstring (module.py.j2), the functions' docstrings and the comments of their steps
(steps.py.j2), the constants' comments, and the runtime's docstring (runtime.py.j2), pinned
for a decoder-only (gpt2_small), an encoder-only (bert_base) and an encoder-decoder (base)
variant. Each sentence here was untrue somewhere before: parameters "checked when loaded, not
per call", a decoder-only decoder citing seed 004's Encoder, an embedding "shared by source and
target" with no source, prefill's cache of "the keys and values decode_step appends to" beside a
cross-attention's it only reads."""

import ast
import functools
import io
import re
import tokenize

import pytest

from tspec import api
from tspec.codegen import generate

DECODER, ENCODER, BOTH = "gpt2_small", "bert_base", "base"


@functools.cache
def module(name: str) -> str:
    return generate.variant_source(api.load(name))


def paragraphs(docstring: str) -> list[str]:
    """A docstring's paragraphs, each one line (its lines joined by spaces)."""
    return [" ".join(line.strip() for line in block.splitlines())
            for block in re.split(r"\n\s*\n", docstring.strip()) if block.strip()]


def docstrings(text: str) -> dict[str, str]:
    tree = ast.parse(text)
    found = {"": ast.get_docstring(tree, clean=True)}
    found |= {node.name: ast.get_docstring(node, clean=True) for node in tree.body
              if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    return found


def comments(text: str, in_functions: bool = False) -> list[str]:
    """The module's comments; ``in_functions``: those in function bodies alone (not the
    parameter classes' fields, whose comments are the spec's meanings)."""
    lines = set()
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef):
            lines |= set(range(node.lineno, node.end_lineno + 1))
    return [token.string.removeprefix("#").strip()
            for token in tokenize.generate_tokens(io.StringIO(text).readline)
            if token.type == tokenize.COMMENT and (not in_functions or token.start[0] in lines)]


def line_of(block: str) -> int:
    """Where the built-in spec declares a block."""
    return next(number for number, line in enumerate(
        api.BUILTIN_SPEC.read_text().splitlines(), 1) if line.startswith(f"block {block}("))


def prose(text: str) -> str:
    """Every docstring and comment of a module, one line each paragraph."""
    return "\n".join([p for d in docstrings(text).values() if d for p in paragraphs(d)]
                     + comments(text))


CHECKS = ("On every call, whatever TSPEC_TYPECHECK says, {entries} (rt.entry, by RULES): shapes "
          "and dtype kinds as annotated, one size a dim, one float dtype for the parameters, "
          "stacks of a layer or more, dims integers >= 1, settings finite and > 0, the spec's "
          "derived dims and constraints{decoding}. Past MEMORY_LIMIT, {refuse} to start "
          "(rt.require_memory); token ids must index their table (rt.embed){sizes}. A "
          "ValueError names the first argument that does not fit; TSPEC_TYPECHECK=1 before "
          "import checks every array every function takes and returns, too.")
DECODES = {"entries": "transformer and decode_step check their arguments",
               "decoding": "; decode_step its cache (rt.check_cache); prefill's go to transformer",
               "refuse": "they refuse",
               "sizes": "; a block checks that sizes it reads twice agree (rt.require_size)"}
ABOUT = ("Each function computes {what}; the docstring of {which} gives its equations (their "
         "LaTeX is in the docs pages), and each statement that computes a tensor is commented with its shape. A "
         "family of tensors ([H] B T d_k) is one array, (H, B, T, d_k). Parameters come in "
         "nested dictionaries keyed by the spec's names (the *Params classes){cache}. The "
         "helpers, rt.<name>, are in _runtime.py beside this module. Pass trace={{}} to receive "
         "every named intermediate.")
STEPPING = {"what": "the model (transformer), a decoding step (decode_step), the cache it "
                     "starts from (prefill) or one block of the spec", "which": "each but prefill",
                "cache": "; a decoding step's cache is nested alike, each state read, then "
                      "replaced in place by its value for the next step"}


@pytest.mark.parametrize("name, about, checks", [
    (DECODER, ABOUT.format(**STEPPING), CHECKS.format(**DECODES)),
    (BOTH, ABOUT.format(**STEPPING), CHECKS.format(**DECODES)),
    (ENCODER, ABOUT.format(what="the model (transformer) or one block of the spec",
                           which="each", cache=""),
     CHECKS.format(entries="transformer checks its arguments", decoding="",
                   refuse="it refuses", sizes="")),
])
def test_the_module_docstring_says_what_its_functions_compute_and_check(name, about, checks):
    title, lead, said, checked, *_ = paragraphs(docstrings(module(name))[""])
    assert title == "The Transformer (encoder-decoder, encoder-only, decoder-only), from the seeds."
    assert lead.startswith(f"The forward pass of the variant {name} for NumPy on the CPU, "
                           "generated by `tspec generate` from spec/transformer.tspec (sha256 ")
    assert ") and the variant, its dims and settings the defaults of the keyword arguments that " \
           "take them. Do not edit: change the variant or the spec and regenerate. Choices: " \
           "arch=" in lead
    assert (said, checked) == (about, checks)
    assert "not per call" not in module(name) and "when loaded" not in module(name)


def test_a_built_in_module_names_only_the_spec_to_change():
    lead = paragraphs(docstrings(generate.files(("numpy",))["numpy/decoder_only.py"])[""])[1]
    assert lead.startswith("The forward pass for NumPy on the CPU, generated by `tspec generate` "
                           "from spec/transformer.tspec (sha256 ")
    # the choices the model consults, in the spec's order: every one but encoder_io (an
    # encoder-only model's), each at its first option but arch
    chosen = generate.BUILTIN_MODELS["decoder_only"]
    consulted = [f"{name}={chosen.get(name, choice.options[0])}"
                 for name, choice in api.load("transformer").spec.choices.items()
                 if name != "encoder_io"]
    assert consulted[:4] == ["arch=decoder_only", "norm=post", "activation=relu",
                             "positional=sinusoidal"]
    assert lead.endswith("). Do not edit: change the spec and regenerate. Choices: "
                         + ", ".join(consulted))


GPT = ("Radford et al. 2018 (GPT), sections 3.1 and 4.1: a decoder-only transformer, each of its "
       "N layers masked multi-head self-attention and a position-wise feed-forward network")


@pytest.mark.parametrize("name, function, first, block", [
    (DECODER, "decoder_layer", f"Decoder layer. From {GPT} (spec/transformer.tspec:{{}}).",
     "encoder_layer"),
    (DECODER, "decoder", f"Decoder. From {GPT} (spec/transformer.tspec:{{}}).", "encoder"),
    (DECODER, "decoder_layer_step", f"Decoder layer. From {GPT} (spec/transformer.tspec:{{}}).",
     "encoder_layer"),
    (ENCODER, "encoder_layer", ("Encoder layer. From seed 001, sections 3-8; seed 002, The "
                               "Encoder Layer; seed 004, Encoder (spec/transformer.tspec:{})."),
     "encoder_layer"),
    (ENCODER, "encoder", ("Encoder. From seed 004: the encoder is repeated N times "
                         "(spec/transformer.tspec:{})."), "encoder"),
    (BOTH, "encoder_layer", ("Encoder layer. From seed 001, sections 3-8; seed 002, The Encoder "
                            "Layer; seed 004, Encoder (spec/transformer.tspec:{})."),
     "encoder_layer"),
    (BOTH, "decoder_layer", ("Decoder layer. From seed 004, Decoder; seed 002, The Decoder Layer "
                            "(spec/transformer.tspec:{})."), "decoder_layer"),
])
def test_a_function_cites_the_sources_of_the_block_it_computes(name, function, first, block):
    assert paragraphs(docstrings(module(name))[function])[0] == first.format(line_of(block))


def test_a_decoder_only_module_calls_nothing_of_it_an_encoder():
    """Its stack is the spec's encoder renamed: the text that came with it named the seeds'
    encoder, its sources and its tensors; the spec's title alone names the encoder now."""
    text = prose(module(DECODER)).replace(
        "The Transformer (encoder-decoder, encoder-only, decoder-only)", "The Transformer")
    assert re.findall(r"(?i).*encoder.*", text) == []
    assert re.findall(r".*source and target.*", text) == []


@pytest.mark.parametrize("name, expected", [
    (DECODER, "token embedding"), (ENCODER, "token embedding"),
    (BOTH, "token embedding, shared by source and target")])
def test_the_embedding_is_shared_by_source_and_target_only_where_there_are_both(name, expected):
    assert re.search(r"    E: Float\[np.ndarray, \"V d_model\"\]  # (.*)\n", module(name)) \
        .group(1) == expected


@pytest.mark.parametrize("name, note", [
    (DECODER, ("The cache holds K_past and V_past of decoder.layers[i].self_attention, which "
              "decode_step extends ([i]: one entry a layer). Call decode_step with the next "
              "positions' ids and this cache, which it extends in place once every layer has "
              "its new entries (a step that fails or is interrupted part way leaves it as it "
              "was).")),
    (BOTH, ("The cache holds K_past and V_past of decoder.layers[i].self_attention, which "
           "decode_step extends, and K_src and V_src of decoder.layers[i].cross_attention, which "
           "it reads as they are ([i]: one entry a layer). Call decode_step with the next "
           "positions' ids and this cache, which it extends in place once every layer has its "
           "new entries (a step that fails or is interrupted part way leaves it as it was).")),
])
def test_prefill_says_which_states_the_step_extends_and_which_it_reads(name, note):
    assert paragraphs(docstrings(module(name))["prefill"]) == [
        ("Prefill: transformer over the prompt, and the cache that decode_step extends. From "
        "spec/transformer.tspec."), note]
    assert "prefill" not in docstrings(module(ENCODER))


def above(text: str, name: str) -> str:
    """The comment above a constant, its lines joined."""
    block = re.search(rf"((?:# .*\n)+){name} = ", text).group(1)
    return " ".join(line.removeprefix("# ") for line in block.splitlines())


@pytest.mark.parametrize("name, refused", [
    (DECODER, "transformer or decode_step"), (BOTH, "transformer or decode_step"),
    (ENCODER, "transformer")])
def test_the_memory_limit_says_which_functions_it_stops(name, refused):
    assert above(module(name), "MEMORY_LIMIT") == (
        "the most bytes the model's tensors may take at once (its own, and those of the calls "
        f"under way): past it, {refused} refuses to start; None: the memory this process may "
        "use")
    assert above(module(name), "RULES") == (
        "the spec's derived dims and constraints, in its notation: what the entry functions "
        "check their arguments by (rt.entry)")


@pytest.mark.parametrize("name", [DECODER, ENCODER, BOTH])
def test_the_steps_comments_are_the_ones_each_model_has(name):
    """steps.py.j2's comments besides shapes: the attention core's fast path, float16's mask,
    the settings record an entry makes, and a decoding step's cache, staged and committed, and prefill's recorder."""
    dim = re.compile(r"\[\w+\]|[A-Z][\w*+/()-]*|\w*_[\w*+/()-]*|\d+")
    said = {c for c in comments(module(name), in_functions=True)
            if not all(dim.fullmatch(token) for token in c.split())
            and not re.fullmatch(r"next call's \w+: .*", c)} - {"noqa: UP006"}
    steps = {"the equations below, a block of query rows at a time",
             "float16: a score past its range is +inf; masked keys stay -inf",
             "the settings, one record the blocks read"}
    decoding = {"the cache prefill made", "the step writes here, the cache at the end",
                "every layer's new entries at once", "keeps what the states start as",
                "the full forward"}
    assert said == (steps | decoding if name != ENCODER else steps)


def test_the_runtime_says_its_modules_call_its_helpers():
    doc = paragraphs(ast.get_docstring(ast.parse(generate.runtime_source("numpy"))))[0]
    assert doc == ("The runtime of the generated forward code for NumPy on the CPU: the helpers "
                   "the model modules of this folder call as `rt.<name>` (`from . import "
                   "_runtime as rt`), generated by `tspec generate`. Do not edit: change the "
                   "templates and regenerate.")
