"""The README's `policyguard serve` commands run as written, and a non-Python client verifies the grant."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.docblocks import doc_block

from .conftest import ROOT

VERIFY_JS = r"""
// Verify an EdDSA JWT against a JWKS with nothing but Node's WebCrypto: the kid picks the key.
const [jwks, token] = [JSON.parse(process.argv[2]), process.argv[3]];
const [head, body, sig] = token.split(".");
const header = JSON.parse(Buffer.from(head, "base64url"));
const jwk = jwks.keys.find((k) => k.kid === header.kid);
if (!jwk || header.alg !== "EdDSA") { console.log("no key"); process.exit(1); }
const key = await crypto.subtle.importKey("jwk", { kty: jwk.kty, crv: jwk.crv, x: jwk.x }, { name: "Ed25519" }, false, ["verify"]);
const ok = await crypto.subtle.verify({ name: "Ed25519" }, key, Buffer.from(sig, "base64url"), Buffer.from(`${head}.${body}`));
console.log(ok ? Buffer.from(body, "base64url").toString() : "bad signature");
process.exit(ok ? 0 : 1);
"""


def _serve_block() -> list[str]:
    return [line for line in doc_block("docs/guarding/http.md", "serve").splitlines() if line.strip()]


def _curl(command: list[str], cwd: Path) -> str:
    if shutil.which("curl"):
        return subprocess.run(command, capture_output=True, text=True, check=True, timeout=30, cwd=cwd).stdout
    url = next(part for part in command if part.startswith("http"))  # no curl here: the same request with httpx
    data = (cwd / next(part for part in command if part.startswith("@"))[1:]).read_bytes()
    return httpx.post(url, content=data, headers={"content-type": "application/json"}, timeout=30).text


@pytest.fixture
def served(tmp_path: Path, replicas: Any) -> tuple[dict[str, Any], str]:
    """Run the README block in a scratch directory: key, server (on a free port), curl."""
    for name in ("benchmarks", "docs", "checklists"):
        (tmp_path / name).symlink_to(ROOT / name)
    lines = _serve_block()
    keygen = next(line for line in lines if line.startswith("python -c"))
    subprocess.run([sys.executable, *shlex.split(keygen)[1:]], check=True, timeout=60, cwd=tmp_path)
    serve = shlex.split(next(line for line in lines if line.startswith("policyguard serve")).rstrip("& "))
    port = serve.index("--port")
    replica = replicas("readme", serve[2:port] + serve[port + 2 :], cwd=tmp_path)
    curl = shlex.split(next(line for line in lines if line.startswith("curl")))
    curl = [part.replace("http://127.0.0.1:8700", replica.url) for part in curl]
    decision = json.loads(_curl(curl, tmp_path))
    return decision, replica.url


def test_the_readme_curl_call_gets_an_allow_with_a_grant(served: tuple[dict[str, Any], str]) -> None:
    decision, _ = served
    assert decision["outcome"] == "allow" and decision["tool"] == "issue_refund"
    assert decision["grant"].count(".") == 2


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_node_webcrypto_verifies_the_grant_against_the_served_jwks(
    served: tuple[dict[str, Any], str], tmp_path: Path
) -> None:
    decision, url = served
    jwks = httpx.get(f"{url}/.well-known/jwks.json", timeout=10).text
    script = tmp_path / "verify.mjs"
    script.write_text(VERIFY_JS)
    good = subprocess.run(["node", str(script), jwks, decision["grant"]], capture_output=True, text=True, timeout=60)
    assert good.returncode == 0, good.stdout + good.stderr
    assert json.loads(good.stdout)["call_id"] == "c1"
    head, body, sig = decision["grant"].split(".")
    forged = f"{head}.{body[:-2]}{'AA' if body[-2:] != 'AA' else 'BB'}.{sig}"
    bad = subprocess.run(["node", str(script), jwks, forged], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "bad signature" in bad.stdout
