"""RUNTIME-*: programs compiled once, resident on a device, replayed (docs/spec/runtime.md)."""
