"""The server's assembly: one ServerState, the route modules' routes in one list, the error
handlers and the access log.

The routes, by API:
    cas_api.py     the XET CAS API (/v1/reconstructions, /v1/xorbs, /v1/shards, /v1/chunks, ...)
    grants.py      hf-xet's upload grants (/v1/xorb-grants, /v1/xorb-uploads, /v1/xorb-commits)
    hub.py         the Hub's LFS batch API and token routes, emulated; locks.py the LFS locks
    extension.py   ours: what our agent uses beyond the XET API (small files)
    operator.py    /health, /ready, /metrics and the admin page; admin_api.py its JSON API
    file_chunk_hashes.py  GET /v2/file-chunk-hashes/{file} (range edits, hf-xet's newer API)
A new API's routes come from a function of its own module, added to the list in create_app
(route_order.py then puts fixed paths first).
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response

from ..core import extension as names
from .access_log import AccessLog
from .cas_api import CasApi, cas_routes
from .errors import exception_handlers
from .extension import Extension, extension_routes
from .file_chunk_hashes import file_chunk_hashes_routes
from .grants import Grants, grant_routes
from .hub import HubEmulation, hub_routes
from .locks import LockApi, lock_routes
from .route_order import static_routes_first
from .state import ServerConfig, ServerState


def create_app(config: ServerConfig) -> Starlette:
    # Imported here, not above: prometheus-client picks its multiprocess mode at import, after
    # `serve` has set its directory (see metrics.py).
    from . import metrics
    from .admin_api import admin_api_routes
    from .operator import Operator, operator_routes

    state = ServerState(config)
    routes = [
        *operator_routes(Operator(state, state.history)),
        *cas_routes(CasApi(state)),
        *grant_routes(Grants(state)),
        *extension_routes(Extension(state)),
        *hub_routes(HubEmulation(state)),
        *lock_routes(LockApi(state)),
        *file_chunk_hashes_routes(state),
        *admin_api_routes(state),
    ]
    starlette = Starlette(
        routes=static_routes_first(routes, hot=(names.UPLOAD_BUNDLES,)),
        exception_handlers={kind: _counting_errors(handler, metrics.storage_error) for kind, handler in exception_handlers().items()},
    )
    starlette.router.redirect_slashes = False  # an API answers, it does not redirect
    starlette.state.cas = state
    starlette.add_middleware(AccessLog, observe=metrics.observe_request)
    return starlette


def _counting_errors(handler, count: Callable[[BaseException], None]):
    """`handler`, counting each error it answers (the metrics' index and object-store errors)."""

    async def counted(request: Request, exc: Exception) -> Response:
        count(exc)
        return await handler(request, exc)

    return counted
