"""``retr serve``: the HTTP (FastAPI + uvicorn) and MCP face of opened index folders.

Nothing here is imported by ``import retrieval``; it needs the ``serve`` extra
(FastAPI, uvicorn, fastmcp). Layout:

- :mod:`retrieval.server.registry`: the served indexes by name, reopened when their
  folder changes (a write through the API or a ``retr add`` from another process);
- :mod:`retrieval.server.schemas`: request and response bodies (the OpenAPI document);
- :mod:`retrieval.server.guard`: what every transport shares: the admission count
  (``--max-inflight``), the request limits for MCP, the response budget
  (``--max-response-chars``), error messages without server paths;
- :mod:`retrieval.server.app`: the app's assembly (lifespan, errors, routes, OpenAPI);
- :mod:`retrieval.server.gate`: the ASGI gate in front: auth, body limits, 429, metrics;
- :mod:`retrieval.server.routes`: the endpoints, a function per group of routes;
- :mod:`retrieval.server.mcp_tools`: the same search / get / list as MCP tools;
- :mod:`retrieval.server.run`: start-up checks and uvicorn (``retr serve``, ``retr mcp``).
"""
