"""Request and response models of the HTTP API (pydantic; they also make ``/openapi.json``).

Every float array field takes either nested JSON lists or :class:`B64Array` (base64 of little-endian float32
plus its shape). Requests are validated here for types, finiteness (``allow_inf_nan=False``) and missing or
unknown fields; shapes and limits are checked by :mod:`.convert`, naming the field.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class B64Array(_Model):
    """A float32 array: ``b64`` is the base64 of its little-endian bytes in C order, ``shape`` its shape."""

    b64: str
    shape: list[Annotated[int, Field(ge=0)]]


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
    k_in: Annotated[int, Field(ge=0)] = 3
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
