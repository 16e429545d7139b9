"""The IR levels below Graph IR that ``inspect_ir`` prints (DESIGN §3)."""

#: Schedule IR, Tile IR and the target (CUDA C) text, in lowering order.
LEVELS = ("schedule", "tile", "target")
