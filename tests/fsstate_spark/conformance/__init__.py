"""Conformance suite (placeholder docstring)."""
