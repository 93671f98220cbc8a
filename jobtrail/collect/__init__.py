"""Live sources: collectors that follow a scheduler or an API and produce canonical events."""
