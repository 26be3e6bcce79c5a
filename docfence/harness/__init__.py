"""Runs docfence for real from the outside, for benchmarks and tests alike (neither imports the other):
throwaway PostgreSQL databases, `docfence worker` processes started with an environment and stopped
with real signals, W processes released together, a no-op queue load, and the fault runs: a cluster of
real `serve`, `worker` and `reconcile` processes, a loopback TCP proxy that black-holes, half-drops or
cuts traffic, a private PostgreSQL server to restart, and the judge of both promises from outside
(fault_runs, fault_scenarios, fault_outages). Only benchmarks and tests use it."""
