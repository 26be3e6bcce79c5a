"""Observability: Prometheus metrics (process counters and store-derived gauges), `inspect` (why is this
job still in progress?) and the capacity model. Never document content, keys or signed URLs."""
