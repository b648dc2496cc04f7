"""Model classes the overrides register with vLLM (imported lazily by vLLM's registry)."""
