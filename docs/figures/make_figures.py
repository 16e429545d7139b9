"""Make the figures in docs/figures: the demo's machine after its forward pass and training
step (``tessera-ref demo``, sections 2 and 5), drawn by ``sim.plot`` (SIM-PLOT-1).

Run from the repository root with matplotlib installed (``pip install ".[plot]"``)::

    python docs/figures/make_figures.py

The Sphinx build does not run it (the demo's steps take longer than a docs build should);
the PNGs it writes are committed.
"""
import os

from tessera_ref import demo, dist, sim

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> None:
    machine = sim.machine("GB200-NVL72", devices=72)
    with sim.use(machine):
        mesh = dist.mesh(devices=[f"cuda:{i}" for i in range(72)], axes=("dp", "tp", "pp"), shape=(4, 9, 2))
        x, Wqkv, Wo = (dist.tensor(shape, spec, mesh, dtype="f32", init="randn", seed=seed, name=name)
                       for seed, name, shape, spec in (
                           (0, "x", (4, 288, demo.HEADS * 64), dist.ShardSpec(("batch",), ("dp",))),
                           (1, "Wqkv", (demo.HEADS * 64, 3 * demo.HEADS * 64), dist.ShardSpec(("col",), ("tp",))),
                           (2, "Wo", (demo.HEADS * 64, demo.HEADS * 64), dist.ShardSpec(("row",), ("tp",)))))
        demo.tp_block(x, Wqkv, Wo)
        demo.loss_gradients(x)(Wqkv, Wo)
    for name, path in sim.plot(machine, HERE, figures=("timeline", "roofline")).items():
        os.replace(path, os.path.join(HERE, f"demo_{name}.png"))
        print("wrote", os.path.join("docs", "figures", f"demo_{name}.png"))


if __name__ == "__main__":
    main()
