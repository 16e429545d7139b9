"""What ptxas and the SASS say about a compiled kernel, without a GPU (CUDA-REPORT-1 … 4).

:func:`parse_ptxas` reads ptxas's ``-v`` report from the NVRTC log (registers, spill stores
and loads, stack frame, static shared memory, barriers per entry function);
:func:`parse_sass` splits ``cuobjdump -sass`` output into functions and counts opcodes (the
full opcode with its modifiers, ``LDGSTS.E.BYPASS.LTC128B.128``; a predicate ``@P0`` is not
part of it); :func:`main_loop` finds the innermost loop (a backward ``BRA``) with the most
instructions; :func:`occupancy` estimates resident blocks and warps per SM from the
per-architecture limits in :data:`ARCH_LIMITS`.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

__all__ = ["KernelReport", "ArchLimits", "ARCH_LIMITS", "parse_ptxas", "parse_sass", "main_loop", "occupancy",
           "Occupancy", "BUDGET_REGISTERS", "budget_violations"]

#: A kernel above this many registers per thread is over budget (CUDA-BUDGET-1): at 128,
#: two 256-thread blocks (16 warps, 25% occupancy) still fit in the 64K-register file.
BUDGET_REGISTERS = 128


@dataclass(frozen=True)
class ArchLimits:
    """Per-SM resources of one architecture (CUDA C Programming Guide, compute capabilities)."""
    registers_per_sm: int = 65536
    registers_per_thread: int = 255
    register_unit: int = 256  # registers are allocated per warp in units of this many
    threads_per_sm: int = 2048
    threads_per_block: int = 1024
    blocks_per_sm: int = 32
    smem_per_sm: int = 0
    smem_per_block: int = 0  # the largest a block may opt in to (dynamic above 48 KB)
    smem_reserved_per_block: int = 1024
    static_smem_per_block: int = 48 * 1024


ARCH_LIMITS = {
    "sm_80": ArchLimits(smem_per_sm=164 * 1024, smem_per_block=163 * 1024),
    "sm_90": ArchLimits(smem_per_sm=228 * 1024, smem_per_block=227 * 1024),
}


@dataclass
class KernelReport:
    """One ``__global__`` kernel of a build for one architecture.

    ``stack_bytes`` is the kernel's own stack frame; ``cumulative_stack_bytes`` adds what the
    functions it calls out of line use. ``shared_bytes`` is static shared memory (dynamic
    shared memory is a launch parameter). ``sass`` counts every instruction of the kernel,
    ``main_loop`` those of its innermost loop with the most instructions (the whole kernel
    when it has no loop).
    """
    name: str
    arch: str
    registers: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    stack_bytes: int = 0
    cumulative_stack_bytes: int = 0
    shared_bytes: int = 0
    barriers: int = 0
    sass: Counter = field(default_factory=Counter)
    main_loop: Counter = field(default_factory=Counter)

    def share(self, prefix: str, where: str = "main_loop") -> float:
        """Fraction of the instructions in ``where`` (``"main_loop"`` or ``"sass"``) whose
        opcode starts with ``prefix`` (0.0 for no instructions)."""
        counts = getattr(self, where)
        total = sum(counts.values())
        return sum(n for op, n in counts.items() if op.startswith(prefix)) / total if total else 0.0

    def as_dict(self) -> dict:
        return {"name": self.name, "arch": self.arch, "registers": self.registers,
                "spill_stores": self.spill_stores, "spill_loads": self.spill_loads,
                "stack_bytes": self.stack_bytes, "cumulative_stack_bytes": self.cumulative_stack_bytes,
                "shared_bytes": self.shared_bytes, "barriers": self.barriers,
                "sass": dict(sorted(self.sass.items())), "main_loop": dict(sorted(self.main_loop.items()))}


_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\d+)'")
_PROPS = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_FIELDS = {"barriers": re.compile(r"used (\d+) barriers"),
           "cumulative_stack_bytes": re.compile(r"(\d+) bytes cumulative stack size"),
           "shared_bytes": re.compile(r"(\d+) bytes smem")}


def parse_ptxas(log: str) -> dict[str, KernelReport]:
    """The entry functions of ptxas's ``-v`` report in ``log``, by name."""
    kernels, frames, entry, props = {}, {}, None, None
    for line in log.splitlines():
        if m := _ENTRY.search(line):
            entry = kernels[m.group(1)] = KernelReport(m.group(1), m.group(2))
        elif m := _PROPS.search(line):
            props = m.group(1)
        elif (m := _FRAME.search(line)) and props is not None:
            frames[props] = tuple(int(g) for g in m.groups())
        elif (m := _USED.search(line)) and entry is not None:
            entry.registers = int(m.group(1))
            for name, pattern in _FIELDS.items():
                if f := pattern.search(line):
                    setattr(entry, name, int(f.group(1)))
    for name, k in kernels.items():
        k.stack_bytes, k.spill_stores, k.spill_loads = frames.get(name, (0, 0, 0))
        k.cumulative_stack_bytes = max(k.cumulative_stack_bytes, k.stack_bytes)
    return kernels


_FUNCTION = re.compile(r"^\s*Function : (\S+)")
_INSTR = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P[T\d]+\s+)?([A-Z][A-Z0-9_.]*)(.*?);")


def parse_sass(text: str) -> dict[str, list[tuple[int, str, str]]]:
    """``cuobjdump -sass`` text as ``{function: [(address, opcode, operands), ...]}``."""
    out, current = {}, None
    for line in text.splitlines():
        if m := _FUNCTION.match(line):
            current = out.setdefault(m.group(1), [])
        elif current is not None and (m := _INSTR.match(line)):
            current.append((int(m.group(1), 16), m.group(2), m.group(3).strip()))
    return out


_TARGET = re.compile(r"0x([0-9a-f]+)\s*$")


def main_loop(instrs: list[tuple[int, str, str]]) -> Counter:
    """Opcode counts of the innermost loop with the most instructions: a loop is the address
    range from a backward branch's target to the branch; innermost means no other loop lies
    strictly inside it. The whole function when there is no loop."""
    loops = []
    for addr, opcode, operands in instrs:
        if opcode.startswith("BRA") and (m := _TARGET.search(operands)):
            target = int(m.group(1), 16)
            if target < addr:  # backward (a branch to itself is the end-of-code trap)
                loops.append((target, addr))
    inner = [(lo, hi) for lo, hi in loops
             if not any((lo2, hi2) != (lo, hi) and lo <= lo2 and hi2 <= hi for lo2, hi2 in loops)]
    if not inner:
        return Counter(op for _, op, _ in instrs)
    best = max(inner, key=lambda r: sum(1 for a, _, _ in instrs if r[0] <= a <= r[1]))
    return Counter(op for a, op, _ in instrs if best[0] <= a <= best[1])


@dataclass(frozen=True)
class Occupancy:
    """Resident blocks and warps per SM, the fraction of the SM's warps, and what limits it."""
    blocks: int
    warps: int
    fraction: float
    limiter: str


def occupancy(report: KernelReport, threads: int, dynamic_shared_bytes: int = 0) -> Occupancy:
    """Blocks of ``threads`` threads resident per SM on ``report.arch`` (CUDA-REPORT-4):
    the minimum over registers (per-warp allocation in units of 256), threads, the block
    limit and shared memory (static + dynamic + 1 KB reserved per block)."""
    lim = ARCH_LIMITS[report.arch]
    warps_per_block = -(-threads // 32)
    regs_per_warp = -(-max(report.registers, 1) * 32 // lim.register_unit) * lim.register_unit
    smem = report.shared_bytes + dynamic_shared_bytes
    limits = {
        "registers": lim.registers_per_sm // (regs_per_warp * warps_per_block),
        "threads": lim.threads_per_sm // (warps_per_block * 32),
        "blocks": lim.blocks_per_sm,
        "shared memory": lim.smem_per_sm // (smem + lim.smem_reserved_per_block) if smem else lim.blocks_per_sm,
    }
    if smem > lim.smem_per_block or threads > lim.threads_per_block:
        limits["shared memory" if smem > lim.smem_per_block else "threads"] = 0
    limiter = min(limits, key=limits.get)
    blocks = limits[limiter]
    warps = blocks * warps_per_block
    return Occupancy(blocks, warps, warps / (lim.threads_per_sm // 32), limiter)


def budget_violations(report: KernelReport, dynamic_shared_bytes: int = 0, library: bool = True) -> list[str]:
    """What ``report`` breaks of the budgets (CUDA-BUDGET-1): spills, stack (library kernels
    only), shared memory above the architecture's per-block maximum. Empty when within."""
    lim = ARCH_LIMITS[report.arch]
    out = []
    if report.spill_stores or report.spill_loads:
        out.append(f"spills {report.spill_stores} B stored / {report.spill_loads} B loaded")
    if library and report.stack_bytes:
        out.append(f"{report.stack_bytes} B stack")
    smem = report.shared_bytes + dynamic_shared_bytes
    if smem > lim.smem_per_block:
        out.append(f"{smem} B shared memory > {lim.smem_per_block} B per block on {report.arch}")
    return out
