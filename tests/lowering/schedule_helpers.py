"""The seeds' schedule snippets, verbatim, and how the Schedule IR tests run them.

Each ``SEED_*`` text is copied character for character from the seed (001 §4.3/§4.4, 003
§3.2/§3.3/§3.6); :func:`run_snippets` runs such texts as one script under ``import tessera``
(DESIGN §10), with only what the seed leaves to the reader supplied around them.
"""
import textwrap

from tessera_ref import schedule
from tessera_ref.runner import run_path

# Seed 001 §4.3's Schedule IR line, in a module that gives it operands and a kernel around it.
SEED_001_PREFETCH = '''"tessera.module"() ({
  "tessera.func"() ({
  ^bb0(%A: tensor<128x64xf32>, %B: tensor<64x128xf32>):
    %C = "tessera.schedule.kernel"(%A, %B) ({
    ^bb0(%a: tensor<128x64xf32>, %b: tensor<64x128xf32>):
      %smemA = "tessera.schedule.prefetch"(%a) {scope="shared", double_buffer=true} : (tensor<128x64xf32>) -> tensor<128x64xf32>
      %smemB = "tessera.schedule.prefetch"(%b) {scope="shared", double_buffer=true} : (tensor<64x128xf32>) -> tensor<64x128xf32>
      %c = "tessera.graph.matmul"(%smemA, %smemB) {transpose_a = false, transpose_b = false} : (tensor<128x64xf32>, tensor<64x128xf32>) -> tensor<128x128xf32>
      "tessera.schedule.yield"(%c) : (tensor<128x128xf32>) -> ()
    }) {async_copy = true, lanes = 128, op = "matmul", padding = 1, shared = true, stages = 2, swizzle = "none", tile = [64, 64, 32], vectorize = 1} : (tensor<128x64xf32>, tensor<64x128xf32>) -> tensor<128x128xf32>
    "tessera.return"(%C) : (tensor<128x128xf32>) -> ()
  }) {function_type = (tensor<128x64xf32>, tensor<64x128xf32>) -> tensor<128x128xf32>, sym_name = "gemm"} : () -> ()
}) : () -> ()'''

# Seed 001 §4.4, "Example (Python Tessera API)".
SEED_001_PIPELINE = '''with schedule.pipeline(double_buffer=True):
    A_tile = schedule.prefetch(A, scope="shared")
    B_tile = schedule.prefetch(B, scope="shared")
    C_tile = tile.mma_sync(A_tile, B_tile)
'''

# Seed 003 §3.2, "Example (vectorized load in Tessera)".
SEED_003_VEC_ADD = '''from tessera import schedule

@op.kernel
def vec_add(A, B, C):
    schedule.vectorize(4)   # load 4 elements per thread
    C[:] = A + B
'''

# Seed 003 §3.3, "Example (matmul with smem staging)".
SEED_003_MATMUL = '''@op.kernel
def matmul(A, B, C):
    schedule.tile((128, 128, 32))
    schedule.use_shared_memory(True, padding=1)
    schedule.async_copy(True)
    return A @ B + C
'''

# Seed 003 §3.6, the optimized FlashAttention schedule (top-level directives).
SEED_003_FLASH = '''schedule.tile((128, 128, 64))
schedule.use_shared_memory(True, padding=1)
schedule.async_copy(True)      # overlap load + compute
schedule.pipeline_stages(3)    # triple-buffering
'''

PRELUDE = '''import numpy as np
from tessera import op, schedule, tile
rng = np.random.default_rng(0)
'''


def as_kernel_body(snippet: str, header: str, footer: str) -> str:
    """``snippet`` as the body of the function ``header`` (a ``def`` line, decorators
    included), followed by ``footer`` (e.g. ``return C_tile``): indented, otherwise unchanged."""
    return header + "\n" + textwrap.indent(snippet, "    ") + textwrap.indent(footer, "    ") + "\n"


def run_snippets(tmp_path, *texts: str) -> dict:
    """Run ``PRELUDE`` and ``texts`` as one script (``tessera-ref run``); returns its globals.
    Top-level directives the script sets are forgotten afterwards (``schedule.reset()``)."""
    script = tmp_path / "snippets.py"
    script.write_text("\n".join((PRELUDE,) + texts))
    try:
        return run_path(str(script))
    finally:
        schedule.reset()
