"""Explicit name maps from other implementations' state dicts to the spec's parameter names.

Each map takes a state dict (name -> array-like, e.g. ``model.state_dict()``; tensors are
converted with ``numpy()``) and returns flat spec names (``encoder.layers.0.self_attention.W_Q``)
ready for ``weights.validate``. Weights are transposed where the source stores ``y = x W^T``
(``nn.Linear``); GPT-2's ``Conv1D`` already stores ``y = x W``. A name the map expects but the
state dict lacks is an error naming it; so is a state-dict entry the map has no place for,
except the buffers and heads each map names as unused (with the reason); layers are numbered
0, 1, ... without a gap, or the map says which are missing.

Each map also reads a checkpoint file without reading it (``checkpoint_files``): given a
``checkpoint_files.Checkpoint`` (name -> its entry's shape and dtype, nothing read), ``read``
gives ``Tensor`` views that only record the transposes and slices, and the map returns a
``Plan`` (spec name -> view, the unused entries and why, the checks to make on the data), so
that every shape is checked against the spec before one byte of a tensor is read. A state
dict is read through the same views, made arrays by ``finish``.

A slice's shape alone says nothing of what it was cut from: a GPT-2 ``c_attn`` of 4 * d_model
columns gives Q, K and V of the right shapes from its first 3 * d_model and drops the rest. So
an entry a map slices (a stack of Q, K and V; a fused gate and up projection) is read with the
whole shape it must have (``read(name, whole=..., of=...)``), checked there, and the view of
an entry read without one cannot be sliced at all.
"""

import re

import numpy as np

from tspec.execution.weights import WeightsError, _shown


def _array(value, what: str, name: str) -> np.ndarray:
    """An entry of a state dict as a NumPy array; one whose dtype NumPy has no type for (a
    bfloat16 or float8 tensor) is refused by name, before any parameter is used."""
    if hasattr(value, "detach"):
        value = value.detach().cpu()
        try:
            value = value.numpy()
        except TypeError:                   # PyTorch: "Got unsupported ScalarType BFloat16"
            raise WeightsError(f"{what}: entry {name!r} has dtype {value.dtype}, which NumPy "
                               "has no type for; convert the state dict first, e.g. "
                               "model.float().state_dict()") from None
    return np.asarray(value)


class Tensor:
    """A checkpoint entry as a map uses it, not read: its name, the shape it will have, and the
    transposes and slices to take of it (``.T``, ``[...]``; ``copy()`` is itself, since reading
    it copies). ``whole``: the entry was read with the whole shape it must have (``_Source``),
    checked; only then may it be sliced."""

    def __init__(self, name: str, shape: tuple[int, ...], steps: tuple = (), *,
                 whole: bool = False, what: str = "a map"):
        self.name, self.shape, self.steps = name, tuple(shape), steps
        self.whole, self.what = whole, what

    @property
    def T(self) -> "Tensor":                    # NumPy's name for the transpose
        return Tensor(self.name, self.shape[::-1], self.steps + ("T",), whole=self.whole,
                      what=self.what)

    def __getitem__(self, index) -> "Tensor":
        if not self.whole:          # a map's mistake, not the checkpoint's: no WeightsError
            raise TypeError(f"{self.what} slices entry {self.name!r} without the whole shape "
                            "it needs: read(name, whole=..., of=...)")
        shape = np.broadcast_to(np.empty((), np.int8), self.shape)[index].shape
        return Tensor(self.name, shape, self.steps + (index,), whole=True, what=self.what)

    def copy(self) -> "Tensor":
        return self

    def of(self, array: np.ndarray) -> np.ndarray:
        """This view of ``array`` (the entry as stored): a view, nothing copied."""
        for step in self.steps:
            array = array.T if step == "T" else array[step]
        return array


class LayersPast(WeightsError):
    """A checkpoint numbering a layer past the variant's ``most``: ``count`` layers (0, 1, ...
    without a gap), or else ``number``, the highest, in entry ``key``. ``said`` puts it as a
    loader names the stack and the variant."""

    def __init__(self, source, prefix: str, most: int, number: int, count: int | None,
                 key: str):
        self.prefix, self.most, self.number, self.count, self.key = \
            prefix, most, number, count, key
        has = f"{count} layers" if count is not None else \
            f"layer {number} ({prefix}N, in {_shown(key)})"
        super().__init__(f"{source.what}: {source.noun} has {has}; the variant has {most} "
                         f"layer{'s' * (most != 1)}")

    def said(self, stack: str, variant: str) -> str:
        if self.count is not None:
            return f"the checkpoint has {self.count} {stack} layers; {variant} has {self.most}"
        return (f"the checkpoint has layer {self.number} (in {_shown(self.key)}); {variant} has "
                f"{self.most} {stack} layer{'s' * (self.most != 1)}")


class Plan(dict):
    """What a map makes of a checkpoint it has not read: spec name -> Tensor; ``unused``: entry
    -> why it is no parameter; ``same``: (entry, entry, message) pairs whose data must be equal
    (a tied output embedding stored twice); ``what``: the names' family."""

    def __init__(self, flat: dict, what: str, unused: dict[str, str], same: list):
        super().__init__(flat)
        self.what, self.unused, self.same = what, unused, same


class _Source:
    """A state dict read entry by entry; what was never read is reported as unexpected.

    ``ignore``: patterns of entries that are no parameter of the spec (buffers, heads the spec
    has not), with why (a dict), or a tuple of patterns: they are left out and named as unused.
    Every entry is read as a ``Tensor`` view: for a ``Checkpoint`` (``lazy``) ``finish``
    returns a Plan of them; for a state dict (its entries made arrays as they are read, so that
    a dtype NumPy has no type for is named first), each view is taken of its array, copied
    where it transposes or slices."""

    def __init__(self, state: dict, what: str, ignore: tuple[str, ...] | dict[str, str] = ()):
        reasons = ignore if isinstance(ignore, dict) else dict.fromkeys(ignore, "not in the spec")
        self.unused = {}
        for key in state:
            why = next((why for pattern, why in reasons.items() if re.fullmatch(pattern, key)),
                       None)
            if why is not None:
                self.unused[key] = why
        self.state = {k: v for k, v in state.items() if k not in self.unused}
        self.lazy = getattr(state, "lazy", False)
        self.noun = "checkpoint" if self.lazy else "state dict"
        self.what = what
        self.used: set[str] = set()
        self.same: list[tuple[str, str, str]] = []
        self.arrays: dict[str, np.ndarray] = {}     # a state dict's entries read, as arrays

    def __call__(self, name: str, whole: tuple[int, ...] | None = None, of: str = "") -> Tensor:
        """Entry ``name`` as a view. ``whole``: the shape the entry must have, for a map that
        slices it (``of`` names the slices, a plural: "Q, K and V stacked at ..."); another is
        refused naming the entry, its shape and the shape needed."""
        if name not in self.state:
            raise WeightsError(f"{self.what}: {self.noun} has no entry {name!r}")
        self.used.add(name)
        shape = tuple(self.state[name].shape) if self.lazy else self._array(name).shape
        if whole is not None and shape != tuple(whole):
            raise WeightsError(f"{self.what}: entry {_shown(name)} has shape {shape}; {of} "
                               f"need {tuple(whole)}")
        return Tensor(name, shape, whole=whole is not None, what=self.what)

    def matrix(self, name: str, what: str) -> Tensor:
        """Entry ``name``, which must be a matrix (``what`` says of what): a map reads its
        columns as the model's width."""
        tensor = self(name)
        if len(tensor.shape) != 2:
            raise WeightsError(f"{self.what}: entry {_shown(name)} has shape {tensor.shape}; "
                               f"it is {what}")
        return tensor

    def _array(self, name: str) -> np.ndarray:
        if name not in self.arrays:
            self.arrays[name] = _array(self.state[name], self.what, name)
        return self.arrays[name]

    def has(self, name: str) -> bool:
        return name in self.state

    def layers(self, prefix: str, pattern: str = r"(\d+)\.", most: int | None = None) -> int:
        """How many layers the entries under ``prefix`` number (``prefix`` + N + "."), after
        checking that they are 0, 1, ... without a gap; a gap is named. ``most``: the layers
        the variant has, past which a number is refused at once. Nothing is built from a
        number read from a name (one of 10**20 is a gap of 10**20 layers, said as a range)."""
        found = re.compile(re.escape(prefix) + pattern)
        seen: dict[str, str] = {}            # a number as written -> the first entry with it
        for key in self.state:
            if (match := found.match(key)):
                seen.setdefault(match.group(1), key)
        numbers = set()
        for text, key in seen.items():
            digits = text.lstrip("0") or "0"
            if len(digits) > 40:                # past any dim a variant may give
                raise WeightsError(f"{self.what}: {self.noun} has layer {digits[:12]}... (a "
                                   f"number of {len(digits):,} digits): no model has that "
                                   f"many layers ({prefix}N)")
            numbers.add(int(digits))
        numbers = sorted(numbers)
        gaps = [(low + 1, high - 1) for low, high in zip([-1, *numbers], numbers)
                if high > low + 1]              # runs of missing numbers, first and last
        if most is not None and numbers and numbers[-1] >= most:
            raise LayersPast(self, prefix, most, numbers[-1], None if gaps else len(numbers),
                             seen[next(text for text in seen
                                       if int(text.lstrip("0") or "0") == numbers[-1])])
        if gaps:
            missing = sum(last - first + 1 for first, last in gaps)
            said = (f"layer {gaps[0][0]} is missing" if missing == 1 else
                    f"layers {_runs(gaps)} are missing")
            raise WeightsError(f"{self.what}: {self.noun} has layer{'s' * (len(numbers) > 1)} "
                               f"{_numbers(numbers)}: "
                               f"{said} ({prefix}N)")
        return len(numbers)

    def must_equal(self, name: str, other: str, message: str) -> None:
        """Entries ``name`` and ``other`` must hold the same data, else ``message``: checked
        here for a state dict, after the shapes and before the parameters for a checkpoint."""
        self.used.add(name)
        if self.lazy:
            if tuple(self.state[name].shape) != tuple(self.state[other].shape):
                raise WeightsError(f"{self.what}: {message}")
            self.same.append((name, other, message))
        elif not np.array_equal(self._array(name), self._array(other)):
            raise WeightsError(f"{self.what}: {message}")

    def finish(self, flat: dict):
        unused = [k for k in self.state if k not in self.used]
        if unused:
            raise WeightsError(f"{self.what}: no place in the spec for "
                               f"{', '.join(_shown(k) for k in unused[:5])}"
                               + (f" and {len(unused) - 5} more" if len(unused) > 5 else ""))
        if self.lazy:
            return Plan(flat, self.what, self.unused, self.same)
        return {name: self._made(value) for name, value in flat.items()}

    def _made(self, value):
        """A view of a state dict's entry as an array (one given as an array, as is)."""
        if not isinstance(value, Tensor):
            return value
        array = value.of(self._array(value.name))
        return array.copy() if value.steps else array


def _numbers(numbers: list[int]) -> str:
    """0, 1, 3 as "0, 1, 3"; runs of three or more as ranges: "0-16, 18-31"."""
    runs: list[list[int]] = []
    for number in numbers:
        if runs and number == runs[-1][1] + 1:
            runs[-1][1] = number
        else:
            runs.append([number, number])
    return _runs(runs)


def _runs(runs) -> str:
    """Runs of numbers, (first, last) each, as _numbers says them: "2-99999999999999999998"
    (nothing is counted out)."""
    parts = []
    for first, last in runs:
        parts.extend([f"{first}-{last}"] if last - first >= 2 else
                     map(str, range(first, last + 1)))
    return ", ".join(parts)


def _linear_attention(read, prefix: str, out: str, flat: dict, width: int,
                      width_of: str) -> None:
    """nn.MultiheadAttention: in_proj stacks Q, K, V rows, each ``width`` (the columns of entry
    ``width_of``) wide; y = x W^T + b."""
    at = f"{prefix}." if prefix else ""
    stacked = f"Q, K and V stacked at the width of {width_of} ({width})"
    weight = read(f"{at}in_proj_weight", (3 * width, width), stacked)
    bias = read(f"{at}in_proj_bias", (3 * width,), stacked)
    for index, part in enumerate("QKV"):
        rows = slice(index * width, (index + 1) * width)
        flat[f"{out}.W_{part}"] = weight[rows].T.copy()
        flat[f"{out}.b_{part}"] = bias[rows].copy()
    flat[f"{out}.W_O"] = read(f"{at}out_proj.weight").T.copy()
    flat[f"{out}.b_O"] = read(f"{at}out_proj.bias")


def _layer_norm(read, prefix: str, out: str, flat: dict) -> None:
    flat[f"{out}.gamma"] = read(f"{prefix}.weight")
    flat[f"{out}.beta"] = read(f"{prefix}.bias")


def _linear(read, prefix: str, weight: str, bias: str, flat: dict) -> None:
    flat[weight] = read(f"{prefix}.weight").T.copy()
    flat[bias] = read(f"{prefix}.bias")


def from_torch_multi_head_attention(state: dict) -> dict[str, np.ndarray]:
    """``torch.nn.MultiheadAttention`` (with biases) to the spec's multi_head_attention
    parameters (W_Q, W_K, W_V, W_O and their biases)."""
    read = _Source(state, "nn.MultiheadAttention")
    flat: dict[str, np.ndarray] = {}
    width = read.matrix("in_proj_weight", "Q, K and V stacked, (3 * d_model, d_model)").shape[1]
    _linear_attention(read, "", "", flat, width, "in_proj_weight")
    return read.finish({name.lstrip("."): value for name, value in flat.items()})


def from_torch_transformer(state: dict, *, norm: str, embedding=None,
                           output=None) -> dict[str, np.ndarray]:
    """``torch.nn.Transformer`` (batch_first or not: the weights are the same) to the spec.

    The spec's encoder-decoder with ``attention_bias=all``; ``norm`` is "post" (the spec has no
    final LayerNorm, so the model's ``encoder.norm`` and ``decoder.norm`` must be None) or
    "pre" (``norm_first=True``; the final norms map to ``final_norm``). nn.Transformer has no
    embedding or output projection: give them as ``embedding`` (V, d_model) and ``output``
    (d_model, V), or leave them out to get the stacks' parameters alone.
    """
    read = _Source(state, "nn.Transformer")
    flat: dict[str, np.ndarray] = {}
    if embedding is not None:
        flat["E"] = _array(embedding, "nn.Transformer", "embedding")
    if output is not None:
        flat["W_out"] = _array(output, "nn.Transformer", "output")
    width_of = "encoder.layers.0.self_attn.in_proj_weight"
    width = read.matrix(width_of, "Q, K and V stacked, (3 * d_model, d_model)").shape[1]
    for stack in ("encoder", "decoder"):
        for index in range(read.layers(f"{stack}.layers.")):
            source, target = f"{stack}.layers.{index}", f"{stack}.layers.{index}"
            _linear_attention(read, f"{source}.self_attn", f"{target}.self_attention", flat,
                              width, width_of)
            norms = 2
            if stack == "decoder":
                _linear_attention(read, f"{source}.multihead_attn", f"{target}.cross_attention",
                                  flat, width, width_of)
                norms = 3
            _linear(read, f"{source}.linear1", f"{target}.feed_forward.W_1",
                    f"{target}.feed_forward.b_1", flat)
            _linear(read, f"{source}.linear2", f"{target}.feed_forward.W_2",
                    f"{target}.feed_forward.b_2", flat)
            for number in range(1, norms + 1):
                _layer_norm(read, f"{source}.norm{number}", f"{target}.norm_{number}", flat)
        if read.has(f"{stack}.norm.weight"):
            if norm == "post":
                raise WeightsError(f"nn.Transformer: {stack}.norm is set, but the post-LN spec "
                                   "(the seeds) has no final LayerNorm; set the model's "
                                   f"{stack}.norm = None")
            _layer_norm(read, f"{stack}.norm", f"{stack}.final_norm", flat)
    return read.finish(flat)


def from_gpt2(state: dict, *, output_embedding: str = "tied",
              layers: int | None = None) -> dict[str, np.ndarray]:
    """Hugging Face ``GPT2LMHeadModel`` (or ``GPT2Model``) to the spec.

    The spec's decoder-only model with norm=pre, activation=gelu_tanh, positional=learned,
    attention_bias=all. GPT-2's Conv1D stores y = x W + b, so no transposes; c_attn stacks Q, K,
    V side by side in its columns. ``output_embedding`` is the variant's choice: "tied" (GPT-2's
    own) takes ``lm_head.weight`` only as a copy of ``wte.weight`` (a state dict holds both, a
    saved file usually neither) and refuses one that differs, which such a variant could not
    compute with; "separate" takes it as ``W_out`` (nn.Linear, transposed) and needs it.
    ``layers``: the variant's layer count, past which a layer number is refused at once.
    """
    prefix = "transformer." if any(k.startswith("transformer.") for k in state) else ""
    ignore = {r".*\.attn\.(masked_)?bias": "a causal-mask buffer of older versions"}
    read = _Source(state, "GPT-2", ignore)
    flat = {"E": read.matrix(f"{prefix}wte.weight", "the token embedding, (V, d_model)"),
            "P_table": read(f"{prefix}wpe.weight")}
    width = flat["E"].shape[1]
    side_by_side = f"Q, K and V side by side at the width of {prefix}wte.weight ({width})"
    for index in range(read.layers(f"{prefix}h.", most=layers)):
        source, target = f"{prefix}h.{index}", f"decoder.layers.{index}"
        _layer_norm(read, f"{source}.ln_1", f"{target}.norm_1", flat)
        weight = read(f"{source}.attn.c_attn.weight", (width, 3 * width), side_by_side)
        bias = read(f"{source}.attn.c_attn.bias", (3 * width,), side_by_side)
        for part_index, part in enumerate("QKV"):
            columns = slice(part_index * width, (part_index + 1) * width)
            flat[f"{target}.self_attention.W_{part}"] = weight[:, columns].copy()
            flat[f"{target}.self_attention.b_{part}"] = bias[columns].copy()
        flat[f"{target}.self_attention.W_O"] = read(f"{source}.attn.c_proj.weight")
        flat[f"{target}.self_attention.b_O"] = read(f"{source}.attn.c_proj.bias")
        _layer_norm(read, f"{source}.ln_2", f"{target}.norm_2", flat)
        flat[f"{target}.feed_forward.W_1"] = read(f"{source}.mlp.c_fc.weight")
        flat[f"{target}.feed_forward.b_1"] = read(f"{source}.mlp.c_fc.bias")
        flat[f"{target}.feed_forward.W_2"] = read(f"{source}.mlp.c_proj.weight")
        flat[f"{target}.feed_forward.b_2"] = read(f"{source}.mlp.c_proj.bias")
    _layer_norm(read, f"{prefix}ln_f", "decoder.final_norm", flat)
    _output_projection(read, flat, f"{prefix}wte.weight", output_embedding)
    return read.finish(flat)


def from_bert(state: dict, *, pooler: bool = True,
              layers: int | None = None) -> dict[str, np.ndarray]:
    """Hugging Face ``BertModel`` to the spec, every parameter; ``pooler=False`` for the
    variant without one (encoder_io=bert_unpooled), which names a pooler the checkpoint holds
    as unused.

    The spec's encoder-only model with encoder_io=bert, norm=post, activation=gelu,
    positional=learned, attention_bias=all (the bert_base variant; run it with eps=1e-12):
    the word, position and token-type embeddings (``E``, ``P_table``, ``E_type``), the
    embedding LayerNorm (``gamma_emb``, ``beta_emb``), the encoder's layers and the pooler's
    dense layer (``W_pool``, ``b_pool``). A ``BertFor...`` model's state (keys under
    ``bert.``) gives its BertModel part; its ``cls.`` heads are not in the spec and are left
    out. A BertModel built without its pooler (and a ``BertForMaskedLM``) lacks
    ``pooler.dense.weight``: under ``pooler=True`` an error saying so. ``layers`` as for
    ``from_gpt2``.
    """
    prefix = _bert_prefix(state)
    ignored = {
        r"cls\..*": "a pre-training head, not part of BertModel",
        rf"{re.escape(prefix)}embeddings\.position_ids": "a buffer of the positions 0, 1, ...",
        rf"{re.escape(prefix)}embeddings\.token_type_ids": "a buffer of zero token types"}
    if not pooler:
        ignored[rf"{re.escape(prefix)}pooler\..*"] = "a pooler the variant has not"
    read = _Source(state, "BERT", ignored)
    if pooler and not read.has(f"{prefix}pooler.dense.weight"):
        raise WeightsError(f"BERT: {read.noun} has no pooler ({prefix}pooler.dense.weight), "
                           "which the variant has (encoder_io=bert): import the config with "
                           "--no-pooler (encoder_io=bert_unpooled)")
    at = f"{prefix}embeddings"
    flat = {"E": read(f"{at}.word_embeddings.weight"),
            "P_table": read(f"{at}.position_embeddings.weight"),
            "E_type": read(f"{at}.token_type_embeddings.weight"),
            "gamma_emb": read(f"{at}.LayerNorm.weight"),
            "beta_emb": read(f"{at}.LayerNorm.bias")}
    _bert_layers(read, prefix, flat, layers)
    if pooler:
        _linear(read, f"{prefix}pooler.dense", "W_pool", "b_pool", flat)
    return read.finish(flat)


def from_bert_encoder(state: dict) -> dict[str, np.ndarray]:
    """Hugging Face ``BertModel``'s encoder stack to the spec's ``encoder`` parameters.

    The spec's encoder with norm=post, activation=gelu, attention_bias=all. BERT's embeddings
    and pooler are left out: feed BERT's embedding output to the generated ``encoder``
    function. ``from_bert`` maps the whole model.
    """
    prefix = _bert_prefix(state)
    ignore = {rf"{re.escape(prefix)}embeddings\..*": "BERT's embeddings, not the encoder's",
              rf"{re.escape(prefix)}pooler\..*": "BERT's pooler, not the encoder's",
              r"cls\..*": "a pre-training head, not part of BertModel"}
    read = _Source(state, "BERT", ignore)
    flat: dict[str, np.ndarray] = {}
    _bert_layers(read, prefix, flat)
    return read.finish(flat)


def _bert_prefix(state: dict) -> str:
    return "bert." if any(k.startswith("bert.") for k in state) else ""


def _bert_layers(read, prefix: str, flat: dict, most: int | None = None) -> None:
    """BERT's encoder layers to ``encoder.layers.i``: nn.Linear weights, y = x W^T + b."""
    count = read.layers(f"{prefix}encoder.layer.", most=most)
    for index in range(count):
        source, target = f"{prefix}encoder.layer.{index}", f"encoder.layers.{index}"
        for part, name in zip("QKV", ("query", "key", "value")):
            _linear(read, f"{source}.attention.self.{name}",
                    f"{target}.self_attention.W_{part}", f"{target}.self_attention.b_{part}",
                    flat)
        _linear(read, f"{source}.attention.output.dense", f"{target}.self_attention.W_O",
                f"{target}.self_attention.b_O", flat)
        _layer_norm(read, f"{source}.attention.output.LayerNorm", f"{target}.norm_1", flat)
        _linear(read, f"{source}.intermediate.dense", f"{target}.feed_forward.W_1",
                f"{target}.feed_forward.b_1", flat)
        _linear(read, f"{source}.output.dense", f"{target}.feed_forward.W_2",
                f"{target}.feed_forward.b_2", flat)
        _layer_norm(read, f"{source}.output.LayerNorm", f"{target}.norm_2", flat)
    if count == 0:
        raise WeightsError(f"BERT: state dict has no entry '{prefix}encoder.layer.0."
                           "attention.self.query.weight' (no encoder layers)")


def from_llama(state: dict, *, output_embedding: str = "separate",
               layers: int | None = None) -> dict[str, np.ndarray]:
    """Hugging Face ``LlamaForCausalLM`` (or ``LlamaModel``) to the spec, every parameter;
    ``MistralForCausalLM`` and ``Qwen2ForCausalLM`` too (the same names; Qwen2's biases on
    q_proj, k_proj and v_proj to b_Q, b_K and b_V, for attention_bias=qkv); the MLP's biases,
    where ``mlp_bias`` gives them, to b_1, b_3 and b_2 (feed_forward_bias=all).

    The spec's decoder-only model with norm=pre, normalization=rms_norm, positional=rotary,
    activation=swiglu, key_value_heads=grouped, attention_bias=none, feed_forward_bias=none
    and output_embedding=separate (the llama3_8b variant; run it with that model's
    ``rms_norm_eps`` as eps and ``rope_theta`` as theta). nn.Linear weights, y = x W^T:
    ``q_proj`` to W_Q, ``k_proj`` and ``v_proj`` (H_kv heads) to W_K and W_V, ``o_proj`` to
    W_O; the MLP's ``gate_proj`` to W_1 (the gate), ``up_proj`` to W_3, ``down_proj`` to W_2;
    ``input_layernorm`` and ``post_attention_layernorm`` to norm_1 and norm_2, ``model.norm``
    to the final norm, ``lm_head`` to W_out. Rotary halves: HF's rotate_half pairs feature i
    with i + d_k/2, as the spec's rotary does, so the projections need no permutation. A
    ``LlamaModel`` has no ``lm_head``: an error (the spec's model ends in the vocabulary).
    ``output_embedding`` is the variant's choice: "tied" (``tie_word_embeddings``) takes an
    ``lm_head.weight`` only as a copy of ``embed_tokens.weight``, as ``from_gpt2`` does;
    ``layers`` as for ``from_gpt2``.
    """
    prefix = "model." if any(k.startswith("model.") for k in state) else ""
    read = _Source(state, "Llama")
    flat = {"E": read(f"{prefix}embed_tokens.weight")}
    count = read.layers(f"{prefix}layers.", most=layers)
    for index in range(count):
        source, target = f"{prefix}layers.{index}", f"decoder.layers.{index}"
        for part, name in zip("QKVO", ("q_proj", "k_proj", "v_proj", "o_proj")):
            flat[f"{target}.self_attention.W_{part}"] = \
                read(f"{source}.self_attn.{name}.weight").T.copy()
            if read.has(f"{source}.self_attn.{name}.bias"):    # Qwen2: Q, K, V; attention_bias
                flat[f"{target}.self_attention.b_{part}"] = read(f"{source}.self_attn.{name}.bias")
        for part, name in zip("132", ("gate_proj", "up_proj", "down_proj")):
            flat[f"{target}.feed_forward.W_{part}"] = read(f"{source}.mlp.{name}.weight").T.copy()
            if read.has(f"{source}.mlp.{name}.bias"):          # mlp_bias: feed_forward_bias
                flat[f"{target}.feed_forward.b_{part}"] = read(f"{source}.mlp.{name}.bias")
        flat[f"{target}.norm_1.gamma"] = read(f"{source}.input_layernorm.weight")
        flat[f"{target}.norm_2.gamma"] = read(f"{source}.post_attention_layernorm.weight")
    if count == 0:
        raise WeightsError(f"Llama: state dict has no entry '{prefix}layers.0.self_attn.q_proj."
                           "weight' (no decoder layers)")
    flat["decoder.final_norm.gamma"] = read(f"{prefix}norm.weight")
    _output_projection(read, flat, f"{prefix}embed_tokens.weight", output_embedding)
    return read.finish(flat)


def _output_projection(read, flat: dict, embedding: str, output_embedding: str) -> None:
    """``lm_head.weight`` as W_out (output_embedding=separate); under ``tied``, a copy of the
    token embedding the checkpoint may hold, which must equal it."""
    if output_embedding == "separate":
        flat["W_out"] = read("lm_head.weight").T.copy()
    elif read.has("lm_head.weight"):
        read.must_equal("lm_head.weight", embedding,
                        f"lm_head.weight differs from {embedding}, and the variant ties its "
                        "output projection to the token embedding (output_embedding=tied); "
                        "load it into a variant with output_embedding=separate")
