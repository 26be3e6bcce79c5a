"""Benchmarks behind `docfence bench ...`: each prints one JSON object of measured figures."""
