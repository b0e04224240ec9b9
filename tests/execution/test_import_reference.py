"""Imported variants against the Hugging Face models their configs build (`tspec import`).

For every family (GPT-2, BertModel with and without its pooler, Llama, Llama 3.1's rope
scaling, Mistral's sliding window, Qwen2's Q, K, V biases): the variant's parameter count is
the model's ``num_parameters()`` at published sizes (built on the meta device) and at tiny
ones; and with random weights at a tiny size, right padding in one sequence, the generated
NumPy code's logits (BertModel: last hidden state and pooled output) are within 5e-5 of the
stock model's in float32, and within 1e-10 in float64 once Hugging Face's float32-only
internals (RMSNorm, rotary angles) run in float64 as test_reference's Llama test does.
"""

import copy

import numpy as np
import pytest
from support.arrays import NUMPY
from support.compare import assert_close, one_variant
from support.hf_configs import (
    LLAMA31_TINY,
    PUBLISHED,
    TINY,
    config,
    import_variant,
    mapped,
    model,
    parameter_count,
    run_module,
)

from tspec import api, cli
from tspec.execution import weights

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.reference

# name -> (family, config fields, pooler)
CASES = {"gpt2": ("gpt2", TINY["gpt2"], True),
         "bert": ("bert", TINY["bert"], True),
         "bert-unpooled": ("bert", TINY["bert"], False),
         "llama": ("llama", TINY["llama"], True),
         "llama3.1": ("llama", LLAMA31_TINY, True),
         "mistral": ("mistral", TINY["mistral"], True),
         "qwen2": ("qwen2", TINY["qwen2"], True)}
B, T = 2, 9


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_a_published_configuration_counts_as_hugging_face_does(name, tmp_path):
    """The parameters of the weights the variant takes, the docs' count of its formula, and
    the docs page's total: each the Hugging Face model's num_parameters()."""
    family, fields = PUBLISHED[name]
    built = config(transformers, family, **fields)
    variant = import_variant(tmp_path, built)
    with torch.device("meta"):                      # shapes only: no memory, no download
        reference = model(transformers, family, built)
    count = reference.num_parameters()
    assert parameter_count(variant) == count
    valid, _, (counted, _, _) = one_variant(str(tmp_path / "imported.toml"), [], {})
    assert valid and counted == count
    assert cli.main(["docs", str(tmp_path / "imported.toml"), "--out", str(tmp_path / "docs"),
                     "--format", "md"]) == 0
    page = (tmp_path / "docs" / "imported.md").read_text()
    [row] = [line for line in page.splitlines() if line.startswith("| `transformer` | ")]
    assert row.endswith(f" | {count:,} |")


def _reference(family: str, fields: dict, pooler: bool):
    torch.manual_seed(11)
    reference = model(transformers, family, config(transformers, family, **fields), pooler)
    with torch.no_grad():                    # norms start at gain 1, bias 0: move every
        for parameter in reference.parameters():     # parameter, so none is told apart by luck
            parameter.add_(0.1 * torch.randn_like(parameter))
    return reference.eval()


def _in_float64(reference, variant):
    """Hugging Face computes RMSNorm and the rotary angles in float32 whatever the model's
    dtype: here each RMSNorm runs PyTorch's rms_norm in the input's dtype, and the angles are
    Hugging Face's formula (default or llama3) transcribed in float64, checked against its own
    float32 inverse frequencies first."""
    for module in reference.modules():
        if type(module).__name__.endswith("RMSNorm"):
            module.forward = lambda x, m=module: torch.nn.functional.rms_norm(
                x, (x.shape[-1],), m.weight, m.variance_epsilon)
    rotary = reference.model.rotary_emb
    settings = variant.settings
    d = variant.dims.get("d_k") or variant.dims["d_model"] // variant.dims["H"]
    frequency = settings["theta"] ** -(torch.arange(0, d, 2, dtype=torch.float64) / d)
    if "rope_factor" in settings:           # _compute_llama3_parameters, in float64
        factor, low, high = settings["rope_factor"], settings["rope_low"], settings["rope_high"]
        context = settings["rope_context"]
        wavelength = 2 * np.pi / frequency
        scaled = torch.where(wavelength > context / low, frequency / factor, frequency)
        smooth = (context / wavelength - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelength < context / high) * ~(wavelength > context / low)
        frequency = torch.where(medium, smoothed, scaled)
        bands = {bool(x) for x in medium} | {bool(x) for x in wavelength > context / low}
        assert bands == {True, False}          # the tiny head spans the bands
    np.testing.assert_allclose(rotary.inv_freq.double().numpy(), frequency.numpy(),
                               rtol=1e-6)

    def angles(x, position_ids):
        angle = position_ids[..., None].double() * frequency
        both = torch.cat((angle, angle), dim=-1)
        return both.cos().to(x.dtype), both.sin().to(x.dtype)
    rotary.forward = angles


def _outputs(reference, family: str, pooler: bool, t, s, keep) -> dict:
    with torch.no_grad():
        if family == "bert":
            out = reference(torch.tensor(t), attention_mask=torch.tensor(keep.astype(np.int64)),
                            token_type_ids=torch.tensor(s))
            found = {"Z_enc": out.last_hidden_state}
            if pooler:
                found["C"] = out.pooler_output
        else:
            out = reference(torch.tensor(t), attention_mask=torch.tensor(keep.astype(np.int64)))
            found = {"logits": out.logits}
    return {k: v.numpy() for k, v in found.items()}


def _ours(module, variant, family, pooler, params, t, s, keep, dtype) -> dict:
    nested = weights.nest({k: v.astype(dtype) for k, v in weights.flatten(params).items()})
    if family == "bert":
        result = run_module(module, variant, {"t": t, "m_src": keep, "s": s}, nested)
        return {"Z_enc": result[0], "C": result[1]} if pooler else {"Z_enc": result}
    logits, _probs = run_module(module, variant, {"u": t, "m_tgt": keep}, nested)
    return {"logits": logits}


@pytest.mark.parametrize("name", sorted(CASES))
def test_an_imported_tiny_model_matches_hugging_face(name, tmp_path):
    family, fields, pooler = CASES[name]
    variant = import_variant(tmp_path, config(transformers, family, **fields), pooler=pooler)
    assert api.check(variant).ok
    stock = _reference(family, fields, pooler)
    assert parameter_count(variant) == stock.num_parameters()
    params = mapped(family, variant, stock.state_dict())
    rng = np.random.default_rng(11)
    t = rng.integers(0, variant.dims["V"], (B, T))
    s = rng.integers(0, variant.dims.get("V_type", 1), (B, T))
    keep = np.ones((B, T), dtype=bool)
    keep[1, T - 2:] = False                 # right padding: later keys hidden
    if "W" in variant.dims:
        assert variant.dims["W"] < T - 2    # the window cuts keys a causal mask would keep
    module = NUMPY.load(api.source(variant), typecheck=True)
    # float32: against Hugging Face as it ships
    expected = _outputs(stock, family, pooler, t, s, keep)
    ours = _ours(module, variant, family, pooler, params, t, s, keep, np.float32)
    assert all(v.dtype == np.float32 for v in ours.values())
    assert_close(ours, expected, "float32", tolerance=5e-5)
    # float64: its float32-only internals in float64
    reference = copy.deepcopy(stock).double()
    if variant.choices.get("positional") == "rotary":
        _in_float64(reference, variant)
    expected = _outputs(reference, family, pooler, t, s, keep)
    ours = _ours(module, variant, family, pooler, params, t, s, keep, np.float64)
    assert_close(ours, expected, "float64", tolerance=1e-10)


def test_the_sliding_window_is_what_changes_mistral(tmp_path, monkeypatch):
    """The same Mistral weights with a window longer than the sequence give the causal
    model's logits, and differ from the windowed ones: the window is in force. Attention in
    blocks of 2 query rows (whose keys start at 0, the window's early keys masked) gives the
    traced equations' numbers."""
    family, fields, _ = CASES["mistral"]
    stock = _reference(family, fields, True)
    windowed = import_variant(tmp_path, config(transformers, family, **fields), "w")
    wide = import_variant(tmp_path, config(transformers, family, **{**fields,
                                                                     "sliding_window": 100}),
                          "wide")
    params = mapped(family, windowed, stock.state_dict())
    rng = np.random.default_rng(12)
    t = rng.integers(0, 13, (B, T))
    keep = np.ones((B, T), dtype=bool)
    results = {}
    for variant in (windowed, wide):
        module = NUMPY.load(api.source(variant))
        results[variant.name] = _ours(module, variant, family, True, params, t, None, keep,
                                      np.float64)["logits"]
    causal = config(transformers, "llama", **{k: v for k, v in fields.items()
                                               if k != "sliding_window"})
    llama = import_variant(tmp_path, causal, "causal")
    module = NUMPY.load(api.source(llama))
    plain = _ours(module, llama, "llama", True, mapped("llama", llama, stock.state_dict()),
                  t, None, keep, np.float64)["logits"]
    np.testing.assert_array_equal(results["wide"], plain)
    assert np.abs(results["w"] - plain)[:, 3:].max() > 1e-3     # keys 3 or more back cut
    np.testing.assert_array_equal(results["w"][:, :3], plain[:, :3])
    module = NUMPY.load(api.source(windowed))
    monkeypatch.setattr(module.rt, "QUERY_BLOCK", 2)
    inputs = {"u": t, "m_tgt": keep}
    nested = weights.nest({k: v.astype(np.float64) for k, v in weights.flatten(params).items()})
    blocked, _ = run_module(module, windowed, inputs, nested)
    traced, _ = run_module(module, windowed, inputs, nested, trace={})
    assert_close({"logits": blocked}, {"logits": traced}, "float64", tolerance=1e-13)
    assert_close({"logits": blocked}, {"logits": results["w"]}, "float64", tolerance=1e-13)
