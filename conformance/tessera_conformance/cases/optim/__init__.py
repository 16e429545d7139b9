"""OPTIM-*: optimizers, schedules and clipping as Graph IR programs (docs/spec/optim.md)."""
