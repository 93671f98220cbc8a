"""The real engines on loopback for development, tests and benchmarks: a KRaft Kafka broker from
Maven Central's jars and a ClickHouse server (chDB behind the HTTP interface)."""
