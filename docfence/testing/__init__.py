"""Conformance suites and factories used by tests; never imported by production code."""
