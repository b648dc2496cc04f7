"""`dsv4-serve bench`: load generation, statistics and reports for OpenAI endpoints."""
