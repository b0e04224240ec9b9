"""benchmarks/handwritten_numpy.py, the hand-written NumPy forward that forward_speed.py times
beside the generated code, computes what PyTorch computes: a yardstick that is wrong would make
its timings meaningless. float32 inputs, PyTorch in float64 as the reference."""

import importlib.util

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from support.command_line import ROOT

from tspec.execution import checkpoints, weights

d_model, H, d_ff = 16, 4, 24
pytestmark = pytest.mark.reference
TOLERANCE = 2e-5  # float32 against float64, a few layers deep


@pytest.fixture(scope="module")
def handwritten():
    found = importlib.util.spec_from_file_location(
        "handwritten_numpy", ROOT / "benchmarks" / "handwritten_numpy.py")
    module = importlib.util.module_from_spec(found)
    found.loader.exec_module(module)
    return module


def float32_params(state, norm):
    flat = checkpoints.from_torch_transformer(state, norm=norm)
    return weights.nest({k: v.astype(np.float32) for k, v in flat.items()})


def largest_difference(ours, reference):
    assert ours.dtype == np.float32
    return float(np.abs(ours - reference.detach().numpy()).max())


def test_encoder_layer_matches_pytorch(handwritten):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model, H, d_ff, dropout=0.0,
                                             batch_first=True).double().eval()
    state = {f"encoder.layers.0.{k}": v for k, v in layer.state_dict().items()}
    params = float32_params(state, "post")["encoder"]["layers"][0]
    x = np.random.default_rng(0).standard_normal((3, 7, d_model))
    keep = np.ones((3, 7), dtype=bool)
    keep[-1, 4:] = False
    bias = np.where(keep[:, None, :], 0, -np.inf).repeat(7, 1).astype(np.float32)
    ours = handwritten.encoder_layer(x.astype(np.float32), bias, params, H)
    reference = layer(torch.tensor(x), src_key_padding_mask=torch.tensor(~keep))
    assert largest_difference(ours, reference) < TOLERANCE


def test_encoder_decoder_matches_pytorch(handwritten):
    torch.manual_seed(1)
    model = torch.nn.Transformer(d_model, H, 2, 2, d_ff, dropout=0.0,
                                 batch_first=True).double().eval()
    model.encoder.norm = None
    model.decoder.norm = None
    params = float32_params(model.state_dict(), "post")
    rng = np.random.default_rng(1)
    B, T = 2, 9
    src, tgt = rng.standard_normal((B, T, d_model)), rng.standard_normal((B, T, d_model))
    keep = np.ones((B, T), dtype=bool)
    keep[-1, 5:] = False
    bias = np.where(keep[:, None, :], 0, -np.inf).repeat(T, 1).astype(np.float32)
    ours = handwritten.encoder_decoder(src.astype(np.float32), tgt.astype(np.float32), bias,
                                       params, H)
    padding = torch.tensor(~keep)
    reference = model(torch.tensor(src), torch.tensor(tgt),
                      tgt_mask=torch.nn.Transformer.generate_square_subsequent_mask(
                          T, dtype=torch.float64),
                      src_key_padding_mask=padding, memory_key_padding_mask=padding)
    assert largest_difference(ours, reference) < TOLERANCE


def test_causal_stack_in_query_blocks_matches_pytorch(handwritten, monkeypatch):
    """Blocks of 4 query rows over 10 positions: three blocks, the last one short."""
    monkeypatch.setattr(handwritten, "QUERY_BLOCK", 4)
    torch.manual_seed(2)
    layer = torch.nn.TransformerEncoderLayer(
        d_model, H, d_ff, dropout=0.0, batch_first=True, norm_first=True,
        activation=lambda v: torch.nn.functional.gelu(v, approximate="tanh"))
    stack = torch.nn.TransformerEncoder(layer, 2, norm=torch.nn.LayerNorm(d_model),
                                        enable_nested_tensor=False).double().eval()
    state = {k.replace("layers.", "encoder.layers.").replace("norm.", "encoder.norm."): v
             for k, v in stack.state_dict().items()}
    params = float32_params(state, "pre")["encoder"]
    x = np.random.default_rng(2).standard_normal((2, 10, d_model))
    ours = handwritten.causal_stack(x.astype(np.float32), params, H)
    reference = stack(torch.tensor(x), is_causal=True,
                      mask=torch.nn.Transformer.generate_square_subsequent_mask(
                          10, dtype=torch.float64))
    assert largest_difference(ours, reference) < TOLERANCE
