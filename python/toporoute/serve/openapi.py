"""The OpenAPI document of one app: what a generated client needs to build only requests the server accepts.

FastAPI's document, plus:

- the request models of the endpoints that parse their body themselves (:func:`body`), with the core ops each
  one runs (``x-toporoute-ops``, read from the op table);
- every limit the service checks, read from the same :class:`~.config.ServeConfig` (and the loaded Q-Mix
  checkpoint's widths): counts (``maxItems``), text lengths (``maxLength``), ranges (``maximum``), the
  conductor's role-name rule (``pattern``); see :func:`_declare_limits`;
- the bearer security scheme on the protected operations when the server has a token.

What JSON Schema cannot state is that arrays agree in shape (rows of one length, ``needs`` as long as
``offers``, ``k`` shaped like ``q``, base64 bytes matching ``shape``): the server answers those 422
``shape_mismatch`` naming the field.
"""

from __future__ import annotations

import copy
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel

from ..types.conductor_topology import REQUIRED_ROLES, ROLE_NAME
from ..types.op_table import OPS
from .config import ServeConfig
from .convert import FLOAT32_MAX
from .schemas import (
    ArrayEpisode,
    B64Matrix,
    ConductorOptions,
    ConductorRequest,
    EmbeddingsRequest,
    EmbedRequest,
    QMixRequest,
    RouteRequest,
    TextEpisode,
    ToposortRequest,
)

__all__ = ["body", "document"]

_BEARER = "bearer"
_INT32_MAX = 2**31 - 1
_BODIES: tuple[type[BaseModel], ...] = (
    RouteRequest,
    EmbedRequest,
    EmbeddingsRequest,
    ToposortRequest,
    ConductorRequest,
    QMixRequest,
)


def body(model: type[BaseModel], *ops: str) -> dict[str, Any]:
    """The OpenAPI request body of an endpoint that parses ``model`` itself, and the core ops it runs
    (``x-toporoute-ops``: each op's name and summary, read from the op table, so the service's description of
    them cannot drift from :mod:`toporoute.ops`)."""
    ref = {"$ref": f"#/components/schemas/{model.__name__}"}
    extra: dict[str, Any] = {
        "requestBody": {"required": True, "content": {"application/json": {"schema": ref}}}
    }
    if ops:
        extra["x-toporoute-ops"] = [{"op": f"toporoute.ops.{n}", "summary": OPS[n].summary} for n in ops]
    return extra


def document(
    app: FastAPI,
    config: ServeConfig,
    *,
    encoder_names: tuple[str, ...],
    dim: int,
    qmix: Any,
    protected: set[str],
) -> dict[str, Any]:
    """The app's OpenAPI document (see the module docstring).

    Parameters
    ----------
    app : FastAPI
    config : ServeConfig
        The limits to declare.
    encoder_names : tuple of str
        The ``model`` values ``/v1/embeddings`` accepts.
    dim : int
        The encoder's dimension.
    qmix : QMixParams or None
        The loaded checkpoint (its ``obs_dim`` and ``hidden`` widths are declared).
    protected : set of str
        Paths behind the token (declared with the bearer scheme when ``config.token`` is set).
    """
    schema = get_openapi(
        title=app.title,
        version=app.version,
        description=app.description,
        routes=app.routes,
        tags=app.openapi_tags,
    )
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    for model in _BODIES:
        own = model.model_json_schema(ref_template="#/components/schemas/{model}")
        for name, sub in own.pop("$defs", {}).items():
            components.setdefault(name, sub)
        components[model.__name__] = own
    _declare_limits(components, config, encoder_names, dim, qmix)
    if config.token is not None:
        schema["components"]["securitySchemes"] = {
            _BEARER: {
                "type": "http",
                "scheme": "bearer",
                "description": "The server's token (`toporoute serve --token-file` or $TOPOROUTE_TOKEN).",
            }
        }
        for path, item in schema.get("paths", {}).items():
            if path in protected:
                for operation in item.values():
                    operation["security"] = [{_BEARER: []}]
    return schema


# -- limits ----------------------------------------------------------------------------------------------------


def _described(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """``new`` with the generated property's description, title and default."""
    return {**new, **{k: old[k] for k in ("description", "title", "default") if k in old}}


def _list(items: dict[str, Any], most: int, least: int = 1) -> dict[str, Any]:
    return {"type": "array", "items": items, "minItems": least, "maxItems": most}


def _square(n: int) -> dict[str, Any]:
    """An ``(N, N)`` boolean matrix, ``1 <= N <= n`` (squareness itself is a shape rule)."""
    return _list(_list({"type": "boolean"}, n), n)


def _floats(rows: int, cols: int | None = None, minimum: float | None = None) -> dict[str, Any]:
    """An ``(N, D)`` float32 matrix, ``1 <= N <= rows``; ``D == cols`` when given."""
    number = {
        "type": "number",
        "minimum": -FLOAT32_MAX if minimum is None else minimum,
        "maximum": FLOAT32_MAX,
    }
    row = _list(number, cols or _INT32_MAX, cols or 1)
    return _list(row, rows)


def _shape(*dims: tuple[int, int]) -> dict[str, Any]:
    """A B64Array ``shape`` with one entry per ``(least, most)`` of ``dims``."""
    return {
        "type": "array",
        "prefixItems": [{"type": "integer", "minimum": lo, "maximum": hi} for lo, hi in dims],
        "minItems": len(dims),
        "maxItems": len(dims),
        "items": False,
    }


def _b64(*dims: tuple[int, int]) -> dict[str, Any]:
    """A B64Array whose ``shape`` has one entry per ``(least, most)`` of ``dims``."""
    return {
        "allOf": [
            {"$ref": "#/components/schemas/B64Array"},
            {"type": "object", "properties": {"shape": _shape(*dims)}},
        ]
    }


def _nullable(sub: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [sub, {"type": "null"}]}


def _declare_limits(
    components: dict[str, Any], cfg: ServeConfig, encoder_names: tuple[str, ...], dim: int, qmix: Any
) -> None:
    """Declares in ``components`` the limits :class:`~.service.Service` checks, from the same ``cfg``."""
    agents, episodes, chars, texts = cfg.max_agents, cfg.max_episodes, cfg.max_text_chars, cfg.max_texts
    text = {"type": "string", "maxLength": chars}
    flag = {"type": "boolean"}
    flags = {"anyOf": [_list(flag, agents), _list(_list(flag, agents), episodes)]}  # (N,) or (B, N) masks

    def patch(owner: type[BaseModel], /, **props: dict[str, Any]) -> None:
        own = components[owner.__name__]["properties"]
        for name, sub in props.items():
            own[name] = _described(own[name], sub)

    route = components[RouteRequest.__name__]["properties"]
    route["episodes"]["maxItems"] = episodes
    route["k_in"]["maximum"] = agents
    patch(TextEpisode, needs=_list(text, agents), offers=_list(text, agents))
    matrix = {"oneOf": [_floats(agents), {"$ref": f"#/components/schemas/{B64Matrix.__name__}"}]}
    patch(ArrayEpisode, q=matrix, k=copy.deepcopy(matrix))
    patch(B64Matrix, shape=_shape((1, agents), (1, _INT32_MAX)))

    patch(EmbedRequest, texts=_list(text, texts, 0))
    patch(
        EmbeddingsRequest,
        input={"anyOf": [text, _list(text, texts)]},
        model={"type": "string", "enum": list(encoder_names)},
        dimensions=_nullable({"type": "integer", "minimum": dim, "maximum": dim}),
    )

    patch(
        ToposortRequest,
        graphs={"anyOf": [_square(agents), _list(_square(agents), episodes)]},
        weights=_nullable(
            {
                "anyOf": [
                    _floats(agents, minimum=0.0),
                    _list(_floats(agents, minimum=0.0), episodes),
                    _b64((1, agents), (1, agents)),
                    _b64((1, episodes), (1, agents), (1, agents)),
                ]
            }
        ),
        active=_nullable(copy.deepcopy(flags)),
    )

    role = {"type": "string", "pattern": f"^(?:{ROLE_NAME.pattern})$"}
    pool = {
        "type": "array",
        "items": role,
        "uniqueItems": True,
        "allOf": [{"contains": {"const": name}} for name in REQUIRED_ROLES],
    }
    patch(ConductorOptions, pool=_nullable(pool))
    positive = {"type": "integer", "minimum": 1, "maximum": _INT32_MAX}
    patch(
        ConductorRequest,
        plans=_list({"type": "string"}, episodes, 0),
        n_max={"anyOf": [positive, _list(positive, episodes, 0)]},
    )

    if qmix is not None:
        obs_dim, hidden = int(qmix.config.obs_dim), int(qmix.config.hidden)
        patch(
            QMixRequest,
            obs={
                "anyOf": [
                    _floats(agents, obs_dim),
                    _list(_floats(agents, obs_dim), episodes),
                    _b64((1, agents), (obs_dim, obs_dim)),
                    _b64((1, episodes), (1, agents), (obs_dim, obs_dim)),
                ]
            },
            adj={"anyOf": [_square(agents), _list(_square(agents), episodes)]},
            hidden=_nullable(
                {
                    "anyOf": [
                        _floats(agents, hidden),
                        _list(_floats(agents, hidden), episodes),
                        _b64((1, agents), (hidden, hidden)),
                        _b64((1, episodes), (1, agents), (hidden, hidden)),
                    ]
                }
            ),
            active=_nullable(copy.deepcopy(flags)),
        )
