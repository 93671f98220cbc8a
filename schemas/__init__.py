"""Canonical event model, event-type registry and ClickHouse DDL."""
