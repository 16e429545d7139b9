"""The AArch64 fiber switch of the CUDA-on-CPU harness (tessera_switch.h, CUDA-CPU-2), run on
any machine: ``aarch64_switch_program.cpp`` (freestanding, static stacks) is compiled with the
shipped header for aarch64 by zig (PyPI ``ziglang``) and run in the unicorn CPU emulator (PyPI
``unicorn``) from its ``_start`` to a sentinel return address; the results it leaves in memory
are checked against values computed here. Planted bugs in a copy of the header show that the
checks can fail. Both packages are in the ``test`` extra: without them these tests fail (they
are not skipped), saying what to install. Also here: the header's ``#error`` for a third
architecture, the backend's BackendError off x86-64 and AArch64, and (slow) a GEMM and a row
reduction with the whole twin compiled for aarch64 under qemu-user (``qemu_aarch64.py``;
Debian packages, so skipped where they are missing).
"""
from __future__ import annotations

import platform
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tessera_ref.backends.cuda.cpu import build
from tessera_ref.errors import BackendError

PROGRAM = Path(__file__).with_name("aarch64_switch_program.cpp")
HEADER = build.TWIN_DIR / "tessera_switch.h"
# the program's sizes, read from its source (one definition)
SIZES = {k: int(v) for k, v in re.findall(r"(\w+) = (\d+)", re.search(r"constexpr int (.*);", PROGRAM.read_text())[1])}
NF, ROUNDS, LAPS, DATA = SIZES["NF"], SIZES["ROUNDS"], SIZES["LAPS"], SIZES["DATA"]
FLAGS = ("-target", "aarch64-linux-musl", "-std=c++17", "-O2", "-ffreestanding", "-nostdlib", "-static", "-fno-pie",
         "-fno-exceptions", "-fno-rtti", "-fno-stack-protector", "-fno-asynchronous-unwind-tables")
SENTINEL, STACK = 0x6000_0000, 0x7000_0000


def _tools():
    try:
        import unicorn  # noqa: F401
        import ziglang  # noqa: F401
    except ImportError as e:
        pytest.fail(f"the AArch64 switch test needs the PyPI packages 'ziglang' (the cross compiler) and 'unicorn' "
                    f"(the emulator): pip install ziglang unicorn, or pip install -e '.[test]' ({e})")


def zig(*args) -> subprocess.CompletedProcess:
    """``zig c++ args`` (PyPI ziglang)."""
    _tools()
    return subprocess.run([sys.executable, "-m", "ziglang", "c++", *args], capture_output=True, text=True, timeout=300)


def compile_program(tmp_path: Path, header_text: str | None = None) -> Path:
    """The program built for aarch64 with the shipped header, or with ``header_text`` in its place."""
    include = build.TWIN_DIR
    if header_text is not None:
        include = tmp_path / "include"
        include.mkdir()
        (include / "tessera_switch.h").write_text(header_text)
    out = tmp_path / "program"
    done = zig(*FLAGS, f"-I{include}", str(PROGRAM), "-o", str(out))
    assert done.returncode == 0, f"zig could not build the AArch64 test program:\n{done.stderr[-3000:]}"
    return out


def emulate(elf: Path) -> dict:
    """Run the static AArch64 ELF from its entry to the sentinel: the ``Results`` it returns, or
    ``{"fault": why}`` when it faults or does not return."""
    from unicorn import UC_ARCH_ARM64, UC_MODE_ARM, Uc, UcError
    from unicorn import arm64_const as a64

    data = elf.read_bytes()
    assert data[:5] == b"\x7fELF\x02" and struct.unpack_from("<H", data, 0x12)[0] == 183, "not an AArch64 ELF64"
    entry, phoff = struct.unpack_from("<QQ", data, 0x18)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    loads = []
    for i in range(phnum):
        kind, _, offset, vaddr, _, filesz, memsz, _ = struct.unpack_from("<IIQQQQQQ", data, phoff + i * phentsize)
        if kind == 1:  # PT_LOAD
            loads.append((vaddr, data[offset:offset + filesz], memsz))
    uc = Uc(UC_ARCH_ARM64, UC_MODE_ARM)
    pages = sorted({p for vaddr, _, memsz in loads for p in range(vaddr >> 12, (vaddr + memsz + 4095) >> 12)})
    start = 0
    for i, p in enumerate(pages):  # map each run of consecutive pages once
        if i + 1 == len(pages) or pages[i + 1] != p + 1:
            uc.mem_map(pages[start] << 12, (p + 1 - pages[start]) << 12)
            start = i + 1
    for vaddr, text, _ in loads:
        uc.mem_write(vaddr, text)
    uc.mem_map(STACK, 1 << 16)
    uc.mem_map(SENTINEL, 4096)
    uc.reg_write(a64.UC_ARM64_REG_SP, STACK + (1 << 16))
    uc.reg_write(a64.UC_ARM64_REG_LR, SENTINEL)
    uc.reg_write(a64.UC_ARM64_REG_CPACR_EL1, 3 << 20)  # FP/SIMD on
    try:
        uc.emu_start(entry, SENTINEL, count=5_000_000)
    except UcError as e:
        return {"fault": f"{e} at pc {uc.reg_read(a64.UC_ARM64_REG_PC):#x}"}
    pc = uc.reg_read(a64.UC_ARM64_REG_PC)
    if pc != SENTINEL:
        return {"fault": f"still running after 5,000,000 instructions (pc {pc:#x})"}
    fields = [("magic", 1), ("control_mismatches", 1), ("mismatches", 1), ("checks", 1), ("stack_top", NF),
              ("entry_sp", NF), ("trace_len", 1), ("trace", NF * LAPS), ("total", NF), ("switches", 1)]
    words = struct.unpack(f"<{sum(n for _, n in fields)}q", uc.mem_read(uc.reg_read(a64.UC_ARM64_REG_X0),
                                                                        8 * sum(n for _, n in fields)))
    out, at = {}, 0
    for name, n in fields:
        out[name] = words[at] if n == 1 else list(words[at:at + n])
        at += n
    return out


def expected() -> dict:
    """What a correct switch gives, from the program's rules (independently of its code)."""
    ring_round = ROUNDS + 1  # ROUNDS rounds of checks, a barrier; the ring runs in the next round
    first = 0 if ring_round % 2 == 0 else NF - 1  # even rounds run ascending, odd descending
    rounds = ROUNDS + 3 + (NF - 1).bit_length()  # + barrier, ring, one per tree step, the last
    return {"magic": 0x7E55E7AA64, "control_mismatches": 19, "mismatches": 0, "checks": NF * ROUNDS,
            "trace_len": NF * LAPS, "trace": [(first + i) % NF for i in range(NF * LAPS)],
            "total": [sum((i * i * 37 + 11) % 1009 for i in range(DATA))] * NF,
            "switches": 2 * NF * rounds + NF * LAPS}


def findings(res: dict) -> list[str]:
    """Everything in ``res`` a correct switch would not give."""
    if "fault" in res:
        return [f"the program faulted: {res['fault']}"]
    found = [f"{k}: {res[k]} instead of {v}" for k, v in expected().items() if res[k] != v]
    for f in range(NF):
        if res["entry_sp"][f] != res["stack_top"][f] or res["entry_sp"][f] % 16:
            found.append(f"fiber {f} entered with sp {res['entry_sp'][f]:#x}; its stack ends at "
                         f"{res['stack_top'][f]:#x} (16-byte aligned)")
    return found


def test_the_aarch64_switch_keeps_every_callee_saved_register_and_the_order(tmp_path):
    res = emulate(compile_program(tmp_path))
    assert res["control_mismatches"] == 19  # the check sees a clobber of x19-x29 and d8-d15
    assert res["checks"] == NF * ROUNDS and res["mismatches"] == 0
    assert [sp % 16 for sp in res["entry_sp"]] == [0] * NF and res["entry_sp"] == res["stack_top"]
    assert res["total"] == [31541] * NF  # sum over i < 64 of (37 i^2 + 11) mod 1009, by hand
    assert findings(res) == []


# Bugs planted in the AArch64 half of a copy of tessera_switch.h: (what, text, replacement, the
# words one of which the findings must contain: a register the check saw change, or a fault when
# the compiled code itself kept a pointer in a lost register).
MUTANTS = [
    ("x21 and x22 not restored", "  ldp x21, x22, [sp, #16]\n", "", ("mismatches", "faulted")),
    ("x27 and x28 not saved", "  stp x27, x28, [sp, #64]\n", "", ("mismatches", "faulted")),
    ("d14 and d15 not restored", "  ldp d14, d15, [sp, #144]\n", "", ("mismatches",)),
    ("d8 and d9 not saved", "  stp d8, d9, [sp, #96]\n", "", ("mismatches",)),
    ("x19 and x20 swapped", "  ldp x19, x20, [sp, #0]\n", "  ldp x20, x19, [sp, #0]\n", ("mismatches", "faulted")),
    ("a new fiber's stack 8 bytes off", "(void**)(top - 160)", "(void**)(top - 168)", ("entered with sp",)),
]


@pytest.mark.parametrize("what,old,new,words", MUTANTS, ids=[m[0] for m in MUTANTS])
def test_a_planted_switch_bug_is_caught(tmp_path, what, old, new, words):
    text = HEADER.read_text()
    assert text.count(old) == 1
    found = findings(emulate(compile_program(tmp_path, text.replace(old, new))))
    assert any(w in f for f in found for w in words), (what, found)


def test_the_switch_header_refuses_other_architectures(tmp_path):
    probe = tmp_path / "probe.cpp"
    probe.write_text('#include "tessera_switch.h"\n')
    done = zig("-target", "riscv64-linux-musl", "-ffreestanding", "-nostdlib", "-fsyntax-only", f"-I{build.TWIN_DIR}",
               str(probe))
    assert done.returncode != 0 and "hand-written x86-64 or AArch64 code" in done.stderr


@pytest.mark.parametrize("machine,refused", [("aarch64", False), ("x86_64", False), ("riscv64", True),
                                             ("ppc64le", True)])
def test_the_backend_is_made_on_aarch64_and_refused_elsewhere(monkeypatch, machine, refused):
    monkeypatch.setattr(platform, "machine", lambda: machine)
    build.gxx.cache_clear()
    try:
        if refused:
            with pytest.raises(BackendError, match=f"this machine is {machine}"):
                build.gxx()
        else:
            assert Path(build.gxx()[0]).is_file()
    finally:
        build.gxx.cache_clear()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["matmul_f32", "sum"])
def test_a_gemm_and_a_row_reduction_give_the_interpreters_bits_on_emulated_aarch64(name):
    """The whole twin and a rendered kernel compiled for aarch64 and run under qemu-aarch64
    (tests/cuda_cpu/qemu_aarch64.py; a few seconds each). Debian packages, not PyPI ones: without
    them this test is skipped, saying what to install."""
    import qemu_aarch64

    missing = qemu_aarch64.tools()
    if missing:
        pytest.skip(f"needs {missing}")
    ok, switches, _ = qemu_aarch64.check(name)
    assert ok and switches > 0
