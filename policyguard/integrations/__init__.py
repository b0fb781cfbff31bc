"""Adapters that put the guard where agents already run.

Each submodule wraps one framework or protocol and imports it lazily: importing
``policyguard`` (or this package) loads none of them. Install the matching extra
(from a checkout: ``pip install -c constraints.txt -e '.[agents]'``, ``[langchain]``, ``[mcp]``) before
importing a submodule. :mod:`.openai_loop` (:class:`~policyguard.GuardedTools`)
needs no extra.

May use: the guard and everything below it. Never another edge (serve,
review, cli, bench).
"""
