"""The counter-based RNG of NUM-RNG-1 … NUM-RNG-7, transcribed in Python integers and floats.

Nothing here imports ``tessera_ref``: Philox4x32-10 is the round of NUM-RNG-1 on Python
integers, keys and counter spaces follow the tables of NUM-RNG-2/3, and the float draws use
the NUM-MATH transcriptions of :mod:`._ref_math`.
"""
from __future__ import annotations

import math

from . import _ref_math as M

__all__ = ["philox", "key_words", "fold", "random_bits", "uniform_f32", "uniform_f64", "normal",
           "poisson", "KEY_TAG"]

MASK = 0xFFFFFFFF
M0, M1 = 0xD2511F53, 0xCD9E8D57
W0, W1 = 0x9E3779B9, 0xBB67AE85
KEY_TAG = 0x6B657973
MAX_ROUNDS = 256


def philox(counter, key) -> tuple:
    """Philox4x32 with 10 rounds: one block of four 32-bit words."""
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for r in range(10):
        if r:
            k0, k1 = (k0 + W0) & MASK, (k1 + W1) & MASK
        p0, p1 = M0 * c0, M1 * c2
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ k0, p1 & MASK, (p0 >> 32) ^ c3 ^ k1, p0 & MASK
    return c0, c1, c2, c3


def _lohi(n: int) -> tuple:
    return n & MASK, (n >> 32) & MASK


def _derive(parent: tuple, s: int) -> tuple:
    return philox((*_lohi(s), 0, KEY_TAG), parent)[:2]


def key_words(seed: int, stream: int = 0) -> tuple:
    """``RNGKey(seed, stream).words`` (NUM-RNG-2)."""
    return _derive(_lohi(seed), stream)


def fold(words: tuple, s: int) -> tuple:
    """``key.fold(s).words``."""
    return _derive(words, s)


def random_bits(key: tuple, i: int) -> int:
    n = i // 4
    return philox((*_lohi(n), 0, 0), key)[i % 4]


def uniform_f32(key: tuple, i: int) -> float:
    return (random_bits(key, i) >> 8) * 2.0 ** -24


def u53(a: int, b: int) -> float:
    return ((a >> 5) * 2.0 ** 26 + (b >> 6)) * 2.0 ** -53


def uniform_f64(key: tuple, i: int) -> float:
    w = philox((*_lohi(i // 2), 1, 0), key)
    j = 2 * (i % 2)
    return u53(w[j], w[j + 1])


def normal(key: tuple, i: int) -> float:
    w = philox((*_lohi(i), 2, 0), key)
    u1, u2 = u53(w[0], w[1]), u53(w[2], w[3])
    c = M.sincos_turns(u2)[1]
    return math.sqrt((-2.0) * M.log(1.0 - u1)) * c


def _round_uniforms(key: tuple, i: int, d: int) -> tuple:
    w = philox((*_lohi(i), 3, d), key)
    return u53(w[0], w[1]), u53(w[2], w[3])


def poisson(key: tuple, i: int, lam: float) -> int:
    """NUM-RNG-7: Knuth below 10, PTRS from 10 on."""
    if lam < 10:
        L = M.exp(-lam)
        p, X = 1.0, 0
        for d in range(MAX_ROUNDS):
            for u in _round_uniforms(key, i, d):
                p = p * u
                if p > L:
                    X += 1
                else:
                    return X
        raise RuntimeError("gave up")
    slam = math.sqrt(lam)
    loglam = M.log(lam)
    b = 0.931 + (2.53 * slam)
    a = -0.059 + (0.02483 * b)
    invalpha = 1.1239 + (1.1328 / (b - 3.4))
    vr = 0.9277 - (3.6224 / (b - 2.0))
    for d in range(MAX_ROUNDS):
        A, V = _round_uniforms(key, i, d)
        U = A - 0.5
        us = 0.5 - abs(U)
        k = -math.inf if us == 0 else math.floor((((((2.0 * a) / us) + b) * U) + lam) + 0.43)
        if us >= 0.07 and V <= vr:
            return int(k)
        if k < 0 or (us < 0.013 and V > us):
            continue
        lhs = (M.log(V) + M.log(invalpha)) - M.log((a / (us * us)) + b)
        rhs = ((-lam) + (k * loglam)) - M.log_factorial(float(k))
        if lhs <= rhs:
            return int(k)
    raise RuntimeError("gave up")
