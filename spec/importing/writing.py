"""An imported config as variant TOML: a comment naming the source, the description, and
the [dims], [choices] and [settings] tables (every value a number or an option name the
importer chose, never text copied from the config)."""

from tspec.importing.families import Imported

# the order dims are written in (the spec's own order of declaration)
DIM_ORDER = ("d_model", "H", "H_kv", "d_k", "d_v", "d_ff", "N", "V", "max_len", "V_type", "W")


def counted(n: int, noun: str) -> str:
    """1 layer, 2 layers."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def heads(dims: dict) -> str:
    """The heads as the description says them: 32 heads sharing 8 key-value heads; 8 heads
    sharing one key-value head (multi-query)."""
    text = counted(dims["H"], "head")
    if "H_kv" in dims:
        text += " sharing one key-value head (multi-query)" if dims["H_kv"] == 1 else \
            f" sharing {dims['H_kv']} key-value heads"
    return text


def variant_text(imported: Imported, source: str) -> str:
    dims = imported.dims
    parts = [f"d_model {dims['d_model']}", heads(dims)]
    parts += [f"d_ff {dims['d_ff']}", counted(dims["N"], "layer"), f"vocabulary {dims['V']}"]
    if "W" in dims:
        parts.append(f"sliding window {dims['W']}")
    description = f"{imported.model}: " + ", ".join(parts)
    lines = [f"# Imported by `tspec import` from {source}",
             f"# (model_type {imported.family!r}, Hugging Face {imported.model}).",
             *(f"# {note}" for note in imported.notes),
             'spec = "transformer"',
             f'description = "{description}"',
             "",
             "[dims]"]
    lines += [f"{name} = {dims[name]}" for name in DIM_ORDER if name in dims]
    lines += ["", "[choices]"]
    lines += [f'{name} = "{option}"' for name, option in imported.choices.items()]
    lines += ["", "[settings]"]
    lines += [f"{name} = {value!r}" for name, value in imported.settings.items()]
    return "\n".join(lines) + "\n"
