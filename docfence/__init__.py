"""docfence: fenced, deadline-bounded PDF jobs (watermarking and report rendering)."""

__version__ = "0.1.0"
