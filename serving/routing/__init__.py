"""Prefix-cache-aware routing: which replica a request goes to (router.py, keys.py) and
what DSV4's prefix cache can give it there (cache_hits.py)."""
