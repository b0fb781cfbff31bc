"""The server's libraries load only when a server is built: `import policyguard` and the CLI stay light."""

from __future__ import annotations

import subprocess
import sys

SERVER_LIBRARIES = ("starlette", "uvicorn", "httpx", "anyio")


def _loaded_after(code: str) -> list[str]:
    probe = f"{code}\nimport sys\nprint(','.join(m for m in {SERVER_LIBRARIES!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120)
    return [m for m in out.stdout.strip().split(",") if m]


def test_import_policyguard_and_the_cli_parser_load_no_server_library() -> None:
    assert _loaded_after("import policyguard\nfrom policyguard.cli import build_parser\nbuild_parser()") == []


def test_the_serve_package_loads_starlette_only_when_the_app_is_created() -> None:
    assert _loaded_after("import policyguard.serve, policyguard.serve.keys, policyguard.serve.auth") == []
