"""Tests of the vLLM plugin (model_overrides/), one folder per source folder; the plugin
end to end (engines and vLLM's server on the golden model) sits here."""
