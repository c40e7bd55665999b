"""The controller: brokers, topics, replica placement, leaders, ISR, epochs, configs.

:mod:`.actor` is the Ray actor, ``Controller``; it is imported on first use of the name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from actors.controller.actor import Controller


def __getattr__(name: str) -> Any:
    if name == "Controller":
        from actors.controller.actor import Controller

        return Controller
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Controller"]
