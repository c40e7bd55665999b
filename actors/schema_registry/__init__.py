"""rayqueue's schema registry: Confluent's REST API over state kept in the ``_schemas`` topic.

``state`` is the plain state machine (subjects, versions, ids, configs, modes), ``records``
the topic's key and value format, ``avro_format`` / ``json_format`` / ``protobuf_format`` (with
``json_compat``) the formats and their compatibility rules, ``formats`` their common entry,
``rest`` the HTTP API, ``auth`` basic authentication and the ACL checks, ``actor`` the Ray shell
that loads the topic and serves HTTP. No module here imports Ray except ``actor``.
"""
