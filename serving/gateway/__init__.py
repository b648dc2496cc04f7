"""What the gateway adds to Ray Serve LLM's OpenAI ingress: API keys and request metrics."""
