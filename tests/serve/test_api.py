"""`POST /v1/check` and the documents around it, in-process (Starlette TestClient)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jwt
import pytest

from policyguard.audit.inv1 import audit, read_events
from policyguard.audit.trace import read_trace
from policyguard.cli import main
from policyguard.enforcement.grants import GrantVerifier, generate_keypair
from policyguard.trajectory.messages import ToolCall

from .conftest import CHECKLIST, POLICY, check_body, refund_call, refund_dialogue, tool_call, unique

TOKEN = "s3cret-token-for-tests-0123456789"


def test_an_allowed_call_returns_the_decision_with_a_grant(make_client: Any) -> None:
    client = make_client()
    response = client.post("/v1/check", json=check_body(unique(), principal="C-1"))
    assert response.status_code == 200
    body = response.json()
    assert body["outcome"] == "allow" and body["verdict"] == "PASS" and body["stage"] == "gate"
    assert body["grant"].count(".") == 2
    assert response.headers["x-request-id"]


def test_the_decision_is_what_verify_prints_for_the_same_files(
    make_client: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    transaction = unique()
    (tmp_path / "t.json").write_text(json.dumps(refund_dialogue(transaction)))
    (tmp_path / "c.json").write_text(json.dumps(refund_call("c1", transaction, amount=900)))
    code = main(["verify", "--policy", str(POLICY), "--checklist", str(CHECKLIST), "--trajectory",
                 str(tmp_path / "t.json"), "--call", str(tmp_path / "c.json")])  # fmt: skip
    printed = json.loads(capsys.readouterr().out)
    served = make_client(grant_key=None).post(
        "/v1/check", json={"trajectory": refund_dialogue(transaction), "call": refund_call("c1", transaction, 900)}
    )
    assert code == 1 and served.status_code == 200
    assert served.json() == printed
    assert printed["outcome"] == "block"


def test_a_blocked_call_gets_the_agents_message_and_no_grant(make_client: Any) -> None:
    transaction = unique()
    body = {"trajectory": refund_dialogue(transaction, allowed=False), "call": refund_call("c1", transaction)}
    decision = make_client().post("/v1/check", json=body).json()
    assert decision["outcome"] == "block" and "grant" not in decision
    assert "refund.policy_allows" in {r["id"] for r in decision["requirements"] if r["status"] == "NOT_MET"}
    assert decision["message"]


def test_an_unknown_tool_is_a_block_decision_naming_the_tool_it_resembles(make_client: Any) -> None:
    body = {"trajectory": [], "call": tool_call("c1", "issue_refund ", {"amount": 1})}
    decision = make_client().post("/v1/check", json=body).json()
    assert decision["outcome"] == "block" and decision["stage"] == "unknown_tool"
    assert "issue_refund" in decision["message"]


@pytest.mark.parametrize("shape", ["anthropic", "openai_responses"])
def test_other_message_formats_are_detected_like_verify_does(make_client: Any, shape: str) -> None:
    transaction = unique()
    results = {
        "r1": {"transaction_id": transaction, "refund_allowed": True},
        "r2": {"transaction_id": transaction, "captured": 200, "currency": "USD"},
        "r3": {"approval_id": "", "status": "none"},
    }
    reads = {"r1": ("get_refund_policy", {"transaction_id": transaction}),
             "r2": ("get_transaction", {"transaction_id": transaction}), "r3": ("get_approval", {"approval_id": ""})}  # fmt: skip
    args = {"transaction_id": transaction, "amount": 120, "currency": "USD", "idempotency_key": f"refund:{transaction}"}
    if shape == "anthropic":
        trajectory: list[Any] = [
            {"role": "user", "content": "refund please"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": k, "name": n, "input": a} for k, (n, a) in reads.items()],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": k, "content": json.dumps(v)} for k, v in results.items()
                ],
            },
        ]
        call: dict[str, Any] = {"type": "tool_use", "id": "c1", "name": "issue_refund", "input": args}
    else:
        trajectory = [{"role": "user", "content": "refund please"}]
        trajectory += [
            {"type": "function_call", "call_id": k, "name": n, "arguments": json.dumps(a)}
            for k, (n, a) in reads.items()
        ]
        trajectory += [
            {"type": "function_call_output", "call_id": k, "output": json.dumps(v)} for k, v in results.items()
        ]
        call = {"type": "function_call", "call_id": "c1", "name": "issue_refund", "arguments": json.dumps(args)}
    decision = make_client().post("/v1/check", json={"trajectory": trajectory, "call": call}).json()
    assert decision["outcome"] == "allow", decision


def test_the_grant_binds_the_requests_principal_and_the_trace_records_it(make_client: Any, tmp_path: Path) -> None:
    client = make_client()
    transaction = unique()
    decision = client.post("/v1/check", json=check_body(transaction, principal="customer-7")).json()
    claims = jwt.decode(decision["grant"], options={"verify_signature": False})
    assert claims["principal"] == "customer-7" and claims["call_id"] == "c1"
    events = [e for e in read_trace(tmp_path / "trace.jsonl") if e.get("call_id") == "c1"]
    assert {e["event"] for e in events} >= {"submit", "allow", "decision"}
    assert all(e["principal"] == "customer-7" and e["replica"] == "test" and e["request_id"] for e in events)


def test_the_servers_trace_passes_the_audit(make_client: Any, tmp_path: Path) -> None:
    client = make_client(demo_effects=tmp_path / "effects.jsonl")
    transaction = unique()
    client.service.store.set_captured(transaction, 200)
    decision = client.post("/v1/check", json=check_body(transaction, principal="C-1")).json()
    executed = client.post(
        "/v1/execute", json={"call": refund_call("c1", transaction), "grant": decision["grant"], "principal": "C-1"}
    ).json()
    client.post("/v1/check", json={"trajectory": [], "call": tool_call("c2", "drop_table", {})})
    assert executed["executed"] is True
    client.service.trace.sync()
    records, events = read_events(tmp_path / "trace.jsonl")
    report = audit(events, records=records)
    assert report.ok and report.executes == 1 and report.effects == 1, report


def test_a_grant_verifies_against_the_served_jwks_with_pyjwt(make_client: Any) -> None:
    client = make_client()
    grant = client.post("/v1/check", json=check_body(unique())).json()["grant"]
    keys = jwt.PyJWKSet.from_dict(client.get("/.well-known/jwks.json").json())
    kid = jwt.get_unverified_header(grant)["kid"]
    key = next(k for k in keys.keys if k.key_id == kid)
    claims = jwt.decode(grant, key=key, algorithms=["EdDSA"])
    assert claims["tool"] == "issue_refund" and claims["iss"] == "policyguard"
    tampered = grant[:-4] + ("AAAA" if not grant.endswith("AAAA") else "BBBB")
    with pytest.raises(jwt.InvalidSignatureError):
        jwt.decode(tampered, key=key, algorithms=["EdDSA"])


def test_rotation_publishes_the_signing_key_first_and_the_previous_keys_after(make_client: Any, tmp_path: Path) -> None:
    _, previous = generate_keypair()
    (tmp_path / "previous.pub.pem").write_bytes(previous)
    client = make_client(publish_keys=(tmp_path / "previous.pub.pem",))
    keys = client.get("/.well-known/jwks.json").json()["keys"]
    grant = client.post("/v1/check", json=check_body(unique())).json()["grant"]
    assert len(keys) == 2 and len({k["kid"] for k in keys}) == 2
    assert keys[0]["kid"] == jwt.get_unverified_header(grant)["kid"]
    assert all(k["kty"] == "OKP" and k["crv"] == "Ed25519" and k["alg"] == "EdDSA" and "d" not in k for k in keys)


def test_a_private_key_is_never_published(make_client: Any, grant_key: Path) -> None:
    from policyguard.errors import ConfigError

    with pytest.raises(ConfigError, match="private key"):
        make_client(publish_keys=(grant_key,))


def test_the_executor_accepts_the_grant_the_server_issued(make_client: Any) -> None:
    """The grant is the same artifact the library's GrantVerifier checks: a tool service can use either."""
    client = make_client()
    transaction = unique()
    grant = client.post("/v1/check", json=check_body(transaction, principal="C-1")).json()["grant"]
    public = client.service.keys[0].pem()
    verifier = GrantVerifier(
        public, nonces=client.service.store, current_policy_version=lambda: client.service.base.checklist.policy.version
    )
    call = ToolCall(
        id="c1", name="issue_refund", arguments=json.loads(refund_call("c1", transaction)["function"]["arguments"])
    )
    assert verifier.verify(grant, call, principal="C-1", resource=None).principal == "C-1"


def test_without_a_grant_key_no_grant_is_issued_and_the_jwks_is_empty(make_client: Any) -> None:
    client = make_client(grant_key=None)
    assert "grant" not in client.post("/v1/check", json=check_body(unique())).json()
    assert client.get("/.well-known/jwks.json").json() == {"keys": []}


def test_health_and_readiness(make_client: Any) -> None:
    client = make_client()
    assert client.get("/healthz").json()["status"] == "ok"
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["ready"] is True
    assert ready.json()["checklist"] == "refund-sandbox"


def test_readiness_fails_when_the_store_fails_and_the_error_is_counted(make_client: Any) -> None:
    client = make_client()

    class Broken:
        def is_denied(self, call_id: str) -> bool:
            raise OSError("disk gone")

    client.service.store.inner = Broken()
    ready = client.get("/readyz")
    assert ready.status_code == 503 and ready.json()["ready"] is False and ready.json()["store"] == "unreachable"
    decision = client.post("/v1/check", json=check_body(unique())).json()
    assert decision["outcome"] == "block"  # deny-wins cannot be read: fail closed
    assert 'policyguard_store_errors_total{operation="is_denied"} 2' in client.get("/metrics").text


def test_metrics_count_decisions_by_outcome_and_stage_and_time_them(make_client: Any) -> None:
    client = make_client()
    client.post("/v1/check", json=check_body(unique()))
    client.post("/v1/check", json={"trajectory": [], "call": tool_call("c9", "nope", {})})
    client.post("/v1/check", content=b"{", headers={"content-type": "application/json"})
    text = client.get("/metrics").text
    assert 'policyguard_decisions_total{outcome="allow",stage="gate"} 1' in text
    assert 'policyguard_decisions_total{outcome="block",stage="unknown_tool"} 1' in text
    assert "policyguard_decision_seconds_count 2" in text
    assert 'policyguard_decision_seconds_bucket{le="+Inf"} 2' in text
    assert 'policyguard_verifier_tokens_total{kind="input"} 0' in text
    assert 'policyguard_http_responses_total{route="/v1/check",code="400"} 1' in text
    assert client.get("/metrics").headers["content-type"].startswith("text/plain; version=0.0.4")


def test_verifier_tokens_and_cost_are_counted(make_client: Any, tmp_path: Path) -> None:
    from policyguard.decision import Decision, Usage

    client = make_client()
    usage = Usage(input_tokens=100, cached_tokens=40, output_tokens=7, cost_usd=0.0125)
    client.service.metrics.decision(Decision.allow("verifier", usage=usage), 0.2)
    text = client.get("/metrics").text
    assert 'policyguard_verifier_tokens_total{kind="input"} 100' in text
    assert 'policyguard_verifier_tokens_total{kind="cached"} 40' in text
    assert "policyguard_verifier_cost_usd_total 0.012500" in text


def test_the_openapi_document_describes_the_check_endpoint(make_client: Any) -> None:
    document = make_client().get("/openapi.json").json()
    assert document["openapi"].startswith("3.")
    check = document["paths"]["/v1/check"]["post"]
    assert check["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("/CheckRequest")
    schemas = document["components"]["schemas"]
    assert {"CheckRequest", "Decision", "ErrorBody"} <= set(schemas)
    assert "unverified" in schemas["Decision"]["properties"] and "grant" in schemas["Decision"]["properties"]
    assert "/v1/execute" not in document["paths"]  # only with --demo-effects


class TestBearerToken:
    def test_v1_requires_the_token_when_one_is_set(self, make_client: Any) -> None:
        client = make_client(token=TOKEN)
        body = check_body(unique())
        assert client.post("/v1/check", json=body).status_code == 401
        wrong = client.post("/v1/check", json=body, headers={"authorization": "Bearer " + TOKEN[:-1] + "x"})
        assert wrong.status_code == 401 and wrong.headers["www-authenticate"] == "Bearer"
        assert client.post("/v1/check", json=body, headers={"authorization": "Basic " + TOKEN}).status_code == 401
        ok = client.post("/v1/check", json=body, headers={"authorization": f"Bearer {TOKEN}"})
        assert ok.status_code == 200 and ok.json()["outcome"] == "allow"

    def test_the_token_is_checked_before_the_body_is_read(self, make_client: Any) -> None:
        client = make_client(token=TOKEN)
        response = client.post("/v1/check", content=b"x" * 10, headers={"content-type": "text/plain"})
        assert response.status_code == 401

    def test_public_documents_need_no_token(self, make_client: Any) -> None:
        client = make_client(token=TOKEN)
        for path in ("/healthz", "/readyz", "/.well-known/jwks.json", "/metrics", "/openapi.json"):
            assert client.get(path).status_code == 200, path

    @pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.5", "example.com"])
    def test_serve_refuses_a_non_loopback_address_without_a_token(
        self, host: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        monkeypatch.delenv("POLICYGUARD_SERVE_TOKEN", raising=False)
        code = main(["serve", "--policy", str(POLICY), "--checklist", str(CHECKLIST), "--host", host, "--port", "0"])
        err = capsys.readouterr().err
        assert code == 2 and "POLICYGUARD_SERVE_TOKEN" in err and host in err

    @pytest.mark.parametrize("token", ["short", " padded-token-0123456789 ", "tøken-with-non-ascii-0123"])
    def test_a_weak_or_odd_token_is_refused_at_start(
        self, token: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        monkeypatch.setenv("POLICYGUARD_SERVE_TOKEN", token)
        code = main(["serve", "--policy", str(POLICY), "--checklist", str(CHECKLIST), "--port", "0"])
        assert code == 2 and "POLICYGUARD_SERVE_TOKEN" in capsys.readouterr().err

    @pytest.mark.parametrize("host", ["127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost"])
    def test_loopback_addresses_need_no_token(self, host: str) -> None:
        from policyguard.serve.auth import server_token

        assert server_token(host, None) is None


def test_a_bad_flag_value_is_one_line_naming_it(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = main(["serve", "--policy", str(POLICY), "--checklist", str(CHECKLIST), "--port", "0",
                 "--grant-key", str(tmp_path / "missing.pem")])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "missing.pem" in err and "Traceback" not in err


def test_a_check_that_takes_too_long_is_a_503_and_no_grant(make_client: Any) -> None:
    import threading

    client = make_client(decision_timeout_s=0.2)
    release = threading.Event()
    gate = client.service.base.gate

    class Slow:
        def check(self, *args: Any) -> Any:
            release.wait(5)
            return gate.check(*args)

    client.service.base.gate = Slow()
    try:
        response = client.post("/v1/check", json=check_body(unique()))
    finally:
        release.set()
    assert response.status_code == 503 and "do not run the call" in response.json()["error"]
    assert "policyguard_decision_timeouts_total 1" in client.get("/metrics").text


def test_a_store_that_hangs_makes_the_replica_unready_in_bounded_time(
    make_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading
    import time

    from policyguard.serve import app

    monkeypatch.setattr(app, "READY_TIMEOUT_S", 0.2)
    client = make_client()
    release = threading.Event()

    class Hanging:
        def is_denied(self, call_id: str) -> bool:
            release.wait(5)
            return False

    client.service.store.inner = Hanging()
    started = time.monotonic()
    try:
        ready = client.get("/readyz")
    finally:
        release.set()
    assert ready.status_code == 503 and ready.json()["store"] == "timeout"
    assert time.monotonic() - started < 3


def test_unknown_paths_and_methods_answer_json_not_html(make_client: Any) -> None:
    client = make_client()
    missing = client.get("/v2/check")
    wrong_method = client.get("/v1/check")
    assert missing.status_code == 404 and missing.json()["error"]
    assert wrong_method.status_code == 405 and wrong_method.json()["error"]
    assert client.post("/v1/execute", json={}).status_code == 404  # no --demo-effects: no executor


def test_the_verifier_judges_through_the_server_and_its_usage_is_counted(make_client: Any, tmp_path: Path) -> None:
    """A procedural rule the gate cannot prove goes to the verifier model (here a scripted one)."""
    from policyguard.trajectory.canonical import policy_version

    policy = "Refund only after the user says yes to the amount.\n"
    (tmp_path / "policy.md").write_text(policy)
    (tmp_path / "checklist.yaml").write_text(
        f'policy: {{name: refunds, version: "{policy_version(policy)}"}}\n'
        "tools:\n  issue_refund:\n    requirements:\n"
        "      - {id: confirmed, text: The user said yes to this amount., kind: procedural,\n"
        "         source: Refund only after the user says yes to the amount.}\n"
    )
    verdict = {"requirements": [{"id": "confirmed", "status": "NOT_MET", "evidence": "no yes", "evidence_messages": []}],
               "verdict": "BLOCK", "remediation": "Ask the user to confirm the amount first."}  # fmt: skip
    (tmp_path / "answers.json").write_text(json.dumps([{"response": verdict}]))
    client = make_client(
        policy=tmp_path / "policy.md",
        checklist=tmp_path / "checklist.yaml",
        model=f"scripted:{tmp_path / 'answers.json'}",
    )
    body = {
        "trajectory": [{"role": "user", "content": "refund 5"}],
        "call": tool_call("c1", "issue_refund", {"amount": 5}),
    }
    decision = client.post("/v1/check", json={**body, "format": "openai_chat"}).json()  # one user message: ambiguous
    assert decision["outcome"] == "block" and decision["stage"] == "verifier"
    assert decision["message"] == "Ask the user to confirm the amount first."
    text = client.get("/metrics").text
    assert 'policyguard_decisions_total{outcome="block",stage="verifier"} 1' in text
    tokens = decision["usage"]["input_tokens"]  # the scripted model counts 4 characters a token
    assert tokens > 0 and f'policyguard_verifier_tokens_total{{kind="input"}} {tokens}' in text
