"""Runs docfence for real from the outside, for benchmarks and tests alike (neither imports the other):
throwaway PostgreSQL databases, `docfence worker` processes started with an environment and stopped
with real signals, W processes released together, a no-op queue load. Only benchmarks and tests use it."""
