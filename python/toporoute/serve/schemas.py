"""Request and response models of the HTTP API (pydantic; they also make ``/openapi.json``).

Every float array field takes either nested JSON lists or :class:`B64Array` (base64 of little-endian float32
plus its shape). Requests are validated here for types (strictly: ``0`` is no boolean and ``"1"`` no number),
finiteness (``allow_inf_nan=False``) and missing or unknown fields. The limits of the server's configuration
and the shapes are checked by :mod:`.service` and :mod:`.convert`, naming the field; :mod:`.openapi` declares
the same limits in the OpenAPI document from the same :class:`~.config.ServeConfig`. Every field carries the
description the document shows.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import AliasChoices, BaseModel, BeforeValidator, ConfigDict, Discriminator, Field, Tag
from pydantic_core import PydanticCustomError


def _integral(value: Any) -> Any:
    """``9.0`` is the integer 9, as JSON Schema counts it; other floats, strings and booleans stay refused."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


# Integers the compiled core takes as C ints: larger ones are refused here (422), never overflow there.
# (The bounds come first: after a validator pydantic would not write them into the JSON Schema.)
Int32 = Annotated[int, Field(ge=0, le=2**31 - 1), BeforeValidator(_integral)]
Positive32 = Annotated[int, Field(ge=1, le=2**31 - 1), BeforeValidator(_integral)]

# Standard padded base64 (RFC 4648): what ``base64.b64decode(..., validate=True)`` accepts.
B64_PATTERN = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"

# The ``type`` of every error answer (one scheme, snake_case; the README's table explains each).
ErrorType = Literal[
    "invalid_json",
    "unauthorized",
    "not_found",
    "method_not_allowed",
    "body_too_large",
    "validation_error",
    "invalid_argument",
    "out_of_range",
    "non_finite",
    "shape_mismatch",
    "qmix_unavailable",
    "internal_error",
    "http_error",
]
ERROR_TYPES: tuple[str, ...] = get_args(ErrorType)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)


class B64Array(_Model):
    """A float32 array in binary form: smaller and several times faster to parse than JSON numbers."""

    b64: str = Field(
        description="Base64 (RFC 4648, padded) of the array's little-endian float32 bytes in C order: "
        "4 x the product of `shape` bytes.",
        json_schema_extra={"pattern": B64_PATTERN},
    )
    shape: list[Int32] = Field(description="The array's shape, e.g. `[N, D]`.")


class B64Matrix(B64Array):
    """A float32 ``(N, D)`` matrix in binary form (see :class:`B64Array`)."""

    shape: list[Int32] = Field(min_length=2, max_length=2, description="`[N, D]`: rows, columns.")


def _matrix_kind(value: Any) -> str:
    return "B64" if isinstance(value, (dict, B64Array)) else "Lists"


Matrix = Annotated[
    Annotated[list[list[float]], Tag("Lists"), Field(description="Rows of numbers, all of the same length.")]
    | Annotated[B64Matrix, Tag("B64")],
    Discriminator(_matrix_kind),
]


class TextEpisode(_Model):
    """One team as descriptor texts: agent ``i``'s need ``needs[i]`` and offer ``offers[i]``."""

    needs: list[str] = Field(description="What each agent needs (one text per agent; as many as `offers`).")
    offers: list[str] = Field(description="What each agent offers (one text per agent; as many as `needs`).")


class ArrayEpisode(_Model):
    """One team as embeddings: ``q`` ``(N, D)`` needs and ``k`` ``(N, D)`` offers (rows need not be unit)."""

    q: Matrix = Field(description="(N, D) need embeddings, one row per agent.")
    k: Matrix = Field(description="(N, D) offer embeddings, one row per agent (the shape of `q`).")


_TEXT_FIELDS, _ARRAY_FIELDS = frozenset({"needs", "offers"}), frozenset({"q", "k"})


def _episode_kind(value: Any) -> str:
    if isinstance(value, ArrayEpisode) or (isinstance(value, dict) and _ARRAY_FIELDS & value.keys()):
        return "ArrayEpisode"
    return "TextEpisode"


def _one_kind(value: Any) -> Any:
    """An episode with both texts and embeddings is refused by name (not as a missing field of one kind)."""
    if isinstance(value, dict):
        texts, arrays = sorted(_TEXT_FIELDS & value.keys()), sorted(_ARRAY_FIELDS & value.keys())
        if texts and arrays:
            raise PydanticCustomError(
                "mixed_episode",
                "an episode is either texts (needs, offers) or embeddings (q, k), not both; got {fields}",
                {"fields": ", ".join(texts + arrays)},
            )
    return value


Episode = Annotated[
    Annotated[TextEpisode, Tag("TextEpisode")] | Annotated[ArrayEpisode, Tag("ArrayEpisode")],
    Discriminator(_episode_kind),
    BeforeValidator(_one_kind),
]


def _one_kind_per_request(schema: dict[str, Any]) -> None:
    """``episodes`` in the schema: a list of text episodes or a list of embedding episodes (never mixed)."""
    items = schema.pop("items")
    del schema["type"]
    schema["anyOf"] = [{"type": "array", "items": kind} for kind in items["oneOf"]]


class RouteRequest(_Model):
    """Episodes to route: all of texts or all of embeddings."""

    episodes: list[Episode] = Field(
        description="The teams to route, all texts or all embeddings (text episodes of concurrent requests "
        "share the encoder's batches).",
        json_schema_extra=_one_kind_per_request,
    )
    tau: float = Field(
        default=0.3, ge=-1.0, le=1.0, description="Edge j -> i iff cos(offer_j, need_i) > tau (strict)."
    )
    k_in: Int32 = Field(
        default=3,
        description="Each recipient keeps at most k_in providers, the highest scores first (0: no cap).",
    )
    scores: bool = Field(default=False, description="Also answer each episode's (N, N) scores.")
    binary: bool = Field(
        default=False, description="Answer the scores as a B64Array instead of nested lists."
    )


class RoutedEpisode(BaseModel):
    """One routed episode of ``n`` agents (as ``ops.route`` and ``ops.toposort`` of its graph)."""

    edges: list[list[int]] = Field(
        description="Message edges [src, dst] in row-major order of the adjacency."
    )
    inbox: list[list[int]] = Field(
        description="Per agent, its providers by descending score (as Routes.inbox without the -1 padding)."
    )
    in_degree: list[int] = Field(description="Per agent, its number of providers.")
    order: list[int] = Field(description="A topological order of the agents (cycles broken; Order.order).")
    level: list[int] = Field(
        description="Per agent, its longest-path layer (sources are 0; Order.level): a level runs concurrently."
    )
    removed: list[list[int]] = Field(description="Back edges [src, dst] dropped to break cycles.")
    scores: list[list[float]] | B64Array | None = Field(
        default=None, description="scores[j][i]: provider j against recipient i (when asked for)."
    )


class RouteResponse(BaseModel):
    episodes: list[RoutedEpisode] = Field(description="One per request episode, in order.")


class Health(BaseModel):
    status: Literal["ok"] = Field(description="Always `ok` when the server answers.")
    version: str = Field(description="toporoute's version.")
    backend: str = Field(description="The ops backend: reference, cpu or cuda.")
    encoder: str | None = Field(description="The text encoder's model name (the model of /v1/embeddings).")
    qmix: bool = Field(description="Whether a Q-Mix checkpoint is loaded (/v1/qmix/act answers).")


class ErrorBody(BaseModel):
    type: ErrorType = Field(
        description="What went wrong, one snake_case code (see the README's error table)."
    )
    message: str = Field(description="What was expected and what was got, for a person to read.")
    field: str | None = Field(
        description="The request field at fault, e.g. `episodes[3].q` (null when no field is)."
    )


class ErrorResponse(BaseModel):
    error: ErrorBody = Field(description="The error.")


class EmbedRequest(_Model):
    texts: list[str] = Field(description="Texts to embed.")
    binary: bool = Field(
        default=False, description="Answer the vectors as a B64Array instead of nested lists."
    )


class EmbedResponse(BaseModel):
    dim: int = Field(description="D, the encoder's dimension.")
    vectors: list[list[float]] | B64Array = Field(description="(len(texts), D) unit vectors, in order.")


class ToposortRequest(_Model):
    """``graphs``: one ``(N, N)`` adjacency or a batch ``(B, N, N)`` (``graphs[b][src][dst]``); optional
    ``weights`` of the same shape (finite, >= 0) and ``active`` ``(N,)`` / ``(B, N)``."""

    graphs: list[list[bool]] | list[list[list[bool]]] = Field(
        description="One (N, N) adjacency graphs[src][dst] or a batch (B, N, N) of them (square)."
    )
    weights: list[list[float]] | list[list[list[float]]] | B64Array | None = Field(
        default=None, description="Edge weights of the shape of `graphs` (finite, >= 0): weighted in-degrees."
    )
    active: list[bool] | list[list[bool]] | None = Field(
        default=None,
        description="(N,) or (B, N): the nodes that take part (inactive ones come last, level -1).",
    )


class OrderedGraph(BaseModel):
    order: list[int] = Field(description="The nodes in topological order (cycles broken).")
    level: list[int] = Field(description="Per node, its longest-path layer (sources 0; inactive -1).")
    removed: list[list[int]] = Field(description="Back edges [src, dst] removed to break cycles.")
    is_dag: bool = Field(description="Whether the graph had no cycle.")


class ToposortResponse(BaseModel):
    graphs: list[OrderedGraph] = Field(description="One per graph (a list even for one (N, N) graph).")


class ConductorOptions(_Model):
    """:class:`toporoute.ops.CheckOptions` (omitted fields keep their defaults)."""

    pool: list[str] | None = Field(
        default=None,
        description="Role names (letters, digits, spaces and dashes, starting with a letter; each once); "
        "must include coder, debugger and tester.",
    )
    lenient: bool | None = Field(
        default=None, description="Also accept a plain fence or an unfenced `- step:` list."
    )
    strict_tester: bool | None = Field(default=None, description="Reject testers outside the last step.")
    concise: bool | None = Field(
        default=None, description="Reject agents outside the last step that feed no later agent."
    )
    max_bytes: Positive32 | None = Field(default=None, description="Most bytes of the YAML block (UTF-8).")
    max_depth: Positive32 | None = Field(default=None, description="Deepest YAML nesting.")
    max_agents: Positive32 | None = Field(default=None, description="Most agents per turn.")
    max_refs: Positive32 | None = Field(default=None, description="Most refs per agent.")


class ConductorRequest(_Model):
    """AgentConductor plans of the first turn; ``n_max`` (alias ``n_agents``) is the density cap, one for all
    plans or one per plan (the paper's 4 / 7 / 10 by difficulty)."""

    plans: list[str] = Field(description="Orchestrator outputs (YAML plans, fenced or not).")
    n_max: Annotated[
        Positive32 | list[Positive32],
        Field(
            validation_alias=AliasChoices("n_max", "n_agents"),
            description="The density cap N_max: one for all plans, or one per plan (alias `n_agents`).",
        ),
    ] = 10
    options: ConductorOptions | None = Field(default=None, description="How plans are checked.")


class PlanNode(BaseModel):
    id: str = Field(description="The agent's id, e.g. `coder_2`.")
    role: str = Field(description="Its role, e.g. `coder`.")
    step: int = Field(description="Its step (layer) number.")


class DensityOut(BaseModel):
    s_node: float = Field(description="Node-count term.")
    s_edge: float = Field(description="Edge-count term.")
    s_depth: float = Field(description="Depth term.")
    s_complex: float = Field(description="Combined complexity.")
    reward: float = Field(description="The density reward.")


class CheckedPlan(BaseModel):
    """``class``: ``ok``, ``no_yaml``, ``parse``, ``schema`` or ``logic``; ``tag`` the orchestrator's tag
    (None when valid); ``layers`` the node indices per step; ``edges`` ``[src, dst]`` node indices (declared
    refs); ``density`` the reward terms of a valid plan."""

    model_config = ConfigDict(populate_by_name=True)

    class_: Literal["ok", "no_yaml", "parse", "schema", "logic"] = Field(
        alias="class", description="The check's verdict."
    )
    tag: str | None = Field(description="The orchestrator's error tag (null when valid).")
    message: str = Field(description="What the check found, for a person (or the orchestrator) to read.")
    nodes: list[PlanNode] = Field(description="The plan's agents (empty unless it parsed).")
    layers: list[list[int]] = Field(description="Node indices per step.")
    edges: list[list[int]] = Field(description="Declared refs as [src, dst] node indices.")
    density: DensityOut | None = Field(description="The reward terms of a valid plan (null otherwise).")


class ConductorResponse(BaseModel):
    plans: list[CheckedPlan] = Field(description="One per plan, in order.")


class QMixRequest(_Model):
    """One round for ``(N, obs_dim)`` / ``(N, N)`` / ``(N, H)`` arrays or a batch of them ``(B, ...)``;
    ``hidden`` omitted = zeros (round 0)."""

    obs: list[list[float]] | list[list[list[float]]] | B64Array = Field(
        description="(N, obs_dim) or (B, N, obs_dim) observations (obs_dim: the checkpoint's)."
    )
    adj: list[list[bool]] | list[list[list[bool]]] = Field(
        description="(N, N) or (B, N, N) current communication graph adj[src][dst]."
    )
    hidden: list[list[float]] | list[list[list[float]]] | B64Array | None = Field(
        default=None,
        description="(N, H) or (B, N, H) GRU state from the previous round (omitted: zeros, round 0).",
    )
    active: list[bool] | list[list[bool]] | None = Field(
        default=None, description="(N,) or (B, N): the agents that act (inactive ones get action -1)."
    )
    binary: bool = Field(
        default=False, description="Answer q and hidden as B64Array instead of nested lists."
    )


class QMixResponse(BaseModel):
    """``q`` (…, N, n_actions), ``actions`` (…, N) the greedy action (-1 for inactive agents), ``hidden``
    (…, N, H) the next GRU state to send back next round."""

    q: list[Any] | B64Array = Field(description="(..., N, n_actions) Q-values.")
    actions: list[Any] = Field(description="(..., N) greedy actions (-1 for inactive agents).")
    hidden: list[Any] | B64Array = Field(description="(..., N, H) the next GRU state (send it next round).")


def _texts_only(value: Any) -> Any:
    """OpenAI's token-id inputs are refused by name: this server embeds text with its own tokenizer."""
    items = value if isinstance(value, list) else [value]
    if any(isinstance(v, (int, list)) and not isinstance(v, bool) for v in items):
        raise PydanticCustomError(
            "token_input",
            "input must be a string or a list of strings; token ids are not supported (LangChain: "
            "OpenAIEmbeddings(..., check_embedding_ctx_length=False) sends text)",
        )
    return value


class EmbeddingsRequest(_Model):
    """OpenAI's embeddings request, so OpenAI-compatible embedding clients can use the descriptor encoder."""

    input: Annotated[str | list[str], BeforeValidator(_texts_only)] = Field(
        description="One text or a list of texts (not token ids)."
    )
    model: str = Field(description="The encoder's model name (GET /health `encoder`) or its last path part.")
    encoding_format: Literal["float", "base64"] = Field(
        default="float",
        description="`float`: lists of numbers; `base64`: little-endian float32 bytes, base64.",
    )
    dimensions: Positive32 | None = Field(
        default=None, description="Must be the encoder's dimension when given."
    )
    user: str | None = Field(default=None, description="An end-user id (accepted and ignored).")


class Embedding(BaseModel):
    object: Literal["embedding"] = Field(description="Always `embedding`.")
    index: int = Field(description="The input's position.")
    embedding: list[float] | str = Field(description="The unit vector: numbers, or base64 float32 bytes.")


class EmbeddingsUsage(BaseModel):
    prompt_tokens: int = Field(description="Word pieces the encoder read (after truncation).")
    total_tokens: int = Field(description="The same as prompt_tokens (an encoder generates nothing).")


class EmbeddingsResponse(BaseModel):
    object: Literal["list"] = Field(description="Always `list`.")
    data: list[Embedding] = Field(description="One per input, in order.")
    model: str = Field(description="The encoder's model name.")
    usage: EmbeddingsUsage = Field(description="Token counts.")
