"""CKPT-*: sharded checkpoints saved on one mesh and restored on another (docs/spec/checkpoint.md)."""
