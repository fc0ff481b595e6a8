"""Request and response models of the HTTP API (pydantic; they also make ``/openapi.json``).

Every float array field takes either nested JSON lists or :class:`B64Array` (base64 of little-endian float32
plus its shape). Requests are validated here for types, finiteness (``allow_inf_nan=False``) and missing or
unknown fields; shapes and limits are checked by :mod:`.convert`, naming the field.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Discriminator, Field, Tag

# Integers the compiled core takes as C ints: larger ones are refused here (422), never overflow there.
Int32 = Annotated[int, Field(ge=0, le=2**31 - 1)]
Positive32 = Annotated[int, Field(ge=1, le=2**31 - 1)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class B64Array(_Model):
    """A float32 array: ``b64`` is the base64 of its little-endian bytes in C order, ``shape`` its shape."""

    b64: str
    shape: list[Int32]


def _matrix_kind(value: Any) -> str:
    return "B64Array" if isinstance(value, (dict, B64Array)) else "Lists"


Matrix = Annotated[
    Annotated[list[list[float]], Tag("Lists")] | Annotated[B64Array, Tag("B64Array")],
    Discriminator(_matrix_kind),
]


class TextEpisode(_Model):
    """One team: agent ``i``'s need ``needs[i]`` and offer ``offers[i]`` (same length)."""

    needs: list[str]
    offers: list[str]


class ArrayEpisode(_Model):
    """One team as embeddings: ``q`` (N, D) needs and ``k`` (N, D) offers."""

    q: Matrix
    k: Matrix


def _episode_kind(value: Any) -> str:
    if isinstance(value, ArrayEpisode) or (isinstance(value, dict) and ("q" in value or "k" in value)):
        return "ArrayEpisode"
    return "TextEpisode"


Episode = Annotated[
    Annotated[TextEpisode, Tag("TextEpisode")] | Annotated[ArrayEpisode, Tag("ArrayEpisode")],
    Discriminator(_episode_kind),
]


class RouteRequest(_Model):
    episodes: list[Episode]
    tau: float = 0.3
    k_in: Int32 = 3
    scores: bool = False
    binary: bool = False


class RoutedEpisode(BaseModel):
    edges: list[list[int]]
    inboxes: list[list[int]]
    in_degree: list[int]
    order: list[int]
    levels: list[int]
    removed: list[list[int]]
    scores: list[list[float]] | B64Array | None = None


class RouteResponse(BaseModel):
    episodes: list[RoutedEpisode]


class Health(BaseModel):
    status: str
    version: str
    backend: str
    encoder: str | None
    qmix: bool


class ErrorBody(BaseModel):
    type: str
    message: str
    field: str | None


class ErrorResponse(BaseModel):
    error: ErrorBody


class EmbedRequest(_Model):
    texts: list[str]
    binary: bool = False


class EmbedResponse(BaseModel):
    dim: int
    vectors: list[list[float]] | B64Array


class ToposortRequest(_Model):
    """``graphs``: one ``(N, N)`` adjacency or a batch ``(B, N, N)`` (``graphs[b][src][dst]``); optional
    ``weights`` of the same shape (finite, >= 0) and ``active`` ``(N,)`` / ``(B, N)``."""

    graphs: list[list[bool]] | list[list[list[bool]]]
    weights: list[list[float]] | list[list[list[float]]] | B64Array | None = None
    active: list[bool] | list[list[bool]] | None = None


class OrderedGraph(BaseModel):
    order: list[int]
    levels: list[int]
    removed: list[list[int]]
    is_dag: bool


class ToposortResponse(BaseModel):
    graphs: list[OrderedGraph]


class ConductorOptions(_Model):
    """:class:`toporoute.ops.CheckOptions` (omitted fields keep their defaults)."""

    pool: list[str] | None = None
    lenient: bool | None = None
    strict_tester: bool | None = None
    concise: bool | None = None
    max_bytes: Positive32 | None = None
    max_depth: Positive32 | None = None
    max_agents: Positive32 | None = None
    max_refs: Positive32 | None = None


class ConductorRequest(_Model):
    """AgentConductor plans of the first turn; ``n_max`` (alias ``n_agents``) is the density cap, one for all
    plans or one per plan (the paper's 4 / 7 / 10 by difficulty)."""

    plans: list[str]
    n_max: Annotated[
        Positive32 | list[Positive32], Field(validation_alias=AliasChoices("n_max", "n_agents"))
    ] = 10
    options: ConductorOptions | None = None


class PlanNode(BaseModel):
    id: str
    role: str
    step: int


class DensityOut(BaseModel):
    s_node: float
    s_edge: float
    s_depth: float
    s_complex: float
    reward: float


class CheckedPlan(BaseModel):
    """``class``: ``ok``, ``no_yaml``, ``parse``, ``schema`` or ``logic``; ``tag`` the orchestrator's tag
    (None when valid); ``layers`` the node indices per step; ``edges`` ``[src, dst]`` node indices (declared
    refs); ``density`` the reward terms of a valid plan."""

    model_config = ConfigDict(populate_by_name=True)

    class_: str = Field(alias="class")
    tag: str | None
    message: str
    nodes: list[PlanNode]
    layers: list[list[int]]
    edges: list[list[int]]
    density: DensityOut | None


class ConductorResponse(BaseModel):
    plans: list[CheckedPlan]


class QMixRequest(_Model):
    """One round for ``(N, obs_dim)`` / ``(N, N)`` / ``(N, H)`` arrays or a batch of them ``(B, ...)``;
    ``hidden`` omitted = zeros (round 0)."""

    obs: list[list[float]] | list[list[list[float]]] | B64Array
    adj: list[list[bool]] | list[list[list[bool]]]
    hidden: list[list[float]] | list[list[list[float]]] | B64Array | None = None
    active: list[bool] | list[list[bool]] | None = None
    binary: bool = False


class QMixResponse(BaseModel):
    """``q`` (…, N, n_actions), ``actions`` (…, N) the greedy action (-1 for inactive agents), ``hidden``
    (…, N, H) the next GRU state to send back next round."""

    q: list[Any] | B64Array
    actions: list[Any]
    hidden: list[Any] | B64Array
