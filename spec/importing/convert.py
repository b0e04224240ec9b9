"""``from_hf``: a config in, variant TOML out (written to a file when asked)."""

from pathlib import Path

from tspec.errors import ConfigError, UsageError, quoted
from tspec.importing.families import FAMILIES, Imported
from tspec.importing.fields import Fields, shown
from tspec.importing.source import read_config
from tspec.importing.writing import variant_text


def imported(config, *, pooler: bool = True) -> tuple[Imported, str]:
    """The config as the spec's choices, dims and settings, and the name of its source.

    ``pooler`` is BertModel's ``add_pooling_layer`` (a constructor argument, not a config
    field); other families ignore it."""
    data, source = read_config(config)
    model_type = data.get("model_type")
    if model_type not in FAMILIES:
        if model_type is None:
            raise ConfigError(f"{source}: no model_type; tspec imports "
                              f"{', '.join(FAMILIES)} configs")
        raise ConfigError(f"{source}: model_type = {shown(model_type)} is not supported; "
                          f"tspec imports {', '.join(FAMILIES)} configs")
    fields = Fields(data, source, model_type)
    fields.raw("model_type")              # mapped: it chose the family
    result = FAMILIES[model_type](fields, pooler)
    fields.finish()
    result.fields = {name: fields.kinds[name] for name in data}
    return result, source


def from_hf(config, out: str | Path | None = None, *, pooler: bool = True) -> str:
    """The variant TOML of a Hugging Face config: a ``config.json`` path, a folder holding
    one, a dict, or a transformers ``PretrainedConfig``. With ``out``, also written there.

    Every field is mapped, irrelevant to the forward pass, or refused with a ``ConfigError``
    naming it and its value. ``pooler=False`` imports a BertModel built without its pooler."""
    result, source = imported(config, pooler=pooler)
    text = variant_text(result, source)
    if out is not None:
        path = Path(out)
        if path.is_dir():
            raise UsageError(f"--out {quoted(str(path))} is a folder; name the variant file")
        try:
            path.write_text(text, encoding="utf-8")
        except OSError as error:
            raise UsageError(f"cannot write {quoted(str(path))}: {error.strerror}") from None
    return text
