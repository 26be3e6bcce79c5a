"""Tests that run the documentation's examples and the all-pairs feature matrix (conftest.py)."""
