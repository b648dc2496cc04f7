"""Read a Prometheus /metrics page into samples and add them up (test helper)."""

from serving.monitoring.metrics_page import Samples, scrape

__all__ = ["scrape", "total"]


def total(samples: Samples, name: str, **match: str) -> float:
    """Sum of ``name`` over every series whose labels include ``match``."""
    return sum(
        value
        for (n, labels), value in samples.items()
        if n == name and all(dict(labels).get(k) == v for k, v in match.items())
    )
