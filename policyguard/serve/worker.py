"""``serve --workers N``: N processes on one listening socket, each with its own guard and store handle.

uvicorn starts each worker as a fresh process (spawn) that imports
:func:`app_from_env`; the settings travel in :data:`CONFIG_ENV` as JSON. Workers
share exactly what replicas share, the store, so the store must be one that
several processes can open (not ``:memory:``). Each worker writes its own trace
file (``trace.jsonl`` becomes ``trace.<pid>.jsonl``), since a trace file has one
writer.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from .service import ServeConfig, build_service

if TYPE_CHECKING:  # pragma: no cover
    from starlette.applications import Starlette

CONFIG_ENV = "POLICYGUARD_SERVE_CONFIG"


def worker_config(config: ServeConfig, pid: int) -> ServeConfig:
    """The settings of worker ``pid``: its own trace file and replica name."""
    updates: dict[str, object] = {"replica": f"{config.replica or 'serve'}-{pid}"}
    if config.trace is not None:
        updates["trace"] = config.trace.with_name(f"{config.trace.stem}.{pid}{config.trace.suffix}")
    return config.model_copy(update=updates)


def app_from_env() -> Starlette:
    """The app factory uvicorn calls in each worker process."""
    from . import create_app
    from .server import share_the_interpreter

    share_the_interpreter()
    config = worker_config(ServeConfig.model_validate_json(os.environ[CONFIG_ENV]), os.getpid())
    return create_app(build_service(config))
