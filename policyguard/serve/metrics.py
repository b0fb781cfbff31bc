"""Prometheus text exposition (format 0.0.4), written by hand: a few counters and one histogram.

Kept dependency-free on purpose: the metrics are few, and the format is
stable and documented (https://prometheus.io/docs/instrumenting/exposition_formats/).
Every metric is per process; Prometheus sums replicas.
"""

from __future__ import annotations

import threading
from collections import defaultdict

from policyguard.decision import Decision

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class Metrics:
    """Thread-safe counters for decisions, verifier usage, store errors and HTTP responses."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.decisions: dict[tuple[str, str], int] = defaultdict(int)
        self.buckets = [0] * len(LATENCY_BUCKETS)
        self.latency_count = 0
        self.latency_sum = 0.0
        self.tokens: dict[str, int] = {"input": 0, "cached": 0, "output": 0}
        self.cost_usd = 0.0
        self.store_errors: dict[str, int] = defaultdict(int)
        self.responses: dict[tuple[str, int], int] = defaultdict(int)
        self.executions: dict[str, int] = defaultdict(int)
        self.shadow_blocks: dict[str, int] = defaultdict(int)  # requirement id -> calls it would have blocked
        self.timeouts = 0

    def decision(self, decision: Decision, seconds: float) -> None:
        with self._lock:
            self.decisions[(decision.outcome, decision.stage)] += 1
            for requirement in decision.shadow_blocked:
                self.shadow_blocks[requirement] += 1
            self.latency_count += 1
            self.latency_sum += seconds
            for index, bound in enumerate(LATENCY_BUCKETS):
                if seconds <= bound:
                    self.buckets[index] += 1
            usage = decision.usage
            if usage is not None:
                self.tokens["input"] += usage.input_tokens
                self.tokens["cached"] += usage.cached_tokens
                self.tokens["output"] += usage.output_tokens
                self.cost_usd += usage.cost_usd or 0.0

    def timeout(self) -> None:
        with self._lock:
            self.timeouts += 1

    def store_error(self, operation: str) -> None:
        with self._lock:
            self.store_errors[operation] += 1

    def response(self, route: str, status: int) -> None:
        with self._lock:
            self.responses[(route, status)] += 1

    def execution(self, reason: str) -> None:
        with self._lock:
            self.executions[reason] += 1

    def render(self) -> str:
        """The exposition text: HELP and TYPE lines, then samples."""
        with self._lock:
            lines = [
                "# HELP policyguard_decisions_total Decisions by outcome and deciding stage.",
                "# TYPE policyguard_decisions_total counter",
            ]
            for (outcome, stage), count in sorted(self.decisions.items()):
                labels = f'outcome="{_label(outcome)}",stage="{_label(stage)}"'
                lines.append(f"policyguard_decisions_total{{{labels}}} {count}")
            lines += [
                "# HELP policyguard_decision_seconds Time to decide one call (parsing excluded).",
                "# TYPE policyguard_decision_seconds histogram",
            ]
            for bound, count in zip(LATENCY_BUCKETS, self.buckets, strict=True):
                lines.append(f'policyguard_decision_seconds_bucket{{le="{bound}"}} {count}')
            lines.append(f'policyguard_decision_seconds_bucket{{le="+Inf"}} {self.latency_count}')
            lines.append(f"policyguard_decision_seconds_sum {self.latency_sum:.6f}")
            lines.append(f"policyguard_decision_seconds_count {self.latency_count}")
            lines += [
                "# HELP policyguard_verifier_tokens_total Verifier model tokens by kind.",
                "# TYPE policyguard_verifier_tokens_total counter",
            ]
            for kind, count in self.tokens.items():
                lines.append(f'policyguard_verifier_tokens_total{{kind="{kind}"}} {count}')
            lines += [
                "# HELP policyguard_verifier_cost_usd_total Verifier model cost in US dollars (where priced).",
                "# TYPE policyguard_verifier_cost_usd_total counter",
                f"policyguard_verifier_cost_usd_total {self.cost_usd:.6f}",
                "# HELP policyguard_decision_timeouts_total Checks answered 503 because no decision came in time.",
                "# TYPE policyguard_decision_timeouts_total counter",
                f"policyguard_decision_timeouts_total {self.timeouts}",
                "# HELP policyguard_store_errors_total Store operations that failed (each failed closed).",
                "# TYPE policyguard_store_errors_total counter",
            ]
            for operation, count in sorted(self.store_errors.items()):
                lines.append(f'policyguard_store_errors_total{{operation="{_label(operation)}"}} {count}')
            lines += [
                "# HELP policyguard_executions_total Demo executor results by reason.",
                "# TYPE policyguard_executions_total counter",
            ]
            for reason, count in sorted(self.executions.items()):
                lines.append(f'policyguard_executions_total{{reason="{_label(reason)}"}} {count}')
            lines += [
                "# HELP policyguard_shadow_blocks_total Calls a shadowed requirement would have blocked, let through.",
                "# TYPE policyguard_shadow_blocks_total counter",
            ]
            for requirement, count in sorted(self.shadow_blocks.items()):
                lines.append(f'policyguard_shadow_blocks_total{{requirement="{_label(requirement)}"}} {count}')
            lines += [
                "# HELP policyguard_http_responses_total HTTP responses by route and status code.",
                "# TYPE policyguard_http_responses_total counter",
            ]
            for (route, status), count in sorted(self.responses.items()):
                lines.append(f'policyguard_http_responses_total{{route="{_label(route)}",code="{status}"}} {count}')
        return "\n".join(lines) + "\n"
