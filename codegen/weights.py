"""Parameters for generated code: their names and shapes, random ones, and loading real ones.

Generated functions take parameters as nested dictionaries keyed by the spec's names
(``params["encoder"]["layers"][0]["self_attention"]["W_Q"]``). On disk and in reports they are
flat, dotted: ``encoder.layers.0.self_attention.W_Q``. ``expected_shapes`` gives every flat name
with its concrete shape for a variant; loaders check each array against it and name the
parameter, the expected and the actual shape on a mismatch.
"""

import zipfile
from pathlib import Path

import numpy as np
import sympy

from spec.errors import UsageError, VariantError
from spec.model import BlockCall, Spec, TensorDecl, concrete_values, select
from spec.prove import evaluate


class WeightsError(VariantError):
    """Parameters that do not fit the spec: missing, unexpected, or of the wrong shape."""


def expected_shapes(spec: Spec, choices: dict[str, str], dims: dict[str, int]) -> dict:
    """Every parameter's flat name and concrete shape (family axis first), in spec order."""
    chosen = spec.choice_values(choices)
    values = concrete_values(spec, chosen, dims)
    out: dict[str, tuple[int, ...]] = {}

    def size(expr, where):
        try:
            value = evaluate(sympy.sympify(expr), values)
        except KeyError as missing:
            raise UsageError(f"{where}: dim {missing.args[0]} has no value; give it with "
                             f"--set {missing.args[0]}=VALUE") from None
        return int(value)

    def walk(statements, prefix):
        for s in select(statements, chosen):
            if isinstance(s, TensorDecl) and s.role == "param" and s.shape is not None:
                name = prefix + s.name
                family = (size(s.shape.family, name),) if s.shape.family is not None else ()
                out[name] = family + tuple(size(d, name) for d in s.shape.dims)
            elif isinstance(s, BlockCall):
                block = spec.blocks[s.block]
                if s.repeat is None:
                    walk(block.body, f"{prefix}{s.instance}.")
                else:
                    for index in range(size(s.repeat, prefix + s.instance)):
                        walk(block.body, f"{prefix}{s.instance}.{index}.")

    walk(spec.body, "")
    return out


def nest(flat: dict[str, np.ndarray]) -> dict:
    """Dotted names to nested dictionaries, numeric parts to lists."""
    root: dict = {}
    for name, value in flat.items():
        node = root
        parts = name.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return _lists(root)


def _lists(node):
    if not isinstance(node, dict):
        return node
    if node and all(key.isdigit() for key in node):
        return [_lists(node[str(i)]) for i in range(len(node))]
    return {key: _lists(value) for key, value in node.items()}


def flatten(nested, prefix: str = "") -> dict[str, np.ndarray]:
    out = {}
    items = enumerate(nested) if isinstance(nested, list) else nested.items()
    for key, value in items:
        name = f"{prefix}{key}"
        if isinstance(value, (dict, list)):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


def random_params(shapes: dict[str, tuple], seed: int = 0, dtype=np.float32) -> dict:
    """Seeded random parameters: LayerNorm gains 1, biases 0, matrices N(0, 1/fan_in)."""
    rng = np.random.default_rng(seed)
    flat = {}
    for name, shape in shapes.items():
        leaf = name.rsplit(".", 1)[-1]
        if leaf.startswith("gamma"):
            flat[name] = np.ones(shape, dtype)
        elif leaf.startswith(("beta", "b_")):
            flat[name] = np.zeros(shape, dtype)
        else:
            fan_in = shape[-2] if len(shape) >= 2 else shape[-1]
            flat[name] = (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(dtype)
    return nest(flat)


def validate(flat: dict[str, np.ndarray], shapes: dict[str, tuple], where: str) -> dict:
    """Check names, shapes and dtypes against the spec; return the nested parameters."""
    missing = [n for n in shapes if n not in flat]
    unexpected = [n for n in flat if n not in shapes]
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"missing {', '.join(missing[:5])}"
                         + (f" and {len(missing) - 5} more" if len(missing) > 5 else ""))
        if unexpected:
            parts.append(f"unexpected {', '.join(unexpected[:5])}"
                         + (f" and {len(unexpected) - 5} more" if len(unexpected) > 5 else ""))
        raise WeightsError(f"{where}: parameters do not match the spec: {'; '.join(parts)}")
    dtypes = set()
    for name, shape in shapes.items():
        array = flat[name]
        if tuple(array.shape) != tuple(shape):
            raise WeightsError(f"{where}: parameter {name} has shape {tuple(array.shape)}; the "
                               f"spec expects {tuple(shape)}")
        if array.dtype.kind != "f":
            raise WeightsError(f"{where}: parameter {name} has dtype {array.dtype}; parameters "
                               "are floating point")
        dtypes.add(array.dtype)
    if len(dtypes) > 1:
        raise WeightsError(f"{where}: parameters mix dtypes ({', '.join(sorted(map(str, dtypes)))})"
                           "; NumPy would silently compute in the widest")
    return nest({name: flat[name] for name in shapes})


def load(path: str | Path, shapes: dict[str, tuple]) -> dict:
    """Parameters from a .safetensors or .npz file of flat dotted names."""
    path = Path(path)
    if path.suffix == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.numpy import load_file
        try:
            flat = load_file(str(path))
        except (OSError, ValueError, SafetensorError) as error:
            raise UsageError(f"cannot read {path}: {error}") from None
    elif path.suffix == ".npz":
        try:
            with np.load(path, allow_pickle=False) as archive:
                flat = {name: archive[name] for name in archive.files}
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as error:
            raise UsageError(f"cannot read {path}: {error}") from None
    else:
        raise UsageError(f"{path}: weights are .safetensors or .npz files")
    return validate(flat, shapes, str(path))


def save(path: str | Path, params: dict) -> None:
    """Write nested parameters as flat dotted names (.safetensors or .npz)."""
    path = Path(path)
    flat = {name: np.ascontiguousarray(value) for name, value in flatten(params).items()}
    if path.suffix == ".safetensors":
        from safetensors.numpy import save_file
        save_file(flat, str(path))
    elif path.suffix == ".npz":
        np.savez(path, **flat)
    else:
        raise UsageError(f"{path}: weights are .safetensors or .npz files")
