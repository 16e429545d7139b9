"""IR infrastructure speed: build 100k ops, print, parse and verify a 10k-op module.

    python benchmarks/ir_bench.py

Baseline in the same run: creating the same number of plain 6-field dataclass instances. The
script runs with one thread, then with the default thread counts (pure Python: they agree).
"""
import time
from dataclasses import dataclass

from timing import run_in_thread_settings

from tessera_ref.ir import Builder, Module, TensorType, func_op, parse_module, return_op, verify

T = TensorType((128, 64), "bf16")


def build(n_ops: int, attributes=None) -> Module:
    module = Module()
    func = module.body.append(func_op("f", [T, T], [T]))
    body = func.regions[0].entry
    builder = Builder(body)
    a, b = body.args
    for i in range(n_ops):
        attrs = None if attributes is None else dict(attributes)
        a, b = b, builder.create("test.add", (a, b), (T,), attrs, (), f"model.py:{i}").result
    body.append(return_op([b]))
    return module


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


@dataclass
class _Plain:
    name: str
    operands: tuple
    results: tuple
    attributes: dict
    regions: tuple
    location: str


def bench_create(n: int = 100_000) -> None:
    seconds, module = timed(lambda: build(n))
    assert sum(1 for _ in module.walk()) == n + 3
    base, _ = timed(lambda: [_Plain("test.add", (), (), {}, (), "") for _ in range(n)])
    print(f"create+insert {n:,} ops: {seconds:.3f} s ({seconds / n * 1e6:.2f} us/op); "
          f"plain dataclass {base / n * 1e6:.2f} us/object; ratio {base / seconds:.3f}")


def bench_print_parse() -> None:
    module = build(10_000, {"alpha": 1.5, "tile_shape": (128, 128, 64)})
    print_s, text = timed(lambda: str(module))
    parse_s, parsed = timed(lambda: parse_module(text))
    verify_s, _ = timed(lambda: verify(parsed))
    print(f"10k-op module ({len(text) / 1e6:.2f} MB): print {print_s * 1e3:.0f} ms, "
          f"parse {parse_s * 1e3:.0f} ms, verify {verify_s * 1e3:.0f} ms")
    assert str(parsed) == text


def main() -> None:
    bench_create()
    bench_print_parse()


if __name__ == "__main__":
    run_in_thread_settings(main)
