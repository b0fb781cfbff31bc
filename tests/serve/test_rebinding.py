"""DNS rebinding: a web page that points its own name at 127.0.0.1 gets no grant and runs nothing.

Its requests carry the page's name in ``Host`` (421) and the page's ``Origin`` (403); agents and tool
services name the server and send no ``Origin``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from policyguard.cli import main

from .conftest import CHECKLIST, POLICY, check_body, refund_call, unique

REBOUND = {"host": "rebind.evil.example:8700", "origin": "http://rebind.evil.example:8700"}


def _error(response: Any, status: int, *words: str) -> None:
    assert response.status_code == status, response.text
    message = response.json()["error"]
    assert "\n" not in message and all(word in message for word in words), message


def test_a_rebound_page_gets_no_grant_and_its_refund_does_not_run(make_client: Any, tmp_path: Path) -> None:
    """Loopback, no token, the demo executor on: the page's check and execute are refused before any work."""
    effects = tmp_path / "effects.jsonl"
    client = make_client(demo_effects=effects)
    transaction = unique()
    check = client.post("/v1/check", json=check_body(transaction), headers=REBOUND)
    _error(check, 421, "rebind.evil.example", "--allowed-host")
    execute = client.post(
        "/v1/execute", json={"call": refund_call("c1", transaction, 500), "grant": "x"}, headers=REBOUND
    )
    _error(execute, 421)
    assert not effects.exists() or effects.read_text() == ""
    assert 'policyguard_http_responses_total{route="other",code="421"} 2' in client.get("/metrics").text
    assert client.post("/v1/check", json=check_body(transaction)).json()["outcome"] == "allow"  # the agent still can


def test_a_browser_origin_is_refused_even_under_a_loopback_name(make_client: Any) -> None:
    """A page served from another local port (or any page the Host check would not catch) sends an Origin."""
    client = make_client()
    for origin in ("http://127.0.0.1:3000", "http://localhost:8700", "null"):
        _error(client.post("/v1/check", json=check_body(unique()), headers={"origin": origin}), 403, "Origin")


@pytest.mark.parametrize("host", ["127.0.0.1:8700", "127.0.0.1", "localhost:8700", "LocalHost:1", "[::1]:8700"])
def test_the_loopback_names_are_answered_on_any_port(make_client: Any, host: str) -> None:
    assert make_client().get("/healthz", headers={"host": host}).status_code == 200


@pytest.mark.parametrize(
    "host", ["evil.example", "127.0.0.1.nip.io:8700", "127.0.0.2:8700", "0.0.0.0:8700", "localhost:80:80", "[::1",
             "127.0.0.1:http", "", "localhost.:8700"],
)  # fmt: skip
def test_any_other_host_is_a_421(make_client: Any, host: str) -> None:
    _error(make_client().get("/healthz", headers={"host": host}), 421)


def test_the_listening_address_and_each_allowed_host_are_answered(make_client: Any) -> None:
    client = make_client(host="127.0.0.2", allowed_hosts=("guard.internal", "::1"))
    for host in ("127.0.0.2:8700", "guard.internal", "GUARD.internal:443", "[::1]:1", "localhost"):
        assert client.get("/healthz", headers={"host": host}).status_code == 200, host
    _error(client.get("/healthz", headers={"host": "other.internal"}), 421)


def test_an_allowed_origin_may_call_and_no_other(make_client: Any) -> None:
    client = make_client(allowed_origins=("https://Console.example.com/",))
    allowed = client.post("/v1/check", json=check_body(unique()), headers={"origin": "https://console.example.com"})
    assert allowed.status_code == 200 and allowed.json()["outcome"] == "allow"
    _error(client.post("/v1/check", json=check_body(unique()), headers={"origin": "http://console.example.com"}), 403)


def test_off_loopback_the_names_are_unknown_so_only_origin_is_checked_until_allowed_hosts_are_given(
    make_client: Any,
) -> None:
    """Behind a load balancer clients use names the server cannot know; the required token keeps pages out there."""
    token = {"authorization": "Bearer s3cret-token-for-tests-0123456789"}
    open_names = make_client(host="0.0.0.0", token="s3cret-token-for-tests-0123456789")
    assert open_names.get("/healthz", headers={"host": "guard.prod.example"}).status_code == 200
    _error(open_names.get("/healthz", headers={"origin": "https://evil.example"}), 403)
    listed = make_client(
        host="0.0.0.0", token="s3cret-token-for-tests-0123456789", allowed_hosts=("guard.prod.example",)
    )
    assert listed.get("/healthz", headers={"host": "guard.prod.example", **token}).status_code == 200
    assert listed.get("/healthz", headers={"host": "127.0.0.1:8700"}).status_code == 200
    _error(listed.get("/healthz", headers={"host": "0.0.0.0:8700"}), 421)
    _error(listed.get("/healthz", headers={"host": "rebind.evil.example"}), 421)


@pytest.mark.parametrize(
    "flag, value",
    [("--allowed-host", "http://guard.internal"), ("--allowed-host", "guard.internal:8700"), ("--allowed-host", "*"),
     ("--allowed-origin", "console.example.com"), ("--allowed-origin", "https://console.example.com/path"),
     ("--allowed-origin", "ftp://console.example.com"), ("--allowed-origin", "*")],
)  # fmt: skip
def test_a_malformed_allowed_name_is_refused_at_start_in_one_line(
    flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["serve", "--policy", str(POLICY), "--checklist", str(CHECKLIST), "--port", "0", flag, value])
    err = capsys.readouterr().err
    assert code == 2 and flag in err and err.count("\n") == 1 and "Traceback" not in err


def test_the_real_server_refuses_a_rebound_page_and_answers_its_agent(
    tmp_path: Path, grant_key: Path, replicas: Any
) -> None:
    """`policyguard serve` on loopback without a token, as in the report: the page's 500 USD refund never runs."""
    effects = tmp_path / "effects.jsonl"
    args = ["--policy", str(POLICY), "--checklist", str(CHECKLIST), "--grant-key", str(grant_key),
            "--demo-effects", str(effects), "--allowed-host", "guard.test"]  # fmt: skip
    server = replicas("loopback", args)
    port = server.url.rsplit(":", 1)[1]
    transaction = unique()
    page = {"host": f"rebind.evil.example:{port}", "origin": f"http://rebind.evil.example:{port}"}
    with httpx.Client(timeout=30) as client:
        refused = client.post(f"{server.url}/v1/check", json=check_body(transaction), headers=page)
        _error(refused, 421)
        _error(client.post(f"{server.url}/v1/check", json=check_body(transaction),
                           headers={"origin": page["origin"]}), 403)  # fmt: skip
        named = client.post(f"{server.url}/v1/check", json=check_body(transaction), headers={"host": "guard.test"})
        assert named.status_code == 200 and named.json()["outcome"] == "allow"
    assert "grant" not in json.loads(refused.text) and (not effects.exists() or effects.read_text() == "")
