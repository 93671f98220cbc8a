"""Turn what producers send into canonical events, redacted, or into dead letters."""
