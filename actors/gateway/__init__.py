"""The Kafka wire protocol gateway: Kafka's own clients reach rayqueue through it.

``server`` (TCP framing and connections, no Ray), ``codec`` (kio, and its sharp edges),
``versions`` (the supported-versions table and ApiVersions), ``broker_view`` (the broker's
view of the cluster that every handler shares), ``handlers/`` (one module per API family,
each translating wire requests into ``actors/protocol.py`` requests), ``errors`` (actor
failures to Kafka error codes), ``listeners`` (``listeners`` / ``advertised.listeners``)
and ``actor`` (the per-broker Ray actor). It imports ``actors`` and ``storage`` only.
"""
