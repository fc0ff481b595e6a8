# Type stub of the private compiled module toporoute._core (cpp/bindings/). Public API: toporoute.ops.
# It declares what typed code calls by name. An op of the op table (toporoute.types.op_table.OPS) whose binding
# takes the table's arguments in order (then `isa` where there is a kernel per SIMD level) is declared there
# instead, once, and called only through backends/cpu.py's generated kernels. tests/ops/test_core_stub.py checks that
# every function here exists in the module, and that every other function of the module is such a table op.
# Errors: every function raises only toporoute.errors classes: the ValueError family for bad input,
# OutOfMemoryError (a MemoryError) when scratch, staging or output memory cannot be allocated,
# BackendUnavailableError, DeviceError (CUDA runtime failures) and CoreError (any other failure in the core).
# The private _raise_for_test(kind: str) -> NoReturn (tests of that error conversion) is left out on purpose:
# the stub test covers public names only.
from typing import Any, TypeAlias, TypeVar

import numpy as np
import numpy.typing as npt

_F32: TypeAlias = npt.NDArray[np.float32]
_Bool: TypeAlias = npt.NDArray[np.bool_]
_I32: TypeAlias = npt.NDArray[np.int32]
_I64: TypeAlias = npt.NDArray[np.int64]
_F64: TypeAlias = npt.NDArray[np.float64]
_T = TypeVar("_T")

class QMixWeights:
    def __init__(self, config: Any, agent: list[_F32], mixer: list[_F32] | None = None) -> None: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def has_mixer(self) -> bool: ...

class QMixWeightsCuda:
    def __init__(
        self, config: Any, agent: list[_F32], mixer: list[_F32] | None = None, device: int = 0
    ) -> None: ...

def build_info() -> dict[str, Any]: ...
def result(cls: type[_T], values: tuple[Any, ...]) -> _T: ...
def cuda_info() -> dict[str, Any]: ...
def qmix_forward(
    weights: QMixWeights, obs: _F32, adj: _Bool, hidden: _F32 | None, active: _Bool | None, isa: str = ""
) -> tuple[_F32, _F32]: ...
def qmix_mix(weights: QMixWeights, q_taken: _F32, state: _F32, isa: str = "") -> _F32: ...
def qmix_level(op: str, rows: int, isa: str = "") -> str: ...
def conductor_density(
    nodes: _I64, edges: _I64, steps: _I64, n_max: _I64
) -> tuple[_F64, _F64, _F64, _F64, _F64]: ...
def conductor_check(
    texts: list[bytes],
    pool: list[str],
    ctx_index: _I64,
    ctx_turn: _I32,
    ctx_off: _I64,
    ctx_id: list[str],
    ctx_role: npt.NDArray[np.int16],
    ctx_node_turn: _I32,
    lenient: bool,
    strict_tester: bool,
    concise: bool,
    max_bytes: int,
    max_depth: int,
    max_agents: int,
    max_refs: int,
) -> dict[str, Any]: ...
def route_cuda_host(
    q: _F32, k: _F32, active: _Bool | None, tau: float, k_in: int, device: int = 0
) -> tuple[_F32, _Bool, _I32, _I32]: ...
def toposort_cuda_host(
    adj: _Bool, weights: _F32 | None, active: _Bool | None, device: int = 0
) -> tuple[_I32, _I32, _Bool, _Bool]: ...

# DLPack entries: inputs as capsules, then out (None: allocated on the device and returned as capsules, or a
# tuple of caller-allocated capsules, returned as given), the op's scalars and the stream; never synchronise
def route_cuda_dlpack(
    q: Any, k: Any, active: Any | None, out: tuple[Any, ...] | None, tau: float, k_in: int, stream: int
) -> tuple[Any, Any, Any, Any]: ...
def toposort_cuda_dlpack(
    adj: Any, weights: Any | None, active: Any | None, out: tuple[Any, ...] | None, stream: int
) -> tuple[Any, Any, Any, Any]: ...
def cuda_poll_errors(device: int) -> None: ...
def cuda_synchronize(device: int = -1) -> None: ...
def qmix_forward_cuda_host(
    weights: QMixWeightsCuda, obs: _F32, adj: _Bool, hidden: _F32 | None, active: _Bool | None
) -> tuple[_F32, _F32]: ...
def qmix_mix_cuda_host(weights: QMixWeightsCuda, q_taken: _F32, state: _F32) -> _F32: ...
def qmix_forward_cuda_dlpack(
    weights: QMixWeightsCuda,
    obs: Any,
    adj: Any,
    hidden: Any | None,
    active: Any | None,
    out: tuple[Any, ...] | None,
    stream: int,
) -> tuple[Any, Any]: ...
def qmix_mix_cuda_dlpack(
    weights: QMixWeightsCuda, q_taken: Any, state: Any, out: tuple[Any, ...] | None, stream: int
) -> tuple[Any]: ...

# mean_pool and route_indexed on the GPU (cpp/bindings/cuda_pool.cpp): the arrays the op writes in place (out,
# the pooled table) are the caller's; mean_pool_cuda_dlpack returns a capsule of a new (n, D) array when out
# is None, else None; route_indexed's pool inputs come as three lists (empty: no pool=)
def mean_pool_cuda_host(
    hidden: _F32, mask: _Bool | _I32 | _I64, out: _F32 | None, rows: _I32 | _I64 | None, device: int = 0
) -> _F32: ...
def mean_pool_cuda_dlpack(
    hidden: Any, mask: Any, out: Any | None, rows: Any | None, stream: int
) -> Any | None: ...
def route_indexed_cuda_host(
    table: _F32,
    q_rows: _I32 | _I64,
    k_rows: _I32 | _I64,
    active: _Bool | None,
    hiddens: list[_F32],
    masks: list[_Bool | _I32 | _I64],
    rows: list[_I32 | _I64],
    tau: float,
    k_in: int,
    device: int = 0,
) -> tuple[_F32, _Bool, _I32, _I32]: ...
def route_indexed_cuda_dlpack(
    table: Any,
    q_rows: Any,
    k_rows: Any,
    active: Any | None,
    hiddens: list[Any],
    masks: list[Any],
    rows: list[Any],
    out: tuple[Any, ...] | None,
    tau: float,
    k_in: int,
    stream: int,
) -> tuple[Any, Any, Any, Any]: ...

# graph_stats, conductor_density and bandit_select on the GPU (cpp/bindings/cuda_stats.cpp); the DLPack
# entries as above (graph_stats returns 5 capsules without prev, 6 with it)
def graph_stats_cuda_host(
    adj: _Bool, active: _Bool | None, prev: _Bool | None, device: int = 0
) -> tuple[_I64, _F64, _I32, _I32, _F64, _F64 | None]: ...
def graph_stats_cuda_dlpack(
    adj: Any, active: Any | None, prev: Any | None, out: tuple[Any, ...] | None, stream: int
) -> tuple[Any, ...]: ...
def conductor_density_cuda_host(
    nodes: _I64, edges: _I64, steps: _I64, n_max: _I64, device: int = 0
) -> tuple[_F64, _F64, _F64, _F64, _F64]: ...
def conductor_density_cuda_dlpack(
    nodes: Any, edges: Any, steps: Any, n_max: Any, out: tuple[Any, ...] | None, stream: int
) -> tuple[Any, Any, Any, Any, Any]: ...
def bandit_select_cuda_host(
    adj: _Bool,
    alpha: _F32,
    beta: _F32,
    weights: _F32 | None,
    active: _Bool | None,
    k: int,
    seed: int,
    step: int,
    mode: int,
    graph_offset: int,
    device: int = 0,
) -> tuple[_Bool, _I32, _F32]: ...
def bandit_select_cuda_dlpack(
    adj: Any,
    alpha: Any,
    beta: Any,
    weights: Any | None,
    active: Any | None,
    out: tuple[Any, ...] | None,
    k: int,
    seed: int,
    step: int,
    mode: int,
    graph_offset: int,
    stream: int,
) -> tuple[Any, Any, Any]: ...
