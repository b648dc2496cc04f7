"""The speculation guard: its settings (one schema for presets and engines) and its
per-step decision, free of vLLM imports; the patch that wires it in is in patches/."""
