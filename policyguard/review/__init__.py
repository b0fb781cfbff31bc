"""The review console: the approval queue and the decision browser for the people who own the policy.

``policyguard review --store URL [--trace FILE...]`` serves it (``[review]`` extra:
Starlette and uvicorn). Server-rendered HTML, no build step, no script: every
page is a Jinja2 template with autoescaping and ``StrictUndefined``. Login is by
a token from ``POLICYGUARD_REVIEW_TOKEN``; approve and deny are POSTs carrying a
per-session CSRF token; it listens on loopback unless told otherwise.

May use: approvals, audit and the layers below them. Never another edge.
"""
