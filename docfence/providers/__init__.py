"""Outside renderers reached over HTTP (declarative config, client) and the bounded poller that
observes their jobs. Imports only docfence.core, httpx and the standard library."""

from docfence.providers.client import ProviderClient, parse_retry_after
from docfence.providers.config import (
    JsonPath,
    PollPolicy,
    ProviderConfig,
    Secret,
    docfence_preset,
    from_dict,
)
from docfence.providers.observation import Observation, ObservationKind, ObservationSink
from docfence.providers.poller import BoundedPoller, PollOutcome, PollOutcomeCode, StatusSource

__all__ = [
    "BoundedPoller",
    "JsonPath",
    "Observation",
    "ObservationKind",
    "ObservationSink",
    "PollOutcome",
    "PollOutcomeCode",
    "PollPolicy",
    "ProviderClient",
    "ProviderConfig",
    "Secret",
    "StatusSource",
    "docfence_preset",
    "from_dict",
    "parse_retry_after",
]
