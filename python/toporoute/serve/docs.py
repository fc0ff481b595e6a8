"""``/docs`` (Swagger UI) and ``/redoc`` served from this machine, so they work on a host without internet.

The assets come from the ``fastapi-offline`` package (part of the ``serve`` extra: Swagger UI 5 and ReDoc 2,
which read OpenAPI 3.1). Without it both pages still answer, with a note and a link to ``/openapi.json``,
never a page that fetches scripts from a CDN.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

__all__ = ["ASSETS_URL", "add_docs"]

ASSETS_URL = "/docs/assets"


def _assets() -> Path | None:
    try:
        import fastapi_offline
    except ImportError:
        return None
    path = Path(fastapi_offline.__file__).parent / "static"
    return path if (path / "swagger-ui-bundle.js").is_file() else None


def add_docs(app: FastAPI) -> None:
    """``GET /docs`` and ``GET /redoc`` (left out of the schema), with their assets under :data:`ASSETS_URL`."""
    assets = _assets()
    title = f"{app.title} {app.version}"
    if assets is not None:
        app.mount(ASSETS_URL, StaticFiles(directory=assets), name="docs-assets")

    def page(
        render: Callable[..., HTMLResponse], name: str, **urls: Any
    ) -> Callable[[], Awaitable[HTMLResponse]]:
        """A page drawn by ``render`` (FastAPI's HTML of the document) over the assets, or the note without them."""

        async def html() -> HTMLResponse:
            if assets is None:
                return _without_assets(title)
            return render(openapi_url="/openapi.json", title=f"{title} - {name}", **urls)

        return html

    swagger_ui = page(
        get_swagger_ui_html,
        "Swagger UI",
        swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js",
        swagger_css_url=f"{ASSETS_URL}/swagger-ui.css",
        swagger_favicon_url=f"{ASSETS_URL}/favicon.png",
        swagger_ui_parameters={"persistAuthorization": True},
    )
    redoc = page(
        get_redoc_html,
        "ReDoc",
        redoc_js_url=f"{ASSETS_URL}/redoc.standalone.js",
        redoc_favicon_url=f"{ASSETS_URL}/favicon.png",
        with_google_fonts=False,
    )
    app.get("/docs", include_in_schema=False, name="swagger_ui")(swagger_ui)
    app.get("/redoc", include_in_schema=False, name="redoc")(redoc)


def _without_assets(title: str) -> HTMLResponse:
    return HTMLResponse(
        f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title></head><body>"
        f"<h1>{title}</h1><p>The browsable API page needs the <code>fastapi-offline</code> package "
        "(<code>pip install 'toporoute[serve]'</code>). The OpenAPI document is at "
        "<a href='/openapi.json'>/openapi.json</a>.</p></body></html>"
    )
