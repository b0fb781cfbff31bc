"""What reading a dialogue into a Trajectory costs: ``to_trajectory`` per format and length.

Run: ``python benchmarks/bench_convert.py [--runs 50] [--lengths 50,500,2000] [--only NAME]``
(no network, no model). Compare two versions of the library by running this
file with each on ``PYTHONPATH``, interleaved.

The dialogues have the shape of a tau2 airline task: user and assistant text,
assistant turns that call ``get_reservation_details`` with JSON-string
arguments, and tool results that are JSON reservation records of about 1.5 KB.
Cases (``format="auto"``, as ``Guard.check`` and the HTTP server read them):

- ``chat-N``: an OpenAI Chat message list of N plain dicts;
- ``chat-sdk-500``: the same with each assistant message an ``openai`` SDK
  ``ChatCompletionMessage`` object, as a loop appends ``choice.message``
  (skipped when the ``openai`` package is not installed);
- ``anthropic-500``: an Anthropic message list (``tool_use``/``tool_result`` blocks);
- ``responses-500``: an OpenAI Responses item list (``function_call`` items).

Printed per case: the median over ``--runs`` conversions in microseconds, and
that median divided by the number of input messages.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from policyguard.trajectory.formats import to_trajectory

SYSTEM = "You are a customer service agent for an airline. Follow the airline policy below. " * 8


def record(n: int) -> str:
    """A reservation record as a tool returns it: JSON text of about 1.5 KB."""
    flights = [
        {
            "origin": "LAS",
            "destination": "ATL",
            "flight_number": f"HAT{n % 900 + i:03d}",
            "date": "2024-05-19",
            "price": 168 + i,
            "status": "available",
        }
        for i in range(4)
    ]
    passengers = [{"first_name": "Daiki", "last_name": "Muller", "dob": "1954-07-06"} for _ in range(3)]
    payments = [{"payment_id": f"credit_card_{n}", "amount": 846}]
    data = {
        "reservation_id": f"R{n:05d}",
        "user_id": "daiki_muller_1116",
        "origin": "LAS",
        "destination": "ATL",
        "flight_type": "round_trip",
        "cabin": "economy",
        "flights": flights,
        "passengers": passengers,
        "payment_history": payments,
        "created_at": "2024-05-09T13:51:38",
        "total_baggages": 1,
        "nonfree_baggages": 0,
        "insurance": "no",
        "notes": "x" * 400,
    }
    return json.dumps(data)


def _rounds(length: int, first: list[Any], round_of: Callable[[int], list[Any]]) -> list[Any]:
    """``first``, then ``round_of(0)``, ``round_of(1)``... cut to ``length`` items."""
    out = list(first)
    n = 0
    while len(out) < length:
        out += round_of(n)
        n += 1
    return out[:length]


def _arguments(n: int) -> str:
    return json.dumps({"reservation_id": f"R{n:05d}", "user_id": "daiki_muller_1116"})


def chat(length: int) -> list[dict[str, Any]]:
    """``length`` Chat messages: a system prompt, then user / call / result / answer rounds."""

    def round_of(n: int) -> list[dict[str, Any]]:
        call_id = f"call_{n:06d}"
        function = {"name": "get_reservation_details", "arguments": _arguments(n)}
        return [
            {"role": "user", "content": f"Please look at my reservation R{n:05d}."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": call_id, "type": "function", "function": function}],
            },
            {"role": "tool", "tool_call_id": call_id, "content": record(n)},
            {"role": "assistant", "content": f"Reservation R{n:05d} is a round trip from LAS to ATL."},
        ]

    return _rounds(length, [{"role": "system", "content": SYSTEM}], round_of)


def chat_sdk(length: int) -> list[Any]:
    """:func:`chat` with every assistant message an ``openai`` SDK object."""
    from openai.types.chat import ChatCompletionMessage

    return [
        ChatCompletionMessage.model_validate(item) if item["role"] == "assistant" else item for item in chat(length)
    ]


def anthropic(length: int) -> list[dict[str, Any]]:
    """``length`` Anthropic messages (the system prompt is a separate argument)."""

    def round_of(n: int) -> list[dict[str, Any]]:
        call_id = f"toolu_{n:06d}"
        use = {
            "type": "tool_use",
            "id": call_id,
            "name": "get_reservation_details",
            "input": {"reservation_id": f"R{n:05d}", "user_id": "daiki_muller_1116"},
        }
        return [
            {"role": "user", "content": f"Please look at my reservation R{n:05d}."},
            {"role": "assistant", "content": [{"type": "text", "text": "Let me look that up."}, use]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id, "content": record(n)}]},
            {"role": "assistant", "content": [{"type": "text", "text": f"Reservation R{n:05d} is a round trip."}]},
        ]

    return _rounds(length, [], round_of)


def responses(length: int) -> list[dict[str, Any]]:
    """``length`` Responses items: messages, ``function_call`` and ``function_call_output`` items."""

    def round_of(n: int) -> list[dict[str, Any]]:
        call_id = f"call_{n:06d}"
        return [
            {"role": "user", "content": [{"type": "input_text", "text": f"Please look at reservation R{n:05d}."}]},
            {
                "type": "function_call",
                "call_id": call_id,
                "name": "get_reservation_details",
                "arguments": _arguments(n),
            },
            {"type": "function_call_output", "call_id": call_id, "output": record(n)},
            {"role": "assistant", "content": [{"type": "output_text", "text": f"Reservation R{n:05d} is fine."}]},
        ]

    return _rounds(length, [{"role": "developer", "content": SYSTEM}], round_of)


def cases(lengths: list[int]) -> dict[str, tuple[Any, dict[str, Any]]]:
    """Case name -> (input list, keyword arguments for ``to_trajectory``)."""
    out: dict[str, tuple[Any, dict[str, Any]]] = {f"chat-{n}": (chat(n), {}) for n in lengths}
    try:
        out["chat-sdk-500"] = (chat_sdk(500), {})
    except ImportError:
        pass
    out["anthropic-500"] = (anthropic(500), {"system": SYSTEM})
    out["responses-500"] = (responses(500), {})
    return out


def median_us(convert: Callable[[], Any], runs: int) -> float:
    convert()  # warm up (pydantic builds its validators on first use)
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        convert()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--lengths", default="50,500,2000", help="Chat dialogue lengths, comma-separated")
    parser.add_argument("--only", help="run only the case of this name")
    args = parser.parse_args()
    lengths = [int(n) for n in args.lengths.split(",")]
    for name, (messages, kwargs) in cases(lengths).items():
        if args.only and name != args.only:
            continue
        us = median_us(lambda messages=messages, kwargs=kwargs: to_trajectory(messages, **kwargs), args.runs)
        print(f"{name:>15}: {us:10.1f} us per conversion, {us / len(messages):6.2f} us per message")


if __name__ == "__main__":
    main()
