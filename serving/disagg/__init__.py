"""Prefill/decode disaggregation: a preset's ``disaggregation`` section (``section``), the
prefill and decode engines' Ray Serve LLM configs with their KV connector (``configs``),
and the Serve application on Ray Serve LLM's P/D servers behind our gateway (``app``)."""
