"""``policyguard serve``: the guard over HTTP + JSON + JWKS, for agents in any language and several replicas.

Needs the ``[serve]`` extra (Starlette, uvicorn). :func:`build_service` loads the
policy, checklist, store and keys once; :func:`create_app` returns the ASGI app.

May use: the guard and everything below it. Never another edge (integrations,
review, cli, bench).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .service import ServeConfig, Service, build_service

if TYPE_CHECKING:  # pragma: no cover
    from starlette.applications import Starlette

__all__ = ["ServeConfig", "Service", "build_service", "create_app"]


def create_app(service: Service) -> Starlette:
    """The Starlette app for ``service`` (imports Starlette only when called)."""
    from .app import create_app as _create

    return _create(service)
