"""The first stages of the flow: a preset (typed, with user overrides) and what it becomes
for the engine and for Ray Serve (Ray Serve LLM's LLMConfig, the Serve config file, the
proxy's and the JIT caches' environment)."""
