"""``from_hf``: a config in, variant TOML out (written to a file when asked)."""

from pathlib import Path

from tspec.errors import ConfigError, UsageError, quoted
from tspec.importing.families import (
    FAMILIES,
    WITHOUT_POOLER,
    Imported,
    classes_text,
    model_type_of,
)
from tspec.importing.fields import Fields, shown
from tspec.importing.source import read_config
from tspec.importing.writing import variant_text
from tspec.inputs import user_path
from tspec.language.variant import MAX_DIGITS
from tspec.numbers import integer_text


def imported(config, *, pooler: bool = True) -> tuple[Imported, str]:
    """The config as the spec's choices, dims and settings, and the name of its source.

    ``pooler`` is BertModel's ``add_pooling_layer`` (a constructor argument, not a config
    field; a config saved from heads that build BertModel without it, BertForMaskedLM and
    the like, has none whatever ``pooler`` says); other families ignore it."""
    data, source = read_config(config)
    model_type, classes = identity(data, source)
    if model_type not in FAMILIES:
        if model_type is None:
            raise ConfigError(f"{source}: no model_type; tspec imports "
                              f"{', '.join(FAMILIES)} configs")
        raise ConfigError(f"{source}: model_type = {shown(model_type)} is not supported; "
                          f"tspec imports {', '.join(FAMILIES)} configs")
    if any(model_type_of(name) != model_type for name in classes):
        raise ConfigError(f"{source}: architectures = {shown(classes)} is not of model_type "
                          f"{shown(model_type)}, whose classes are {classes_text(model_type)}; "
                          "the config is of another model than its model_type says")
    fields = Fields(data, source, model_type)
    fields.raw("model_type")              # mapped: it chose the family
    fields.raw("architectures")           # fixed: of that family (checked above)
    fields.kinds["architectures"] = "fixed"
    if classes and all(name in WITHOUT_POOLER for name in classes):
        pooler = False
    result = FAMILIES[model_type](fields, pooler)
    for name, value in result.dims.items():     # each read bounded; one made of them too
        if value >= 10 ** MAX_DIGITS:
            raise ConfigError(f"{source}: {name} = {integer_text(value)} has more than "
                              f"{MAX_DIGITS} digits, the most a dim may have")
    fields.finish()
    result.fields = {name: fields.kinds[name] for name in data}
    return result, source


def identity(data: dict, source: str) -> tuple[str | None, list[str]]:
    """What a config says its model is: its model_type (None where it has none) and its
    ``architectures``, the classes it was saved from (none: empty); a model_type that is not a
    string, or architectures that are not a list of class names, are refused."""
    model_type, classes = data.get("model_type"), data.get("architectures")
    if model_type is not None and not isinstance(model_type, str):
        raise ConfigError(f"{source}: model_type = {shown(model_type)} is not supported; "
                          f"tspec imports {', '.join(FAMILIES)} configs")
    if classes is None:
        classes = []
    if not isinstance(classes, list) or not all(isinstance(name, str) for name in classes):
        raise ConfigError(f"{source}: architectures = {shown(classes)} is not a list of model "
                          "class names")
    return model_type, classes


def from_hf(config, out: str | Path | None = None, *, pooler: bool = True) -> str:
    """The variant TOML of a Hugging Face config: a ``config.json`` path, a folder holding
    one, a dict, or a transformers ``PretrainedConfig``. With ``out``, also written there.

    Every field is mapped, irrelevant to the forward pass, or refused with a ``ConfigError``
    naming it and its value. ``pooler=False`` imports a BertModel built without its pooler."""
    path = None if out is None else user_path(out, "--out")    # refused before any work
    result, source = imported(config, pooler=pooler)
    text = variant_text(result, source)
    if path is not None:
        if path.is_dir():
            raise UsageError(f"--out {quoted(str(path))} is a folder; name the variant file")
        try:
            path.write_text(text, encoding="utf-8")
        except OSError as error:
            raise UsageError(f"cannot write {quoted(str(path))}: {error.strerror}") from None
    return text
