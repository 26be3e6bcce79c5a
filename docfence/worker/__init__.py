"""The worker: claim -> child process renders -> heartbeat -> fenced commit; discard when stale."""
