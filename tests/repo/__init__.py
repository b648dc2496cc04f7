"""Checks over the whole tree: docs, import graph, pins, string seams, the suite's tools."""
