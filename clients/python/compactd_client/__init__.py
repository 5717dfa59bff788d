"""A typed Python client for compactd: the protocol's types (generated from its JSON Schema),
a synchronous client (``Client``) and an asyncio client (``AsyncClient``) over ``compactd
serve``'s stdio."""

from ._rpc import CompactdClosed, CompactdError
from .aio import AsyncClient
from .client import Cancellation, Client
from .protocol import ERROR_CODES, PROTOCOL_VERSION

__all__ = [
    "AsyncClient",
    "Cancellation",
    "Client",
    "CompactdClosed",
    "CompactdError",
    "ERROR_CODES",
    "PROTOCOL_VERSION",
]
__version__ = "0.1.0"
