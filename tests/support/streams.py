"""How a streamed completion ended, as the client saw it (failure tests)."""

import httpx


def stream_ending(base: str, headers: dict[str, str], body: dict, timeout: float) -> str:
    """Stream ``body`` to ``/v1/completions``: "complete" (a finish_reason arrived),
    "error event", "closed without finish (STATUS)", "hang" or "connection error NAME"."""
    finish = None
    try:
        with httpx.stream(
            "POST",
            f"{base}/v1/completions",
            json={**body, "stream": True},
            headers=headers,
            timeout=timeout,
        ) as response:
            for line in response.iter_lines():
                if '"error"' in line:
                    return "error event"
                if '"finish_reason":"length"' in line.replace(" ", ""):
                    finish = "length"
        return "complete" if finish else f"closed without finish ({response.status_code})"
    except httpx.TimeoutException:
        return "hang"
    except httpx.HTTPError as exc:
        return f"connection error {type(exc).__name__}"
