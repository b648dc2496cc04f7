"""Read a Prometheus /metrics page into samples and add them up (test helper)."""

import httpx
from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, tuple], float]


def scrape(url: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(httpx.get(url, timeout=10).text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def total(samples: Samples, name: str, **match: str) -> float:
    """Sum of ``name`` over every series whose labels include ``match``."""
    return sum(
        value
        for (n, labels), value in samples.items()
        if n == name and all(dict(labels).get(k) == v for k, v in match.items())
    )
