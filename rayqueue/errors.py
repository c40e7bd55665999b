"""Every rayqueue error: one class per Kafka error code, with ``code`` and ``retriable``.

The classes are defined in ``storage.errors`` (the lowest layer that raises them) and
re-exported here; this is the module users import them from.
"""

import storage.errors as _errors
from rayqueue.consumer_coordinator import IllegalStateError
from storage.errors import *  # noqa: F403

__all__ = [*_errors.__all__, "IllegalStateError"]
