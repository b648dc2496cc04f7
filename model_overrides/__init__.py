"""DSV4 overrides for vLLM, shipped as a vLLM general plugin.

Each override is a registry entry with a probe (does the installed vLLM need it?),
a patch and a verify step. Only what the installed vLLM needs is applied.
"""
