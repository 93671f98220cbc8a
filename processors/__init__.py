"""Pure processors: state + event -> new state + outputs. Runtimes live in `runtime/`."""
