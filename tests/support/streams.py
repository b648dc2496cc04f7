"""How a streamed completion ended, as the client saw it (failure tests)."""

import threading
from collections.abc import Callable

import httpx


def stream_ending(
    base: str,
    headers: dict[str, str],
    body: dict,
    timeout: float,
    started: threading.Semaphore | None = None,
    on_open: Callable[[httpx.Response], None] | None = None,
) -> str:
    """Stream ``body`` to ``/v1/completions``: "complete" (a finish_reason arrived),
    "error event", "closed without finish (STATUS)", "hang" or "connection error NAME".
    ``started`` is released at the first line: the request is on an engine; ``on_open``
    sees the response (its headers) before that."""
    finish = None
    try:
        with httpx.stream(
            "POST",
            f"{base}/v1/completions",
            json={**body, "stream": True},
            headers=headers,
            timeout=timeout,
        ) as response:
            if on_open is not None:
                on_open(response)
            for line in response.iter_lines():
                if started is not None:
                    started.release()
                    started = None
                if '"error"' in line:
                    return "error event"
                if '"finish_reason":"length"' in line.replace(" ", ""):
                    finish = "length"
        return "complete" if finish else f"closed without finish ({response.status_code})"
    except httpx.TimeoutException:
        return "hang"
    except httpx.HTTPError as exc:
        return f"connection error {type(exc).__name__}"


def wait_streaming(started: threading.Semaphore, count: int, endings: list[str]) -> None:
    """Until ``count`` streams have had their first line. A fixed sleep was not enough
    with the rest of the suite on the same cores (CI): a stream still queued when its
    replica was killed waited for the replacement, and the client timed out."""
    for n in range(count):
        assert started.acquire(timeout=180), f"{n} of {count} streams started; {endings}"
