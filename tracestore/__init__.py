"""tracestore: a self-hostable traceset service, its Python client and command line."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["Client", "__version__"]


def __getattr__(name: str) -> object:
    # The client is imported lazily so `import tracestore` stays cheap for the CLI.
    if name == "Client":
        from tracestore.client import Client

        return Client
    raise AttributeError(name)
