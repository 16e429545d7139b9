"""Tessera DSL kernels (seed 004 syntax) used by the tile tests, as text."""

SAXPY = '''
```tessera
@kernel
def saxpy(x: f32[n], y: mut f32[n], alpha: f32):
    i = tile.linear_id()
    if i < n:
        y[i] = alpha * x[i] + y[i]
```
'''

# The seed's double-buffered loop, corrected: one element per lane, the trailing barrier
# before a buffer is refilled, and the last chunk processed after the loop. TRAILING is
# replaced by "" to plant the missing-barrier bug (line 14).
AXPY_DB = '''
@kernel
def axpy_db(X: f16[m], Y: mut f16[m], alpha: f16):
    s0 = tshared.alloc[f16](128)
    s1 = tshared.alloc[f16](128)
    i = tile.lane_id()
    for t in tile.range(m, step=128, prefetch=2):
        cp_async.shared.global(s1, X[t:t+128])
        tbarrier()
        if t > 0:
            yv = alpha * s0[i] + tile.load(Y, index=t-128+i)
            tile.store(Y, index=t-128+i, value=yv)
        s0, s1 = s1, s0
        TRAILING
    cp_async.wait(0)
    tbarrier()
    y_last = alpha * s0[i] + tile.load(Y, index=m-128+i)
    tile.store(Y, index=m-128+i, value=y_last)
'''

# cp.async visibility: WAIT and BARRIER are replaced to plant bugs (lines 7 and 8).
CP_VISIBILITY = '''
@kernel
def stage(X: f32[128], Y: mut f32[128]):
    s = tshared.alloc[f32](128)
    i = tile.lane_id()
    cp_async.shared.global(s, X[0:128])
    cp_async.commit()
    WAIT
    BARRIER
    Y[i] = s[i]
'''

# Column reads of a 32x32 f32 shared tile (a transpose): PAD and SWIZZLE vary the layout.
TRANSPOSE = '''
@kernel
def transpose32(X: f32[32, 32], Y: mut f32[32, 32]):
    s = tshared.alloc[f32](32, 32, pad=PAD, swizzle=SWIZZLE)
    l = tile.lane_id()
    for j in range(32):
        s[j, l] = X[j, l]
    tbarrier()
    for j in range(32):
        Y[j, l] = s[l, j]
'''
