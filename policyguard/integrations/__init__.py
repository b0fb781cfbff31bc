"""Adapters that put the guard where agents already run.

Each submodule wraps one framework or protocol and imports it lazily: importing
``policyguard`` (or this package) loads none of them. Install the matching extra
(``pip install 'policyguard-agents[agents]'``, ``[langchain]``, ``[mcp]``) before
importing a submodule.
"""
