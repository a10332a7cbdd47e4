"""The search page at ``/``: three static files of this package (``static/index.html``,
``page.css``, ``page.js``) served from memory, no token needed (they hold no data: every API call
the page makes sends the bearer token the user typed, kept in the tab's sessionStorage).

Each answer carries a Content-Security-Policy that allows this server's own origin only
(``default-src 'self'``, no inline script or style, no frames), so the page fetches nothing from
outside and works offline; a passage's text is only ever put into the page as text (page.js).
"""
from __future__ import annotations

from importlib import resources
from typing import Dict, Tuple, Union

from fastapi import APIRouter, FastAPI
from fastapi.responses import Response

CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
           "X-Frame-Options": "DENY", "Cache-Control": "no-cache"}
# URL path -> (file in static/, media type)
FILES: Dict[str, Tuple[str, str]] = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/static/page.css": ("page.css", "text/css; charset=utf-8"),
    "/static/page.js": ("page.js", "text/javascript; charset=utf-8"),
}
PATHS = frozenset(FILES)   # answered without a token (retrieval.server.gate)


def _read(name: str) -> bytes:
    return resources.files(__package__).joinpath("static", name).read_bytes()


def add_page_routes(app: Union[FastAPI, APIRouter]) -> None:
    """GET / and its two static files, read once (not in the OpenAPI document)."""
    for path, (name, media) in FILES.items():
        body = _read(name)

        def serve(body: bytes = body, media: str = media) -> Response:
            return Response(body, media_type=media, headers=HEADERS)
        app.add_api_route(path, serve, methods=["GET"], include_in_schema=False, name=f"page:{name}")
