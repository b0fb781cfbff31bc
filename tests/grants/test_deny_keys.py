"""Which denies refuse which calls: the keys a deny writes against the keys a later call reads.

A deny refuses a later call exactly when both are the same issued call: the same
session, call id, tool and argument hash, at the same place, or at a place one
of them does not know (``""``, the stricter case). A deny under the bare call id
refuses every call with that id in its session.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from policyguard.enforcement.scoped import IDENTITY_PREFIX, CallIdentity, deny_key

identities = st.builds(
    CallIdentity,
    session_id=st.sampled_from([None, "A", "B", ""]),
    call_id=st.sampled_from(["call_0", "call_1", "s1:A:call_0"]),
    tool=st.sampled_from(["issue_refund", "get_order"]),
    args_sha256=st.sampled_from(["a" * 64, "b" * 64]),
    place=st.sampled_from(["", "1", "3", "any", "unplaced"]),
)


def refuses(denied: CallIdentity, later: CallIdentity) -> bool:
    return bool(set(denied.deny_records()) & set(later.deny_lookups()))


@settings(max_examples=400, deadline=None)
@given(identities, identities)
def test_a_deny_refuses_a_later_call_exactly_when_it_is_the_same_issued_call(
    denied: CallIdentity, later: CallIdentity
) -> None:
    same_call = (denied.session_id, denied.call_id, denied.tool, denied.args_sha256) == (
        later.session_id,
        later.call_id,
        later.tool,
        later.args_sha256,
    )
    same_place = denied.place == later.place or "" in (denied.place, later.place)
    assert refuses(denied, later) == (same_call and same_place)


@settings(max_examples=200, deadline=None)
@given(identities)
def test_a_deny_under_the_bare_call_id_refuses_every_call_with_that_id_in_its_session(later: CallIdentity) -> None:
    assert deny_key(later.session_id, later.call_id) in later.deny_lookups()


@given(identities)
def test_a_deny_of_an_identity_never_writes_a_bare_call_id(denied: CallIdentity) -> None:
    """Identity keys are digests under their own prefix: no call id the model writes is spelled by accident."""
    assert all(
        key.startswith(IDENTITY_PREFIX) and len(key) == len(IDENTITY_PREFIX) + 64 for key in denied.deny_records()
    )


def test_another_conversations_call_5_is_another_call() -> None:
    a = CallIdentity("conv-a", "call_5", "issue_refund", "a" * 64, "3")
    b = CallIdentity("conv-b", "call_5", "issue_refund", "a" * 64, "3")
    assert not refuses(a, b) and not refuses(b, a)
    assert deny_key("conv-a", "call_5") not in b.deny_lookups()
