"""The metrics reference: every metric the sidecar serves at ``/metrics``, read from a
``MetricsObserver`` with every collector registered (the manager's gauges, the MCP servers'
and a shared store's figures), as a sidecar with metrics on registers them."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from prometheus_client.metrics import MetricWrapperBase

from cleveragents.sidecar.observability.metrics import MetricsObserver

__all__ = ["LABELS", "Metric", "metrics", "page"]

#: What each label's values are (the metrics' own help strings say what they count).
LABELS = {
    "state": "how the run ended: `completed`, `failed` or `cancelled`",
    "stop_reason": "the run's stop reason (`final_answer`, `max_iterations`, `deadline`...)",
    "tool": "the tool's name; `_unknown` for a name no tool has (the model makes those up)",
    "outcome": "`success`, or the error kind (`timeout`, `invalid_arguments`, `denied`...)",
    "profile": "the run's LLM profile",
    "type": "`input` or `output` tokens",
    "server": "the MCP server's name (`[mcp_servers.NAME]`)",
}


@dataclass(frozen=True)
class Metric:
    """One metric as Prometheus scrapes it."""

    name: str
    type: str
    help: str
    labels: tuple[str, ...]


def _observer() -> MetricsObserver:
    observer = MetricsObserver()
    idle = SimpleNamespace(dropped_watchers=0, refused_runs=0)
    manager: Any = SimpleNamespace(live_runs=list, stats=idle)
    observer.track(manager)
    observer.track_mcp(lambda: [])
    observer.track_fleet(lambda: (0, 0, 0))
    return observer


def _labels(metric: object) -> tuple[str, ...]:
    # prometheus_client keeps label names on the metric objects without a public accessor.
    return tuple(getattr(metric, "_labelnames", ()))


def metrics() -> list[Metric]:
    """Every metric, in the order the registry collects them."""
    observer = _observer()
    wrappers = {
        family.name: _labels(wrapper)
        for wrapper in vars(observer).values()
        if isinstance(wrapper, MetricWrapperBase)
        for family in wrapper.describe()
    }
    found = []
    for family in observer.registry.collect():
        suffix = "_total" if family.type == "counter" else ""
        labels = wrappers.get(family.name, _labels(family))
        found.append(Metric(family.name + suffix, family.type, family.documentation, labels))
    return found


def page() -> str:
    """The metrics reference page, in Markdown."""
    out = [
        "# Metrics",
        "",
        "Generated from the collectors the sidecar registers when `metrics_listen` is set (see",
        "[Operations: metrics](../operations/metrics.md) for scraping and its token).",
        "",
        "| metric | type | labels | what it counts |",
        "|---|---|---|---|",
    ]
    for metric in metrics():
        labels = ", ".join(f"`{label}`" for label in metric.labels) or "none"
        out.append(f"| `{metric.name}` | {metric.type} | {labels} | {metric.help} |")
    out += ["", "## Labels", "", "| label | values |", "|---|---|"]
    out += [f"| `{label}` | {meaning} |" for label, meaning in LABELS.items()]
    return "\n".join(out) + "\n"
