"""The guard as an HTTP service: ``policyguard serve`` on loopback, asked with the standard library only.

Run from the checkout: ``python examples/http_serve.py`` (needs ``pip install -c constraints.txt -e '.[serve]'``).

The script starts ``policyguard serve`` on a free loopback port, as a separate process, and plays
an agent written in any language: before each refund it POSTs the dialogue so far and the pending
call to ``/v1/check``, and runs the call only when the answer's ``outcome`` is ``allow``. The
verifier model is a recorded verdict (``--model scripted:...``); use ``--model openai/gpt-4.1-mini``
(with ``pip install -c constraints.txt -e '.[litellm]'`` and ``OPENAI_API_KEY``) for a real one, or ``--model none``
for the gate alone.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import urllib.request
from typing import Any

import refund_desk as desk

DESK = desk.HERE
SERVE = [
    *(sys.executable, "-m", "policyguard", "serve"),  # the `policyguard serve` command
    *("--policy", str(DESK / "policy.md"), "--checklist", str(DESK / "checklist.yaml")),
    *("--model", f"scripted:{DESK / 'verdicts' / 'http_serve.json'}"),  # real: --model openai/gpt-4.1-mini
    *("--host", "127.0.0.1", "--port", "0", "--log-level", "warning"),  # port 0: any free port
]


def start_server() -> tuple[subprocess.Popen[str], str]:
    """Start the server and read the URL it listens on from its output."""
    server = subprocess.Popen(SERVE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert server.stdout is not None
    for line in server.stdout:
        if "listening on " in line:  # from here on, pass the server's log lines on to stderr
            threading.Thread(target=shutil.copyfileobj, args=(server.stdout, sys.stderr), daemon=True).start()
            return server, line.split("listening on ", 1)[1].split()[0]
    raise SystemExit(f"policyguard serve exited ({server.wait()}) before it listened")


def post(url: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    data = json.dumps(body).encode()
    request = urllib.request.Request(f"{url}{path}", data=data, headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


def tool_call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def called(call: dict[str, Any], content: str) -> list[dict[str, Any]]:
    """The two OpenAI Chat messages a call and its result add to the dialogue."""
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": content},
    ]


def run(dialogue: list[dict[str, Any]], call_id: str, name: str, **arguments: Any) -> None:
    """A read: no check needed (the checklist says it is read-only), its JSON result is a fact."""
    dialogue += called(tool_call(call_id, name, **arguments), json.dumps(desk.TOOLS[name](**arguments)))


def refund(url: str, dialogue: list[dict[str, Any]], call: dict[str, Any]) -> None:
    """Before a refund the agent asks the guard, and runs the call only on allow."""
    session = "customer-ada"  # one session id per conversation: the server keeps its record
    decision = post(url, "/v1/check", {"trajectory": dialogue, "call": call, "session_id": session})
    arguments = json.loads(call["function"]["arguments"])
    print(f"  /v1/check answers {decision['outcome']} (decided by the {decision['stage']})")
    if decision["outcome"] != "allow":  # anything but an allow: do not run the call
        desk.report("issue_refund", arguments, False, decision["message"])
        dialogue += called(call, f"Error: {decision['message']}")  # a blocked call reads back as failed
        return
    result = json.dumps(desk.issue_refund(**arguments))
    desk.report("issue_refund", arguments, True, result)
    post(url, "/v1/results", {"session_id": session, "call_id": call["id"], "content": result, "is_error": False})
    dialogue += called(call, result)


def main() -> None:
    server, url = start_server()
    try:
        print(f"policyguard serve is listening on {url}")
        dialogue: list[dict[str, Any]] = [
            {"role": "user", "content": "Hi, I'm ada@example.com. Order O1 arrived broken; please refund 120 USD."}
        ]
        run(dialogue, "call_1", "find_customer", email="ada@example.com")
        run(dialogue, "call_2", "get_order", order_id="O1")
        refund(url, dialogue, tool_call("call_3", "issue_refund", order_id="O1", amount=120))  # above captured
        dialogue.append({"role": "assistant", "content": "I can refund up to 80.00 USD. Shall I refund 80.00 USD?"})
        dialogue.append({"role": "user", "content": "Yes, please refund 80.00 USD."})
        refund(url, dialogue, tool_call("call_4", "issue_refund", order_id="O1", amount=80))
        print(f"refunds that ran: {desk.REFUNDS}")
    finally:
        server.terminate()
        server.wait(timeout=30)
        print("server stopped")


if __name__ == "__main__":
    main()
