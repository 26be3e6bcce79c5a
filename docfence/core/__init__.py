"""The leaf of docfence: states, the transition table, records, errors and the clock (stdlib only)."""
