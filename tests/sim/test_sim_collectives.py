"""Alpha-beta collective costs against hand-computed values (SIM-COLL-1 … SIM-COLL-3).

Unless said otherwise: alpha = 1 us, beta = 100 GB/s, n = 1,000,000 bytes, so n/beta = 10 us.
"""
import pytest

from tessera_ref.errors import SimError
from tessera_ref.sim import ALGORITHMS, alpha_beta, collective_cost, get_preset, tier_of

A, B, N = 1e-6, 1e11, 1_000_000
US = 1e-6


@pytest.mark.parametrize("kind,algorithm,p,time_us,sent", [
    # ring all_reduce: 2(p-1) alpha + 2(p-1)/p n/beta
    ("all_reduce", "ring", 2, 2 + 10, 1_000_000),       # 2 + 2*(1/2)*10
    ("all_reduce", "ring", 4, 6 + 15, 1_500_000),       # 6 + 2*(3/4)*10
    ("all_reduce", "ring", 8, 14 + 17.5, 1_750_000),    # 14 + 2*(7/8)*10
    # recursive doubling: log2(p) (alpha + n/beta)
    ("all_reduce", "tree", 2, 1 + 10, 1_000_000),
    ("all_reduce", "tree", 4, 2 + 20, 2_000_000),
    ("all_reduce", "tree", 8, 3 + 30, 3_000_000),
    ("all_reduce", "tree", 5, 3 + 30, 3_000_000),       # ceil(log2 5) = 3 rounds
    # NVLS: 2 alpha + n/beta whatever p
    ("all_reduce", "nvls", 8, 2 + 10, 1_000_000),
    # ring all_gather / reduce_scatter: (p-1) alpha + (p-1)/p n/beta
    ("all_gather", "ring", 2, 1 + 5, 500_000),
    ("all_gather", "ring", 4, 3 + 7.5, 750_000),
    ("all_gather", "ring", 8, 7 + 8.75, 875_000),
    ("reduce_scatter", "ring", 4, 3 + 7.5, 750_000),
    # recursive doubling / halving: log2(p) alpha + (p-1)/p n/beta
    ("all_gather", "tree", 8, 3 + 8.75, 875_000),
    ("reduce_scatter", "tree", 4, 2 + 7.5, 750_000),
    # broadcast: chain (p-1) alpha + n/beta; binomial log2(p) (alpha + n/beta), the root sending log2(p) n
    ("broadcast", "ring", 8, 7 + 10, 1_000_000),
    ("broadcast", "tree", 8, 3 * 11, 3_000_000),
    # all_to_all pairwise: (p-1) alpha + (p-1)/p n/beta
    ("all_to_all", "direct", 4, 3 + 7.5, 750_000),
    # one message: alpha + n/beta
    ("permute", "direct", 8, 1 + 10, 1_000_000),
    ("send", "direct", 2, 1 + 10, 1_000_000),
])
def test_formulas(kind, algorithm, p, time_us, sent):
    t, s = alpha_beta(kind, algorithm, p, N, A, B)
    assert t == pytest.approx(time_us * US, rel=1e-12)
    assert s == pytest.approx(sent, rel=1e-12)


def test_a_group_of_one_costs_nothing():
    for kind, algs in ALGORITHMS.items():
        for alg in algs:
            assert alpha_beta(kind, alg, 1, N, A, B) == (0.0, 0.0)
    c = collective_cost("all_reduce", (3,), 1 << 20, "H100")
    assert c.time == 0 and c.tier == "local"


def test_tiers():
    h100 = get_preset("H100")
    assert tier_of(range(8), h100) == "nvlink"
    assert tier_of(range(8, 16), h100) == "nvlink"
    assert tier_of((7, 8), h100) == "network"
    assert tier_of(range(72), "GB200-NVL72") == "nvlink"
    assert tier_of((0, 72), "GB200-NVL72") == "network"


def test_in_domain_all_reduce_on_h100_uses_nvlink_numbers():
    # 1 GiB over 8 GPUs of one HGX H100: nvls, 2 alpha + n/beta with alpha 1 us, beta 450 GB/s
    c = collective_cost("all_reduce", range(8), 2**30, "H100")
    assert (c.tier, c.algorithm) == ("nvlink", "nvls")
    assert c.time == pytest.approx(2e-6 + 1073741824 / 450e9)
    assert c.bytes_sent == 2**30


def test_cross_domain_all_reduce_uses_the_network():
    # 16 H100s in two domains: ring on 50 GB/s, alpha 5 us: 30*5 us + 2*(15/16)*2^30/50e9 s
    c = collective_cost("all_reduce", range(16), 2**30, "H100")
    assert (c.tier, c.algorithm) == ("network", "ring")
    assert c.time == pytest.approx(150e-6 + 2 * 15 / 16 * 1073741824 / 50e9)


@pytest.mark.parametrize("kind", ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all"])
def test_a_cross_domain_group_is_slower_than_an_in_domain_group(kind):
    inside = collective_cost(kind, range(8), 64 << 20, "H100")
    across = collective_cost(kind, (0, 1, 2, 3, 8, 9, 10, 11), 64 << 20, "H100")
    assert across.tier == "network" and inside.tier == "nvlink"
    assert across.time > inside.time


def test_algorithm_choice_rule():
    # small buffer across domains: tree (4 alpha) beats ring (30 alpha)
    small = collective_cost("all_reduce", range(16), 1024, "H100")
    assert small.algorithm == "tree"
    assert small.time == pytest.approx(4 * 5e-6 + 4 * 1024 / 50e9)
    # large buffer across domains: ring's 2(p-1)/p n beats tree's log2(p) n
    assert collective_cost("all_reduce", range(16), 1 << 30, "H100").algorithm == "ring"
    # equal times go to the algorithm listed first: p=2 all_gather, ring = tree = alpha + n/(2 beta)
    assert collective_cost("all_gather", (0, 1), 1 << 20, "H100").algorithm == "ring"


def test_forced_algorithm_is_used():
    c = collective_cost("all_reduce", range(8), 1 << 30, "H100", algorithm="ring")
    assert c.algorithm == "ring"
    assert c.time == pytest.approx(14e-6 + 2 * 7 / 8 * 2**30 / 450e9)


def test_bad_requests():
    with pytest.raises(SimError, match="unknown collective"):
        collective_cost("allreduce", range(8), 1, "H100")
    with pytest.raises(SimError, match="no algorithm 'nvls'"):
        collective_cost("all_gather", range(8), 1, "H100", algorithm="nvls")
    with pytest.raises(SimError, match="spans domains"):
        collective_cost("all_reduce", range(16), 1, "H100", algorithm="nvls")
    with pytest.raises(SimError, match="non-negative integer"):
        collective_cost("all_reduce", range(8), -5, "H100")


def test_a100_switches_do_not_reduce():
    # NVSwitch 2 has no NVLink SHARP: 1 GiB over the 8 GPUs of a DGX A100 goes by ring,
    # 2·7 α + 2·(7/8)·n/β with α 1 µs, β 300 GB/s — not nvls's 2 α + n/β
    c = collective_cost("all_reduce", range(8), 1 << 30, "A100")
    assert (c.tier, c.algorithm) == ("nvlink", "ring")
    assert c.time == pytest.approx(14e-6 + 2 * 7 / 8 * 2**30 / 300e9)
    with pytest.raises(SimError, match="do not reduce"):
        collective_cost("all_reduce", range(8), 1 << 30, "A100", algorithm="nvls")
