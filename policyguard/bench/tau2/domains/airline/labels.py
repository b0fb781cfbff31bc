"""tau2 airline gold that disagrees with the written policy: reported apart by the replay and the sims."""

from __future__ import annotations

_DELAY = (
    '"If the user complains about delayed flights in a reservation and wants to change or cancel the '
    "reservation, the agent can offer a certificate as a gesture after confirming the facts and changing or "
    'cancelling the reservation"'
)
POLICY_CONTRADICTING_GOLD: dict[str, str] = {
    "2": f"gold sends noah_muller_9847 a $50 delay certificate (4OG6T3, 1 passenger) with no change or "
    f"cancellation of the reservation; the policy says {_DELAY}",
    "7": "gold changes basic-economy XEHM4B to economy, then cancels it: economy, no insurance, booked "
    '> 24 h ago; the policy says "Otherwise, flight can be cancelled if any of the following is true" '
    "(booked within 24 hours, airline-cancelled flight, business, or insurance covering the reason) - "
    "none holds (tau2-bench issues #156, #224)",
    "9": "gold cancels NQNU5R whose segments have already flown (landed 2024-05-13/14); the policy says "
    '"If any portion of the flight has already been flown, the agent cannot help and transfer is needed." '
    "(tau2-bench issues #156, #224)",
    "27": f"gold sends ethan_martin_2396 a $150 delay certificate ($50 x 3 passengers, HAT039 delayed) with "
    f"no change or cancellation of the reservation; the policy says {_DELAY}",
    "37": "gold cancels NQNU5R whose segments have already flown (landed 2024-05-13/14); the policy says "
    '"If any portion of the flight has already been flown, the agent cannot help and transfer is needed." '
    "(tau2-bench issues #156, #224)",
    "38": f"gold sends noah_muller_9847 a $50 delay certificate (4OG6T3, 1 passenger) with no change or "
    f"cancellation of the reservation; the policy says {_DELAY}",
}

# Found by the replay suite (not in the tau2-bench issue list): the gold write
# disagrees with the written policy. Still counted as a false block, explained.
GOLD_DISAGREEMENTS: dict[str, str] = {
    "33": "gold adds 2 bags to HXDUBJ as 2 non-free bags, but yara_garcia_1905 is a gold member in economy "
    "with 1 passenger: the policy gives 3 free bags, so 0 should be non-free",
    "29": "gold changes round trip VA5SGQ from DTW-LGA to DTW-JFK (HAT169 DTW->JFK, HAT033 JFK->DTW): the "
    "destination changes, but the policy lets flights be modified only without changing the origin, "
    "destination, and trip type",
}
