"""Accounting for every field of a config: each is mapped (read by a family), irrelevant to
the forward pass (listed, by name), or refused by name and value in one line."""

import json

from tspec.errors import ConfigError
from tspec.inputs import integer, real, short_repr
from tspec.language.variant import MAX_DIGITS

_DIM_BOUND = 10 ** MAX_DIGITS

# Fields of every transformers config (PretrainedConfig, 4.x and 5.x) that do not change a
# model's forward pass: bookkeeping, what the outputs include, generation defaults, the task
# heads' labels, the dtype the weights were saved in (a checkpoint's business), token ids.
GENERIC_IRRELEVANT = frozenset({
    # bookkeeping and output options
    "transformers_version", "_name_or_path", "return_dict",
    "output_hidden_states", "output_attentions", "torchscript", "use_return_dict",
    "_attn_implementation", "_attn_implementation_autoset", "_commit_hash",
    "attn_implementation", "auto_map", "tokenizer_class", "prefix", "finetuning_task",
    "task_specific_params", "problem_type", "id2label", "label2id", "num_labels",
    "pruned_heads", "gradient_checkpointing", "use_cache", "quantization_config",
    # the dtype the weights were saved in: the run's dtype is the caller's
    "dtype", "torch_dtype", "use_bfloat16", "tf_legacy_loss",
    # a computation schedule (the feed-forward in chunks of positions): the same numbers
    "chunk_size_feed_forward",
    # token ids: what the tokenizer and generation use, not the forward pass
    "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id",
    "forced_bos_token_id", "forced_eos_token_id",
    # generation defaults (transformers 4.x kept them in the model config)
    "max_length", "min_length", "do_sample", "early_stopping", "num_beams",
    "num_beam_groups", "diversity_penalty", "temperature", "top_k", "top_p", "typical_p",
    "repetition_penalty", "length_penalty", "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size", "bad_words_ids", "num_return_sequences",
    "output_scores", "return_dict_in_generate", "remove_invalid_values",
    "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens",
    "output_logits",
    # initialisation of new weights
    "initializer_range",
})
# Fields that must hold one value (a decoder model, no cross-attention...): any other is
# refused. Absent is as good as the value.
GENERIC_FIXED = {"is_encoder_decoder": False, "add_cross_attention": False,
                 "tie_encoder_decoder": False, "cross_attention_hidden_size": None}


def shown(value) -> str:
    """A config value as an error shows it: JSON, cut short when long; an integer of more
    than 80 digits as ``~1.000e5000`` (never converted to text), and a value JSON cannot
    write (a long integer inside, an object, nesting too deep) as Python's repr, cut short."""
    if _long_integers(value):
        return short_repr(value)
    try:
        text = json.dumps(value, sort_keys=True)
    except (TypeError, ValueError, RecursionError):
        return short_repr(value)
    text = text if text.isprintable() else ascii(text)
    return text if len(text) <= 80 else text[:77] + "..."


def _long_integers(value, depth: int = 0) -> bool:
    """Whether ``value`` is, or holds near its top, an integer of more than 80 digits."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value.bit_length() > 266
    if depth < 4 and isinstance(value, (list, tuple)):
        return any(_long_integers(item, depth + 1) for item in value[:32])
    if depth < 4 and isinstance(value, dict):
        return any(_long_integers(item, depth + 1) for item in list(value.values())[:32])
    return False


class Fields:
    """The fields of one config, read by a family; ``finish`` refuses every one nobody took.

    ``where`` prefixes errors (the config's name); ``family`` names the model type in them."""

    def __init__(self, data: dict, where: str, family: str):
        self.data = data
        self.where = where
        self.family = family
        self.taken: set[str] = set()
        # how each field read was accounted for: "mapped", "irrelevant" or "fixed" (only one
        # value is supported)
        self.kinds: dict[str, str] = {}

    def error(self, message: str) -> ConfigError:
        return ConfigError(f"{self.where}: {message}")

    def refuse(self, name: str, value, why: str = "is not supported") -> ConfigError:
        return self.error(f"{name} = {shown(value)} {why}")

    def has(self, name: str) -> bool:
        return name in self.data

    def raw(self, name: str, default=None):
        self.taken.add(name)
        self.kinds.setdefault(name, "mapped")
        return self.data.get(name, default)

    def integer(self, name: str, default=None, *, required: bool = True,
                least: int = 1) -> int | None:
        """A positive integer field (a dim; or one of at least ``least``); ``default`` when
        absent or null."""
        value = self.raw(name)
        if value is None:
            if default is None and required:
                raise self.error(f"{name} is missing; a {self.family} config needs it")
            return default
        number = integer(value)
        if number is None or number < least:
            raise self.refuse(name, value, "is not a positive integer" if least == 1 else
                              f"is not an integer of at least {least}")
        if number >= _DIM_BOUND:            # a variant's dims have at most MAX_DIGITS
            raise self.refuse(name, value, f"is not a positive integer of at most "
                                           f"{MAX_DIGITS} digits")
        return number

    def number(self, name: str, default: float | None = None) -> float:
        """A positive finite number (a setting)."""
        value = self.raw(name)
        if value is None:
            if default is None:
                raise self.error(f"{name} is missing; a {self.family} config needs it")
            return default
        number = real(value)                # None past a float's range: 10**400
        if number is None or number <= 0:
            raise self.refuse(name, value, "is not a positive number")
        return number

    def flag(self, name: str, default: bool) -> bool:
        value = self.raw(name)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.refuse(name, value, "is not true or false")
        return value

    def one_of(self, name: str, table: dict, default=None):
        """The mapped value of a field whose values ``table`` lists; another is refused."""
        value = self.raw(name, default)
        try:
            return table[value]
        except (KeyError, TypeError):
            raise self.refuse(name, value) from None

    def require(self, name: str, expected) -> None:
        """A field whose only supported value is ``expected`` (absent or null is as good)."""
        value = self.raw(name)
        self.kinds[name] = "fixed"
        if value is not None and value != expected:
            raise self.refuse(name, value)

    def irrelevant(self, *names: str) -> None:
        self.taken.update(names)
        self.kinds.update(dict.fromkeys(names, "irrelevant"))

    def finish(self) -> None:
        self.irrelevant(*GENERIC_IRRELEVANT)
        for name, expected in GENERIC_FIXED.items():
            if name not in self.taken:
                self.require(name, expected)
        for name, value in self.data.items():
            if name not in self.taken:
                raise self.refuse(name, value, f"is not a field tspec knows for model_type "
                                               f"{shown(self.family)}")
