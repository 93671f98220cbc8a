"""The runtimes: shells that feed the pure processors (embedded log + chDB, or Faust on
Kafka + ClickHouse) and write what they return."""
