"""Consort process groups from Python, through consortd (doc/protocol.md).

Pure standard library. Client is blocking; AsyncClient is for asyncio.
"""

from .client import Client, ConsortError, Disconnected, Member, Refused
from .aio import AsyncClient, AsyncMember
from .wire import Block, Cast, Exit, Flow, Lost, Refusal, Send, Sent, View
from . import log

__all__ = [
    "Client",
    "Member",
    "AsyncClient",
    "AsyncMember",
    "ConsortError",
    "Refused",
    "Disconnected",
    "View",
    "Cast",
    "Send",
    "Block",
    "Flow",
    "Exit",
    "Sent",
    "Lost",
    "Refusal",
    "log",
]
__version__ = "0.1.0"
