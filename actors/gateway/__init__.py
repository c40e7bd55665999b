"""The Kafka wire protocol gateway: Kafka's own clients reach rayqueue through it.

``server`` (TCP framing and connections, no Ray), ``codec`` (kio, and its sharp edges),
``versions`` (the supported-versions table and ApiVersions), one handler module per API
family (``metadata``, ``produce``, ``fetch``, ``offsets``, ``admin``, ``transactions``),
``errors`` (exceptions to Kafka error codes), ``listeners`` (``listeners`` /
``advertised.listeners``) and ``actor`` (the per-broker Ray actor).
"""
