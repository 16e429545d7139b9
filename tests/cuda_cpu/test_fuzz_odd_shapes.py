"""The random-program fuzzer on the CUDA-on-CPU harness at odd and prime sizes and long K (issue
33): a small derandomized budget in CI, plus two programs every run tries (a matmul with a
prime K past 2,048, a softmax and a column sum of odd sizes); a disagreement (other bits, or a
finding of the harness) is shrunk to a script, as the conformance suite's fuzz case does."""
import numpy as np
from hypothesis import HealthCheck, example, given, settings

from tessera_conformance import ORACLE
from tessera_conformance.fuzz import Program, Step, compare, programs

#: Programs a run draws (each kernel a g++ build, so few).
EXAMPLES = 8
_RNG = np.random.default_rng(33)
LONG_K_MATMUL = Program({"storage": "f32"}, (_RNG.uniform(-8, 8, (3, 2053)), _RNG.uniform(-8, 8, (2053, 5))),
                        (Step("matmul", (0, 1)),))
ODD_ROWS = Program({"storage": "bf16", "accum": "f32"}, (_RNG.uniform(-8, 8, (67, 129)),),
                   (Step("softmax", (0,), (("axis", -1),)), Step("sum", (1,), (("axis", 0),))))


def test_odd_shaped_programs_agree_with_the_oracle_on_cuda_cpu(tmp_path):
    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    @given(programs(odd=True, max_steps=4))
    @example(LONG_K_MATMUL)
    @example(ODD_ROWS)
    def check(program):
        compare(program, "cuda-cpu", ORACLE, "one-device", tmp_path / "fuzz")

    check()
