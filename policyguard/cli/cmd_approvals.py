"""``policyguard approvals list|show ID|approve ID|deny ID --store URL``: the approval queue for a person.

Exit codes: 0 done; 1 the queue refused the decision (unknown id, already
decided, expired); 2 bad input (a store URL that names no store, or a SQLite
file that does not exist: these commands never create a store).
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from policyguard.approvals.queue import ApprovalRequest, SQLApprovalQueue

STATUS_CHOICES = ("pending", "approved", "denied", "expired", "used", "all")


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "approvals",
        help="list, show, approve or deny calls waiting for a person",
        description=(
            "Calls that failed only approvable requirements wait in the approval queue of a store. "
            "An approval lets the same call (same tool, arguments, principal, policy) run once; a deny is final."
        ),
    )
    sub = parser.add_subparsers(dest="approvals_command", metavar="ACTION", required=True)

    listing = sub.add_parser("list", help="requests in the queue, oldest first")
    _store(listing)
    listing.add_argument(
        "--status", choices=STATUS_CHOICES, default="pending", help="which requests to list (default pending)"
    )
    listing.add_argument("--json", action="store_true", help="print the requests as a JSON list")
    listing.set_defaults(func=_list)

    show = sub.add_parser("show", help="one request: the call, every requirement with evidence, the dialogue")
    show.add_argument("id", help="the request id (apr-...)")
    _store(show)
    show.add_argument("--json", action="store_true", help="print the request as JSON")
    show.set_defaults(func=_show)

    for verdict, text in (("approve", "let this exact call run once"), ("deny", "refuse this call for good")):
        action = sub.add_parser(verdict, help=text)
        action.add_argument("id", help="the request id (apr-...)")
        _store(action)
        action.add_argument("--reason", default=None, help="why (recorded with the decision and in the trace)")
        action.add_argument(
            "--reviewer",
            default=None,
            help="who decides (default: $POLICYGUARD_REVIEWER, else the login name)",
        )
        action.add_argument(
            "--trace", default=None, help=f"append the {verdict} event to this JSONL trace (one writer at a time)"
        )
        action.set_defaults(func=_decide, verdict=verdict)


def _store(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store", required=True, help="the store URL, e.g. sqlite:///path.db or postgresql://user@host/db"
    )


def _open(url: str) -> SQLApprovalQueue:
    """The queue in an existing store: these commands read and decide, they never create a store."""
    from policyguard.approvals.url import open_approvals

    return open_approvals(url, create=False)


def _list(args: argparse.Namespace) -> int:
    queue = _open(args.store)
    try:
        status = None if args.status == "all" else args.status
        requests = queue.all(status=status)
    finally:
        queue.close()
    if args.json:
        print(json.dumps([r.model_dump(mode="json") for r in requests], indent=2, ensure_ascii=False))
        return 0
    now = time.time()
    for request in requests:
        print(
            f"{request.id}  {request.status:<8}  {_age(now - request.created_at):>6}  {request.tool}  "
            f"principal={request.principal or '-'}  {_brief(request.arguments)}  {_outcomes(request)}"
        )
    print(f"{len(requests)} request(s)", file=sys.stderr)
    return 0


def _show(args: argparse.Namespace) -> int:
    queue = _open(args.store)
    try:
        request = queue.get(args.id)
    finally:
        queue.close()
    if request is None:
        print(f"policyguard: no approval request {args.id!r} in {args.store}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(request.model_dump(mode="json"), indent=2, ensure_ascii=False))
        return 0
    print(_render(request))
    return 0


def _decide(args: argparse.Namespace) -> int:
    from policyguard.approvals.flow import decide
    from policyguard.approvals.queue import ApprovalError
    from policyguard.audit.trace import Trace
    from policyguard.errors import ConfigError

    reviewer = args.reviewer or os.environ.get("POLICYGUARD_REVIEWER") or getpass.getuser()
    queue = _open(args.store)
    try:
        trace = Trace(args.trace) if args.trace else None
    except OSError as exc:
        queue.close()
        raise ConfigError(f"{args.trace}: cannot open the trace file: {exc.strerror or exc}") from None
    try:
        done = decide(queue, args.id, args.verdict, reviewer, args.reason, trace=trace)
    except ApprovalError as exc:
        print(f"policyguard: {args.verdict} refused: {exc}", file=sys.stderr)
        return 1
    finally:
        queue.close()
        if trace is not None:
            trace.close()
    print(f"{done.id}: {done.status} by {done.reviewer}" + (f" ({done.reason})" if done.reason else ""))
    return 0


def _render(request: ApprovalRequest) -> str:
    lines = [
        f"request   {request.id}  ({request.status})",
        f"call      {request.tool} {json.dumps(request.arguments, ensure_ascii=False, sort_keys=True)}",
        f"          call id {request.call_id}, args sha256 {request.args_sha256}",
        f"principal {request.principal or '-'}",
        f"policy    {request.policy_version}",
        f"created   {_when(request.created_at)}, expires {_when(request.expires_at)}",
    ]
    if request.decided_at is not None:
        lines.append(f"decided   {_when(request.decided_at)} by {request.reviewer}: {request.reason or '-'}")
    if request.used_at is not None:
        lines.append(f"used      {_when(request.used_at)} by call {request.used_call_id}")
    lines.append("requirements")
    for result in request.requirements:
        mark = " (approvable)" if result.approvable else ""
        lines.append(f"  {result.status:<14} {result.id}{mark}")
        if result.source:
            lines.append(f"                 policy: {result.source!r}")
        if result.evidence:
            lines.append(f"                 evidence: {result.evidence}")
    if request.remediation:
        lines.append(f"remediation  {request.remediation}")
    lines.append("dialogue")
    for line in request.dialogue:
        text = line.content.replace("\n", " ")
        lines.append(f"  {line.role:>9}: {text}")
    return "\n".join(lines)


def _outcomes(request: ApprovalRequest) -> str:
    """``failed=`` the requirements shown NOT_MET, then ``unverified=`` those nobody judged, if any.

    An unverified requirement did not fail: in a gate-only guard it is simply
    not judged, so it is not listed as something the reviewer waives.
    """
    failed = ",".join(r.id for r in request.requirements if r.status == "NOT_MET") or "-"
    unverified = ",".join(r.id for r in request.requirements if r.status == "UNVERIFIED")
    return f"failed={failed}" + (f"  unverified={unverified}" if unverified else "")


def _brief(arguments: dict[str, object]) -> str:
    text = json.dumps(arguments, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= 80 else text[:79] + "…"


def _age(seconds: float) -> str:
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


def _when(epoch: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(epoch))
