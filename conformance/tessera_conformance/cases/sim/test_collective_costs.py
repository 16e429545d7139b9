"""SIM-COLL-1 … SIM-COLL-4: what the collectives of a program run on the backend cost on the
simulated machine — tier, buffer size, algorithm and alpha-beta time, re-derived here."""
import numpy as np
import pytest

from tessera_ref import dist, op, sim
from tessera_ref.errors import SimError
from tessera_conformance import assert_bits, clause, eager, oracle_only

from ._reference import AXES, PRESETS, choose, formula, groups_of, mesh_of

#: The cases about the library itself: n/a on every backend but the oracle.
LIBRARY = oracle_only("the simulated machine's model (presets, costs, timelines, memory, reports) is the "
                      "library's; no backend computes it")

S = dist.ShardSpec


def _events_by_call(machine):
    """``{call id: [comm events]}`` in recording order."""
    out: dict = {}
    for e in machine.timeline.events:
        if e.stream == "comm":
            out.setdefault(e.args["call"], []).append(e)
    return out


def _program(mesh, axis, cols=3):
    """The collectives over ``axis``: ``[(kind, per-rank buffer n by SIM-COLL-1, call)]``."""
    p = mesh.axis_size(axis)
    rows = 2 * p
    block = rows // p * cols * 4               # one rank's block of a (rows, cols) f32 split over axis
    whole = rows * cols * 4                    # the whole (rows, cols) f32 buffer
    split = S(("row",), (axis,))
    c = [np.full((rows, cols), r + 1, np.float32) for r in range(p)]

    def pending():
        return dist.from_shards([c[mesh.coords(d)[axis]] for d in range(mesh.size)], S(None, (axis,), reduce="sum"),
                                mesh)

    def x():
        return dist.tensor((rows, cols * p), split, mesh, data=np.ones((rows, cols * p), np.float32))

    return [("all_reduce", whole, lambda: dist.all_reduce(pending(), axis)),
            ("reduce_scatter", whole, lambda: dist.reduce_scatter(pending(), axis, dim=0)),
            ("all_gather", p * block * p, lambda: dist.all_gather(x(), axis)),   # output: p × the input shard
            ("broadcast", block * p, lambda: dist.broadcast(x(), axis, root=0)),
            ("all_to_all", block * p, lambda: dist.all_to_all(x(), axis, 1, 0)),
            ("permute", block * p, lambda: dist.permute(x(), axis, 1))]


@pytest.mark.parametrize("preset", ["H100", "GB200-NVL72"])
@clause("SIM-COLL-1", "SIM-COLL-2", "SIM-COLL-3")
def test_each_collective_costs_its_formula_on_its_tier(backend, mesh_shape, preset):
    """For every collective over every mesh axis: each group's tier (one NVLink domain or the
    network), the buffer ``n`` as NCCL counts it, the fastest algorithm and its time and bytes
    sent; a group of one costs nothing."""
    mesh = mesh_of(mesh_shape)
    axes = AXES[:len(mesh_shape)]
    for axis in axes:
        for kind, n, call in _program(mesh, axis):
            m = sim.Machine(preset, mesh.size)

            def go():
                with sim.use(m):
                    call()
                return np.zeros(1, np.float32)

            eager(backend, go)
            events = [e for e in m.timeline.events if e.stream == "comm"]
            p = mesh.axis_size(axis)
            if p == 1:
                assert sum(e.duration for e in events) == 0, (kind, axis)
                continue
            assert {e.device for e in events} == set(range(mesh.size)), (kind, axis)
            for e in events:
                group = next(g for g in groups_of(mesh_shape, axis) if e.device in g)
                alg, t, time, sent = choose(kind, group, n, preset)
                assert (e.args["kind"], e.args["bytes"], e.args["tier"], e.args["algorithm"]) == (kind, n, t, alg), \
                    (kind, axis, e.device)
                assert e.duration == pytest.approx(time, rel=1e-12) and e.args["bytes_sent"] == pytest.approx(sent)


@LIBRARY
@pytest.mark.parametrize("kind", ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all",
                                  "permute", "send", "recv"])
@pytest.mark.parametrize("p", [2, 3, 5, 8])
@clause("SIM-COLL-2")
def test_the_formula_table(backend, kind, p):
    """Every kind and algorithm: ``T`` and ``S`` of the table (``L = ⌈log₂ p⌉``)."""
    from tessera_ref.sim import alpha_beta
    for alg in sim.ALGORITHMS[kind]:
        t, s = alpha_beta(kind, alg, p, 1_000_000, 1e-6, 100e9)
        want_t, want_s = formula(kind, alg, p, 1_000_000, 1e-6, 100e9)
        assert t == pytest.approx(want_t, rel=1e-12) and s == pytest.approx(want_s, rel=1e-12), alg


@LIBRARY
@clause("SIM-COLL-2")
def test_the_worked_example(backend):
    """Ring all_gather of 1,000,000 bytes over 4 ranks, α = 1 µs, β = 100 GB/s: 10.5 µs, 750,000 B."""
    from tessera_ref.sim import alpha_beta
    t, s = alpha_beta("all_gather", "ring", 4, 1_000_000, 1e-6, 100e9)
    assert t == pytest.approx(10.5e-6, rel=1e-12) and s == 750_000


@LIBRARY
@clause("SIM-COLL-3")
def test_naming_the_algorithm(backend):
    """A named algorithm is used; it must be the kind's, and nvls only inside one domain."""
    m = sim.Machine("H100", 16)
    (c,) = m.record_collective("all_reduce", [tuple(range(8))], 1 << 30, algorithm="ring")
    spec = PRESETS["H100"]
    assert c.algorithm == "ring" and c.time == pytest.approx(formula("all_reduce", "ring", 8, 1 << 30,
                                                                     spec["nvlink_alpha"], spec["nvlink"])[0])
    for kind, group, alg in (("all_gather", range(8), "nvls"), ("all_reduce", range(16), "nvls"),
                             ("broadcast", range(8), "direct")):
        with pytest.raises(SimError):
            m.record_collective(kind, [tuple(group)], 1024, algorithm=alg)


@LIBRARY
@pytest.mark.parametrize("kind, group, n", [
    ("all_reduce", range(16), 1024),            # small across domains: tree
    ("all_reduce", range(16), 1 << 30),         # large across domains: ring
    ("all_reduce", range(8), 1 << 30),          # large in one domain: nvls
    ("all_gather", (0, 1), 1 << 20),            # p = 2: ring and tree tie, ring listed first
    ("reduce_scatter", range(8), 1 << 20),      # recursive halving never slower
    ("broadcast", range(8), 1 << 10),
])
@clause("SIM-COLL-3")
def test_the_model_picks_the_fastest(backend, kind, group, n):
    """The least ``T`` on the group's tier, no nvls on the network, ties to the first listed."""
    c = sim.collective_cost(kind, tuple(group), n, "H100")
    alg, t, time, _ = choose(kind, tuple(group), n, "H100")
    assert (c.algorithm, c.tier) == (alg, t) and c.time == pytest.approx(time, rel=1e-12)


@clause("SIM-COLL-4")
def test_what_is_not_modeled(backend, mesh_shape):
    """Collectives never overlap compute on a device; a group spanning domains is charged
    entirely at the network tier; the reduction's arithmetic is not charged; and the values are
    NUM-RED-3's whatever algorithm the model picked."""
    mesh = mesh_of(mesh_shape)
    axis = max(AXES[:len(mesh_shape)], key=lambda a: mesh.axis_size(a))
    p = mesh.axis_size(axis)
    rng = np.random.default_rng(140)
    c = [(rng.standard_normal((4, 2 * p)) * 2.0 ** rng.integers(-20, 21, (4, 2 * p))).astype(np.float32)
         for _ in range(p)]
    want = c[0].copy()
    for v in c[1:]:
        want = want + v
    values = []
    for preset in ("H100", "GB200-NVL72"):
        m = sim.Machine(preset, mesh.size)

        def go():
            with sim.use(m):
                x = dist.tensor((4, 2 * p), None, mesh, data=np.ones((4, 2 * p), np.float32))
                y = op.exp(x)
                pend = dist.from_shards([c[mesh.coords(d)[axis]] for d in range(mesh.size)],
                                        S(None, (axis,), reduce="sum"), mesh)
                out = dist.all_reduce(pend, axis)
                del y
            return out

        values.append(eager(backend, go))
        compute = [e for e in m.timeline.events if e.stream == "compute"]
        comm = [e for e in m.timeline.events if e.stream == "comm"]
        assert {e.name for e in compute} == {"exp"}  # no charge for the fold
        for e in comm:
            assert e.start >= max(x.end for x in compute if x.device == e.device) - 1e-18
            group = next(g for g in groups_of(mesh_shape, axis) if e.device in g)
            spans = len({d // PRESETS[preset]["domain"] for d in group}) > 1
            assert e.args["tier"] == ("network" if spans else "nvlink")
            assert e.duration == pytest.approx(choose("all_reduce", group, e.args["bytes"], preset)[2], rel=1e-12)
    for v in values:
        assert_bits(v, want)
