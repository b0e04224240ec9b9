"""Code for any variant: `tspec generate VARIANT_OR_SPEC` writes one model's module, named
after it, with its runtime in a package folder; tspec.compile loads the same module. Both
compute what `tspec run` computes, number for number."""

import importlib
import os
import sys

import numpy as np
import pytest
from support.command_line import run
from support.refusals import raises
from support.specs import builtin_line

import tspec
from tspec import api, shipped
from tspec.checking.findings import findings_text
from tspec.codegen import generate
from tspec.errors import FindingsError, UsageError
from tspec.execution import weights

# lines of the built-in spec, found by their text
HEADS = builtin_line("require d_model % H == 0")

TINY_LLAMA = """\
spec = "transformer"
description = "A tiny Llama-style decoder"

[dims]
d_model = 32
H = 4
H_kv = 2
d_ff = 48
N = 2
V = 50

[choices]
arch = "decoder_only"
norm = "pre"
activation = "swiglu"
positional = "rotary"
output_embedding = "separate"
attention_bias = "none"
normalization = "rms_norm"
key_value_heads = "grouped"
feed_forward_bias = "none"

[settings]
eps = 1e-6
theta = 500000.0
"""


# P's equation takes T_dec rows where its claim, and Z's equation, has T
CONSEQUENCE = ('dim B "b"\ndim T "t"\ndim d "d"\ndim T_dec "t"\ndim L "rows"\n'
               'require T <= L\nrequire T_dec <= L\nparam P_table "L d"\ninput X "B T d"\n'
               'P "T d" = P_table[:T_dec]\nZ "B T d" = X + P\n')


def tiny_llama(folder, name="llama_tiny", text=TINY_LLAMA):
    path = folder / f"{name}.toml"
    path.write_text(text)
    return path


def listing(folder):
    return sorted(os.listdir(folder))


def imported(monkeypatch, folder, name):
    """``folder/name.py`` imported as a user would: the folder's parent on sys.path, then
    ``import FOLDER.NAME`` (forgotten after the test)."""
    monkeypatch.syspath_prepend(str(folder.parent))
    for key in [k for k in sys.modules if k == folder.name or k.startswith(f"{folder.name}.")]:
        monkeypatch.delitem(sys.modules, key)
    importlib.invalidate_caches()
    module = importlib.import_module(f"{folder.name}.{name}")
    for key in [k for k in sys.modules if k == folder.name or k.startswith(f"{folder.name}.")]:
        monkeypatch.setitem(sys.modules, key, sys.modules[key])     # removed at the end
    return module


def run_inputs(variant, seed, dtype):
    """The weights and inputs `tspec run` draws for a decoder-only variant at seed ``seed``
    (weights.random_params at ``seed``, the tokens from ``seed + 1``, no position masked)."""
    from tspec.execution.run import with_run_defaults
    sized = with_run_defaults(variant)
    shapes = weights.expected_shapes(sized.spec, sized.choices, sized.dims)
    params = weights.random_params(shapes, seed, np.dtype(dtype))
    rng = np.random.default_rng(seed + 1)
    B, T = sized.dims["B"], sized.dims["T_dec"]
    tokens = rng.integers(0, sized.dims["V"], (B, T))
    return params, tokens, np.ones((B, T), dtype=bool)


# ---------------------------------------------------------------------------------------------
# Writing one model

def test_a_variant_is_written_as_a_package_of_its_module_runtime_and_init(capsys, tmp_path):
    path = tiny_llama(tmp_path)
    out = tmp_path / "models"
    code, printed, err = run(capsys, "generate", str(path), "--out", str(out))
    assert (code, err) == (0, "")
    assert printed == (f"wrote {out}/__init__.py\nwrote {out}/llama_tiny.py\n"
                       f"wrote {out}/_runtime.py\n")
    assert listing(out) == ["__init__.py", "_runtime.py", "llama_tiny.py"]
    variant = api.load(path)
    assert (out / "llama_tiny.py").read_text() == generate.variant_source(variant)
    assert (out / "_runtime.py").read_text() == generate.runtime_source("numpy")
    assert (out / "__init__.py").read_text() == generate.PACKAGE_DOC.format(backend="numpy")
    text = (out / "llama_tiny.py").read_text()
    # the variant's dims and settings are the keywords' defaults, and the docstring says so
    assert ("    *, H: int = 4, H_kv: int = 2, eps: float = 1e-06, rope_factor: float = 1.0,\n"
            "    rope_low: float = 1.0, rope_high: float = 4.0, rope_context: float = 8192.0,\n"
            "    theta: float = 500000.0, trace: dict | None = None,\n") in text
    assert "    H: number of attention heads; default 4, the variant's\n" in text
    # only choices and those defaults differ from the code the choices give
    assert text == generate.source(variant.spec, variant.choices, "numpy",
                                   {"H": 4, "H_kv": 2, "eps": 1e-6, "theta": 500000.0,
                                    "d_model": 32, "d_ff": 48, "N": 2, "V": 50},
                                   origin="llama_tiny.toml")
    # and its docstring names the variant beside the spec, which it says to change instead
    assert "The forward pass of the variant llama_tiny.toml for NumPy on the CPU, generated " \
        "by `tspec\ngenerate` from spec/transformer.tspec (sha256 " in text
    assert "Do not edit: change the variant or the spec" in " ".join(text.split())
    plain = generate.source(variant.spec, variant.choices, "numpy")
    assert ("    *, H: int, H_kv: int, eps: float = 1e-5, rope_factor: float = 1.0, rope_low: "
            "float = 1.0,\n    rope_high: float = 4.0, rope_context: float = 8192.0, theta: "
            "float = 10000.0,\n") in plain


def test_a_second_model_shares_the_folder_and_its_own_init_is_kept(capsys, tmp_path):
    out = tmp_path / "models"
    assert run(capsys, "generate", str(tiny_llama(tmp_path)), "--out", str(out))[0] == 0
    (out / "__init__.py").write_text("from . import llama_tiny  # mine\n")
    code, printed, err = run(capsys, "generate", "gpt2_small", "--out", str(out))
    assert (code, err) == (0, "")
    assert printed == f"wrote {out}/gpt2_small.py\nwrote {out}/_runtime.py\n"
    assert listing(out) == ["__init__.py", "_runtime.py", "gpt2_small.py", "llama_tiny.py"]
    assert (out / "__init__.py").read_text() == "from . import llama_tiny  # mine\n"


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_written_module_computes_what_tspec_run_computes(capsys, tmp_path, monkeypatch,
                                                             dtype):
    path = tiny_llama(tmp_path)
    out = tmp_path / "tiny_models"
    assert run(capsys, "generate", str(path), "--out", str(out))[0] == 0
    module = imported(monkeypatch, out, "llama_tiny")
    assert module.__name__ == "tiny_models.llama_tiny"
    assert module.rt.__name__ == "tiny_models._runtime"
    variant = api.load(path)
    params, tokens, mask = run_inputs(variant, 3, dtype)
    # no keyword but the trace `tspec run` takes (a traced call keeps every intermediate, so
    # it computes some in other orders): the variant's dims and settings are the defaults
    logits, probs = module.transformer(tokens, mask, params, trace={})
    expected = tspec.run(path, seed=3, dtype=dtype).outputs
    assert logits.dtype == np.dtype(dtype)
    assert np.array_equal(logits, expected["logits"])
    assert np.array_equal(probs, expected["probs"])
    # and the same as the module tspec.compile loads, traced or not
    compiled = tspec.compile(path)
    again = compiled.transformer(tokens, mask, params, trace={})
    assert np.array_equal(again[0], logits) and np.array_equal(again[1], probs)
    logits = module.transformer(tokens, mask, params)[0]
    assert np.array_equal(compiled.transformer(tokens, mask, params)[0], logits)
    assert np.allclose(logits, expected["logits"], rtol=0, atol=1e-5 if dtype == "float32"
                       else 1e-12)
    # the defaults are the variant's: another theta or eps gives other numbers
    assert not np.allclose(module.transformer(tokens, mask, params, theta=10000.0)[0], logits)
    assert not np.allclose(module.transformer(tokens, mask, params, eps=0.5)[0], logits)
    assert np.array_equal(module.transformer(tokens, mask, params, theta=500000.0, eps=1e-6)[0],
                          logits)


def test_compile_returns_a_runnable_module_and_writes_nothing_in_the_tree(tmp_path,
                                                                          monkeypatch):
    monkeypatch.chdir(tmp_path)
    module = tspec.compile("llama3_8b", ["d_model=32", "H=4", "H_kv=2", "d_ff=48", "N=2",
                                         "V=50"])
    assert listing(tmp_path) == []
    assert not str(module.__file__).startswith(str(tmp_path))
    rng = np.random.default_rng(0)
    variant = api.load("llama3_8b", ["d_model=32", "H=4", "H_kv=2", "d_ff=48", "N=2", "V=50"])
    params = weights.random_params(weights.expected_shapes(variant.spec, variant.choices,
                                                           {**variant.dims, "T_dec": 6}), 0)
    tokens = rng.integers(0, 50, (2, 6))
    logits, _ = module.transformer(tokens, np.ones((2, 6), bool), params)
    assert logits.shape == (2, 6, 50)
    with open(module.__file__) as text:
        assert "theta: float = 500000.0" in text.read()      # llama3_8b's
    assert tspec.compile("llama3_8b", ["d_model=32", "H=4", "H_kv=2", "d_ff=48", "N=2",
                                       "V=50"]).__file__ == module.__file__   # once per text


def test_compile_refuses_a_variant_with_findings_and_a_missing_backend():
    with raises(FindingsError, "1 finding in base: no code generated (the first: "
                f"spec/transformer.tspec:{HEADS}: constraint-violated: d_model=512 is not divisible "
                "by H=10)"):
        tspec.compile("base", ["H=10"])
    try:
        import cupy  # noqa: F401
    except ImportError:
        with raises(UsageError, "backend cupy needs the cupy package, which is not installed"):
            tspec.compile("gpt2_small", backend="cupy")


@pytest.mark.slow
def test_a_spec_is_written_under_its_default_choices_named_after_it(capsys, tmp_path):
    out = tmp_path / "models"
    code, _, err = run(capsys, "generate", "transformer", "--out", str(out))
    assert (code, err) == (0, "")
    assert listing(out) == ["__init__.py", "_runtime.py", "transformer.py"]
    assert (out / "transformer.py").read_text() == api.source("transformer")


def test_the_cupy_backend_gets_its_runtime(capsys, tmp_path):
    out = tmp_path / "gpu"
    code, _, err = run(capsys, "generate", "gpt2_small", "--backend", "cupy", "--out",
                       str(out))
    assert (code, err) == (0, "")
    assert (out / "_runtime.py").read_text() == generate.runtime_source("cupy")
    assert (out / "gpt2_small.py").read_text() == generate.variant_source(
        api.load("gpt2_small"), "cupy")


# ---------------------------------------------------------------------------------------------
# --check

def test_check_says_current_then_stale_with_a_diff(capsys, tmp_path):
    path = tiny_llama(tmp_path)
    out = tmp_path / "models"
    assert run(capsys, "generate", str(path), "--out", str(out))[0] == 0
    code, printed, err = run(capsys, "generate", str(path), "--out", str(out), "--check")
    assert (code, printed, err) == (0, f"{out}/llama_tiny.py is current\n", "")
    stale = f"tspec: the code of llama_tiny in {out} is stale; run `tspec generate {path} " \
            f"--out {out}`\n"
    # the variant changed: its module is stale
    path.write_text(TINY_LLAMA.replace("theta = 500000.0", "theta = 10000.0"))
    code, printed, err = run(capsys, "generate", str(path), "--out", str(out), "--check")
    assert (code, err) == (1, stale)
    assert printed.startswith(f"--- {out}/llama_tiny.py\n+++ generated\n")
    assert "-    theta: float = 500000.0, trace: dict | None = None,\n" \
           "+    theta: float = 10000.0, trace: dict | None = None,\n" in printed
    path.write_text(TINY_LLAMA)
    # an edited runtime, and a missing __init__.py
    runtime = out / "_runtime.py"
    runtime.write_text(runtime.read_text() + "# edited\n")
    (out / "__init__.py").unlink()
    code, printed, err = run(capsys, "generate", str(path), "--out", str(out), "--check")
    assert (code, err) == (1, stale)
    assert printed.startswith(f"--- {out}/__init__.py\n+++ generated\n")
    assert f"\n--- {out}/_runtime.py\n+++ generated\n" in printed
    assert "-# edited\n" in printed
    assert listing(out) == ["_runtime.py", "llama_tiny.py"]      # --check writes nothing


def test_check_of_another_backend_names_it_in_the_command(capsys, tmp_path):
    out = tmp_path / "gpu"
    code, _, err = run(capsys, "generate", "gpt2_small", "--backend", "cupy", "--out",
                       str(out), "--check")
    assert code == 1
    assert err == (f"tspec: the code of gpt2_small in {out} is stale; run `tspec generate "
                   f"gpt2_small --backend cupy --out {out}`\n")
    assert not out.exists()


def test_the_default_folder_is_the_backends_in_the_checkout_for_a_built_in(capsys, tmp_path,
                                                                             monkeypatch):
    monkeypatch.setattr(shipped, "checkout", lambda: tmp_path)
    code, printed, err = run(capsys, "generate", "gpt2_small")
    assert (code, err) == (0, "")
    assert listing(tmp_path / "generated" / "numpy") == ["__init__.py", "_runtime.py",
                                                         "gpt2_small.py"]
    code, printed, _ = run(capsys, "generate", "gpt2_small", "--check")
    assert (code, printed) == (0, f"{tmp_path}/generated/numpy/gpt2_small.py is current\n")


def test_a_users_variant_goes_to_the_working_directory(capsys, tmp_path, monkeypatch):
    # before: into the checkout's generated/numpy/, beside tspec's own models (issue 32)
    monkeypatch.setattr(shipped, "checkout", lambda: tmp_path / "checkout")
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    tiny_llama(tmp_path / "work")
    code, printed, err = run(capsys, "generate", "llama_tiny.toml")
    assert (code, err) == (0, "")
    assert printed == "wrote __init__.py\nwrote llama_tiny.py\nwrote _runtime.py\n"
    assert listing(tmp_path / "work") == ["__init__.py", "_runtime.py", "llama_tiny.py",
                                          "llama_tiny.toml"]
    assert not (tmp_path / "checkout").exists()
    assert run(capsys, "generate", "llama_tiny.toml", "--check")[:2] == (
        0, "llama_tiny.py is current\n")


# ---------------------------------------------------------------------------------------------
# Refusals: one line, exit 2, nothing written

def refused(capsys, tmp_path, *argv):
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    code, printed, err = run(capsys, "generate", *argv)
    assert (code, printed) == (2, "")
    assert err.count("\n") == 1 and "Traceback" not in err
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before
    return err


def test_an_unknown_variant(capsys, tmp_path):
    err = refused(capsys, tmp_path, "nope", "--out", str(tmp_path / "m"))
    assert err.startswith("tspec: error: no spec or variant named 'nope': not a file, and not "
                          "a built-in (transformer, ")


@pytest.mark.parametrize("stem, why, suggestion", [
    ("my-llama", "not a Python module name", "my_llama"),
    ("3b", "not a Python module name", "model_3b"),
    ("_private", "not a Python module name", "model__private"),
    ("class", "a Python keyword", "class_"),
    ("modèle", "not a Python module name", "mod_le"),
])
def test_a_variant_whose_name_cannot_name_a_module(capsys, tmp_path, stem, why, suggestion):
    path = tiny_llama(tmp_path, stem)
    err = refused(capsys, tmp_path, str(path), "--out", str(tmp_path / "m"))
    assert err == (f"tspec: error: variant {stem!r} names its module, and {stem!r} is {why}: "
                   f"rename {path} to letters, digits and underscores that start with a "
                   f"letter (such as {suggestion})\n".replace(f"{stem!r}", stem))


def test_an_unproved_spec_and_a_variant_whose_sizes_break_it(capsys, tmp_path):
    # refused as `tspec run` refuses them: the findings as `tspec check` lists them, then
    # one line; exit 1 (the model is at fault, not the input), nothing written
    spec = tmp_path / "broken.tspec"
    spec.write_text(CONSEQUENCE)
    variant = tiny_llama(tmp_path, "odd_heads", TINY_LLAMA.replace("H = 4", "H = 5"))
    for target, last in ((spec, ("tspec: 1 finding and 1 consequence in broken: no code "
                                "generated")),
                         (variant, "tspec: 3 findings in odd_heads: no code generated")):
        before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
        code, printed, err = run(capsys, "generate", str(target), "--out",
                                 str(tmp_path / "m"))
        assert (code, printed) == (1, "")
        assert err == "\n".join(findings_text(tspec.check(str(target)).findings)
                                + [last]) + "\n"
        assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before


def test_out_naming_a_file(capsys, tmp_path):
    target = tmp_path / "models.py"
    target.write_text("x = 1\n")
    err = refused(capsys, tmp_path, "gpt2_small", "--out", str(target))
    assert err == (f"tspec: error: --out {target} is not a folder: it names the folder the "
                   "module, its runtime and __init__.py go in\n")
    err = refused(capsys, tmp_path, "gpt2_small", "--out", str(target), "--check")
    assert err.startswith(f"tspec: error: --out {target} is not a folder")


def test_a_folder_of_another_backends_models(capsys, tmp_path):
    out = tmp_path / "models"
    assert run(capsys, "generate", "gpt2_small", "--out", str(out))[0] == 0
    err = refused(capsys, tmp_path, "bert_base", "--backend", "cupy", "--out", str(out))
    assert err == (f"tspec: error: {out} holds the numpy runtime, which its models import: a "
                   "folder's models share one backend; give --out another folder for cupy\n")


def test_a_built_in_models_name_in_the_built_in_folder(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(shipped, "checkout", lambda: tmp_path)
    path = tiny_llama(tmp_path, "llama")
    err = refused(capsys, tmp_path, str(path), "--out", str(tmp_path / "generated" / "numpy"))
    assert err == (f"tspec: error: llama is the name of a built-in model of "
                   f"{tmp_path}/generated/numpy, which `tspec generate` writes there: give "
                   "--out another folder, or name the variant otherwise\n")
    # elsewhere the name is free
    assert run(capsys, "generate", str(path), "--out", str(tmp_path / "m"))[0] == 0


def test_outside_a_checkout_one_model_needs_out(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(shipped, "checkout", lambda: None)
    err = refused(capsys, tmp_path, "gpt2_small")
    assert err == ("tspec: error: tspec is not running from a project checkout, so generated "
                   "code has no default place: give --out DIR\n")


def test_an_unknown_backend(capsys, tmp_path):
    err = refused(capsys, tmp_path, "gpt2_small", "--backend", "jax", "--out", str(tmp_path))
    assert err == "tspec: error: unknown backend 'jax'; backends: numpy, cupy\n"


def test_nothing_is_half_written(capsys, tmp_path):
    out = tmp_path / "models"
    (out / "_runtime.py").mkdir(parents=True)       # the runtime cannot be written
    err = refused(capsys, tmp_path, "gpt2_small", "--out", str(out))
    assert err == f"tspec: error: cannot write {out}/_runtime.py: Is a directory\n"
    assert listing(out) == ["_runtime.py"]          # no module, no __init__.py
