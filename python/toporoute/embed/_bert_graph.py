"""Builds an fp32 ONNX graph of a BERT encoder straight from its safetensors weights.

No torch is needed: the graph is written op by op with ``onnx.helper`` and the weights become initializers.
The layout follows Hugging Face's ``BertModel`` (absolute positions, post-LayerNorm blocks, erf GELU), so
the output ``last_hidden_state`` matches what sentence-transformers pools. Token type ids are always 0 for
single-sentence inputs, so the type embedding is folded into the position table.

Inputs: ``input_ids`` and ``attention_mask``, int64 ``(batch, seq)``. Output: ``last_hidden_state`` float32
``(batch, seq, hidden)``; with ``pooled=True`` the graph also mean-pools over the mask and L2-normalises,
giving ``embeddings`` float32 ``(batch, hidden)`` (used on GPU, where the output must have a static shape
for I/O binding).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

OPSET = 18
# Bumped whenever the graph layout changes, so cached files from an older layout are not reused.
GRAPH_VERSION = 1


@dataclass(frozen=True)
class BertConfig:
    """The fields of a Hugging Face ``config.json`` the graph needs."""

    hidden: int
    heads: int
    layers: int
    intermediate: int
    max_positions: int
    eps: float

    @classmethod
    def load(cls, path: Path) -> BertConfig:
        raw = json.loads(path.read_text())
        model_type = raw.get("model_type", "bert")
        if model_type != "bert":
            raise ValueError(
                f"{path}: model_type must be 'bert' for the built-in ONNX export; got {model_type!r}"
            )
        act = raw.get("hidden_act", "gelu")
        if act != "gelu":
            raise ValueError(f"{path}: hidden_act must be 'gelu'; got {act!r}")
        pos = raw.get("position_embedding_type", "absolute")
        if pos != "absolute":
            raise ValueError(f"{path}: position_embedding_type must be 'absolute'; got {pos!r}")
        cfg = cls(
            hidden=int(raw["hidden_size"]),
            heads=int(raw["num_attention_heads"]),
            layers=int(raw["num_hidden_layers"]),
            intermediate=int(raw["intermediate_size"]),
            max_positions=int(raw["max_position_embeddings"]),
            eps=float(raw.get("layer_norm_eps", 1e-12)),
        )
        if cfg.hidden % cfg.heads:
            raise ValueError(f"{path}: hidden_size {cfg.hidden} is not divisible by {cfg.heads} heads")
        return cfg


class _Graph:
    """Accumulates nodes and initializers with unique names."""

    def __init__(self) -> None:
        from onnx import helper

        self.helper = helper
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self._n = 0

    def name(self, hint: str) -> str:
        self._n += 1
        return f"{hint}_{self._n}"

    def const(self, hint: str, value: np.ndarray) -> str:
        from onnx import numpy_helper

        name = self.name(hint)
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def op(self, op_type: str, inputs: list[str], hint: str | None = None, **attrs: Any) -> str:
        out = self.name(hint or op_type.lower())
        self.nodes.append(self.helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return out


def _linear(g: _Graph, x: str, weights: dict[str, np.ndarray], prefix: str) -> str:
    # Hugging Face stores Linear weights as (out, in); MatMul wants (in, out).
    w = g.const(prefix + ".w", weights[prefix + ".weight"].T)
    b = g.const(prefix + ".b", weights[prefix + ".bias"])
    return g.op("Add", [g.op("MatMul", [x, w]), b])


def _layer_norm(g: _Graph, x: str, weights: dict[str, np.ndarray], prefix: str, eps: float) -> str:
    scale = g.const(prefix + ".gamma", weights[prefix + ".weight"])
    bias = g.const(prefix + ".beta", weights[prefix + ".bias"])
    return g.op("LayerNormalization", [x, scale, bias], axis=-1, epsilon=eps)


def _layer(g: _Graph, x: str, mask_bias: str, w: dict[str, np.ndarray], i: int, cfg: BertConfig) -> str:
    p = f"encoder.layer.{i}."
    head_dim = cfg.hidden // cfg.heads
    split = g.const("split_heads", np.array([0, 0, cfg.heads, head_dim], dtype=np.int64))
    merge = g.const("merge_heads", np.array([0, 0, cfg.hidden], dtype=np.int64))

    def heads(name: str, perm: list[int]) -> str:
        y = g.op("Reshape", [_linear(g, x, w, p + "attention.self." + name), split])
        return g.op("Transpose", [y], perm=perm)

    q = heads("query", [0, 2, 1, 3])  # (b, h, s, d)
    kt = heads("key", [0, 2, 3, 1])  # (b, h, d, s)
    v = heads("value", [0, 2, 1, 3])
    scale = g.const("scale", np.array(math.sqrt(head_dim), dtype=np.float32))
    scores = g.op("Add", [g.op("Div", [g.op("MatMul", [q, kt]), scale]), mask_bias])
    ctx = g.op("MatMul", [g.op("Softmax", [scores], axis=-1), v])
    ctx = g.op("Reshape", [g.op("Transpose", [ctx], perm=[0, 2, 1, 3]), merge])
    attn = _linear(g, ctx, w, p + "attention.output.dense")
    x = _layer_norm(g, g.op("Add", [attn, x]), w, p + "attention.output.LayerNorm", cfg.eps)

    h = _linear(g, x, w, p + "intermediate.dense")
    half = g.const("half", np.array(0.5, dtype=np.float32))
    one = g.const("one", np.array(1.0, dtype=np.float32))
    root2 = g.const("sqrt2", np.array(math.sqrt(2.0), dtype=np.float32))
    erf = g.op("Erf", [g.op("Div", [h, root2])])
    h = g.op("Mul", [g.op("Mul", [h, g.op("Add", [erf, one])]), half])
    out = _linear(g, h, w, p + "output.dense")
    return _layer_norm(g, g.op("Add", [out, x]), w, p + "output.LayerNorm", cfg.eps)


def _fused_layer(g: _Graph, x: str, mask: str, w: dict[str, np.ndarray], i: int, cfg: BertConfig) -> str:
    # The same block with ONNX Runtime's contrib ops (CPU and CUDA kernels): one Attention op for the QKV
    # projection and attention, SkipLayerNormalization for residual + bias + LayerNorm, BiasGelu for the FFN.
    p = f"encoder.layer.{i}."
    sa = p + "attention.self."
    qkv_w = np.concatenate([w[sa + n + ".weight"].T for n in ("query", "key", "value")], axis=1)
    qkv_b = np.concatenate([w[sa + n + ".bias"] for n in ("query", "key", "value")])
    attn = g.op(
        "Attention",
        [x, g.const("qkv_w", qkv_w), g.const("qkv_b", qkv_b), mask],
        domain="com.microsoft",
        num_heads=cfg.heads,
    )

    def dense_skip_ln(h: str, skip: str, dense: str, norm: str) -> str:
        y = g.op("MatMul", [h, g.const(dense + ".w", w[dense + ".weight"].T)])
        args = [
            y,
            skip,
            g.const(norm + ".gamma", w[norm + ".weight"]),
            g.const(norm + ".beta", w[norm + ".bias"]),
        ]
        args.append(g.const(dense + ".b", w[dense + ".bias"]))
        return g.op("SkipLayerNormalization", args, domain="com.microsoft", epsilon=cfg.eps)

    x = dense_skip_ln(attn, x, p + "attention.output.dense", p + "attention.output.LayerNorm")
    h = g.op("MatMul", [x, g.const("ffn_in.w", w[p + "intermediate.dense.weight"].T)])
    h = g.op("BiasGelu", [h, g.const("ffn_in.b", w[p + "intermediate.dense.bias"])], domain="com.microsoft")
    return dense_skip_ln(h, x, p + "output.dense", p + "output.LayerNorm")


def _standard_layers(g: _Graph, x: str, maskf: str, w: dict[str, np.ndarray], cfg: BertConfig) -> str:
    # Additive mask: 0 where attended, -10000 at padding (exp underflows to exactly 0 in float32).
    neg = g.const("neg", np.array(-10000.0, dtype=np.float32))
    one = g.const("one", np.array(1.0, dtype=np.float32))
    bias = g.op("Mul", [g.op("Sub", [one, maskf]), neg])
    bias = g.op("Unsqueeze", [bias, g.const("axes12", np.array([1, 2]))])  # (b, 1, 1, s)
    for i in range(cfg.layers):
        x = _layer(g, x, bias, w, i, cfg)
    return x


def _strip_prefix(weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    # Some checkpoints are saved from BertForX and prefix every name with "bert.".
    if "embeddings.word_embeddings.weight" in weights:
        return weights
    return {k.removeprefix("bert."): v for k, v in weights.items()}


def build(
    weights: dict[str, np.ndarray], cfg: BertConfig, *, pooled: bool = False, fused: bool = True
) -> Any:
    """Returns an ``onnx.ModelProto`` for the encoder (see the module docstring).

    ``fused=True`` writes each block with ONNX Runtime's contrib ops (``com.microsoft`` domain, implemented by
    its CPU and CUDA providers); ``fused=False`` uses standard ONNX ops only, for other runtimes.
    """
    from onnx import TensorProto, checker, helper

    w = {k: np.asarray(v, dtype=np.float32) for k, v in _strip_prefix(weights).items()}
    missing = [
        k
        for k in ("embeddings.word_embeddings.weight", "embeddings.position_embeddings.weight")
        if k not in w
    ]
    if missing:
        raise ValueError(f"the weights are not a BERT encoder: missing {missing}")
    g = _Graph()
    ids, mask = "input_ids", "attention_mask"

    word = g.op("Gather", [g.const("word_emb", w["embeddings.word_embeddings.weight"]), ids], axis=0)
    pos_type = w["embeddings.position_embeddings.weight"] + w["embeddings.token_type_embeddings.weight"][0]
    seq = g.op(
        "Slice", [g.op("Shape", [ids]), g.const("one_i", np.array([1])), g.const("two_i", np.array([2]))]
    )
    positions = g.op("Slice", [g.const("pos_type", pos_type), g.const("zero_i", np.array([0])), seq])
    x = _layer_norm(g, g.op("Add", [word, positions]), w, "embeddings.LayerNorm", cfg.eps)

    maskf = g.op("Cast", [mask], to=TensorProto.FLOAT)
    if fused:
        mask_i32 = g.op("Cast", [mask], to=TensorProto.INT32)
        for i in range(cfg.layers):
            x = _fused_layer(g, x, mask_i32, w, i, cfg)
    else:
        x = _standard_layers(g, x, maskf, w, cfg)
    g.nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"], name="last_hidden_state"))
    outputs = [
        helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "seq", cfg.hidden])
    ]
    if pooled:
        m3 = g.op("Unsqueeze", [maskf, g.const("axis2", np.array([2]))])
        total = g.op("ReduceSum", [g.op("Mul", [x, m3]), g.const("axis1", np.array([1]))], keepdims=0)
        count = g.op("ReduceSum", [maskf, g.const("axis1", np.array([1]))], keepdims=1)
        mean = g.op("Div", [total, g.op("Max", [count, g.const("tiny", np.array(1e-9, dtype=np.float32))])])
        norm = g.op("ReduceL2", [mean, g.const("axism1", np.array([-1]))], keepdims=1)
        eps = g.const("eps", np.array(1e-12, dtype=np.float32))
        g.nodes.append(
            helper.make_node("Div", [mean, g.op("Max", [norm, eps])], ["embeddings"], name="embeddings")
        )
        outputs.append(helper.make_tensor_value_info("embeddings", TensorProto.FLOAT, ["batch", cfg.hidden]))

    inputs = [
        helper.make_tensor_value_info(ids, TensorProto.INT64, ["batch", "seq"]),
        helper.make_tensor_value_info(mask, TensorProto.INT64, ["batch", "seq"]),
    ]
    graph = helper.make_graph(g.nodes, "bert_encoder", inputs, outputs, initializer=g.inits)
    opsets = [helper.make_opsetid("", OPSET)] + ([helper.make_opsetid("com.microsoft", 1)] if fused else [])
    model = helper.make_model(graph, opset_imports=opsets, producer_name="toporoute")
    model.ir_version = 8
    checker.check_model(model, full_check=False)
    return model
