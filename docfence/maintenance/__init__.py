"""Reconciler services: each is a small config plus `run_once() -> result`, and a thin loop."""
