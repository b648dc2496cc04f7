"""Read a Prometheus /metrics page into samples (prometheus-client's parser)."""

import httpx
from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
# Ray exports application (engine) metrics about every 10 s: wait this long to see a change.
RAY_EXPORT_PERIOD_S = 12.0


def scrape(url: str, timeout: float = 30) -> Samples:
    samples: Samples = {}
    for family in text_string_to_metric_families(httpx.get(url, timeout=timeout).text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples
