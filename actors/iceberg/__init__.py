"""Iceberg topics: each partition leader translates its committed records into an Apache
Iceberg table (the topic's), which Spark, Ray Data, DuckDB and pyiceberg read without the
brokers.

The pieces, none of which imports Ray: ``config`` (the topic keys, the broker's catalog
settings, the partition spec's syntax), ``layout`` (the table's columns and how a batch of
records becomes an Arrow table), ``values`` (``value_schema_id_prefix``: the schema
registry's Avro and JSON schemas as Iceberg columns), ``table`` (pyiceberg: the catalog,
the tables, the translated offsets in the snapshot summary and the optimistic commit),
``translator`` (one leader partition's translation) and ``translators`` (a host's
translators, driven by its background tick).
"""
