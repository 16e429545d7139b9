"""TILE-FRAG-1, TILE-COUNT-5 and cp_async's bytes/transpose: fragment layouts, the per-lane
counters they imply (hand-computed by hardware.md's bank rules) and vector copies."""
import numpy as np
import pytest

from tessera_ref.errors import KernelError, TesseraError
from tessera_ref.interp.tile import run
from tessera_ref.ir import parse_module, print_op, verify
from tessera_ref.ir import tile as T
from tessera_ref.ir.fragment import TVLayout, blocked, mma_sync, ownership


def test_the_blocked_128x128_layout_of_256_lanes_owns_8x8_micro_tiles_in_4x4_blocks():
    layout = blocked(128, 128, 256)
    assert layout.lanes == 256 and layout.values == 64 and layout.problem((128, 128)) is None
    owned = layout.offsets()
    rows, cols = owned // 128, owned % 128
    # lane 17 = column group 1, row group 1: rows 4..7 and 68..71, columns 4..7 and 68..71
    assert sorted(set(rows[17])) == [4, 5, 6, 7, 68, 69, 70, 71]
    assert sorted(set(cols[17])) == [4, 5, 6, 7, 68, 69, 70, 71]
    # slots are row-major in the micro-tile: slot 8·i + j is (i-th row, j-th column)
    assert (rows[17, 8], cols[17, 8]) == (5, 4) and (rows[17, 63], cols[17, 63]) == (71, 71)


@pytest.mark.parametrize("rows, cols, lanes", [(8, 8, 256), (7, 3, 32), (1, 1, 1)])
def test_tiles_with_fewer_than_two_elements_per_lane_or_no_lane_grid_have_no_blocked_layout(rows, cols, lanes):
    assert blocked(rows, cols, lanes) is None


@pytest.mark.parametrize("rows, cols, lanes", [(64, 64, 128), (96, 128, 256), (32, 32, 128), (16, 64, 32),
                                               (48, 40, 64)])
def test_every_blocked_layout_is_a_bijection(rows, cols, lanes):
    layout = blocked(rows, cols, lanes)
    assert layout is not None
    flat = layout.offsets().reshape(-1)
    assert sorted(flat.tolist()) == list(range(rows * cols))


def test_cyclic_ownership_is_element_lane_plus_slot_times_lanes():
    own = ownership(None, 10, 4)
    assert own.tolist() == [[0, 4, 8], [1, 5, 9], [2, 6, -1], [3, 7, -1]]


def _copy_kernel(layout, shape=(4, 32), lanes=32):
    """Load a fragment from global X under ``layout`` and store it to Y (same layout)."""
    kb = T.KernelBuilder("k", [("X", T.buffer(shape, "f32")), ("Y", T.buffer(shape, "f32"), True)])
    X, Y = kb.params
    f = kb.frag_load(kb.subview(X, [0, 0], shape), layout=layout)
    kb.frag_store(kb.subview(Y, [0, 0], shape), f, layout=layout)
    return kb


ROWS4 = TVLayout((8, 4), (4, 32), (4,), (1,))  # 4 rows x 32: lane (tx, ty) owns row ty, columns 4tx..4tx+3


def test_a_layout_prints_and_parses_back_byte_identical_and_runs_the_same_bits():
    module = _copy_kernel(ROWS4).finish()
    text = print_op(module)
    assert "layout = [[8, 4], [4, 32], [4], [1]]" in text
    assert print_op(parse_module(text)) == text
    x = np.arange(128, dtype=np.float32).reshape(4, 32)
    y = np.zeros_like(x)
    run(parse_module(text), [x, y], lanes=32)
    assert np.array_equal(y, x)


def test_a_kernel_without_layouts_prints_no_layout():
    assert "layout" not in print_op(_copy_kernel(None).finish())


@pytest.mark.parametrize("layout, why", [
    (TVLayout((8, 4), (4, 32), (4,), (2,)), "one-to-one"),     # slots overlap the next lane's
    (TVLayout((8, 4), (4, 32), (2,), (1,)), "64 elements"),    # too few elements
    (TVLayout((8, 4), (4, 32), (4,), (-1,)), "one-to-one"),    # negative offsets
])
def test_the_verifier_rejects_a_layout_that_is_not_a_bijection(layout, why):
    with pytest.raises(TesseraError, match=why):
        _copy_kernel(layout).finish()


def test_the_verifier_rejects_a_malformed_layout_attribute():
    kb = T.KernelBuilder("k", [("Y", T.buffer((4, 32), "f32"), True)])
    f = kb.fill((4, 32))
    f.defining_op.attributes["layout"] = [[8, 4], [4, 32], [4]]
    kb.frag_store(kb.subview(kb.params[0], [0, 0], (4, 32)), f)
    with pytest.raises(TesseraError, match="lane_shape, lane_stride"):
        kb.finish()


def test_a_fragment_stored_under_another_layout_than_it_was_made_with_is_rejected():
    kb = T.KernelBuilder("k", [("Y", T.buffer((4, 32), "f32"), True)])
    f = kb.fill((4, 32), layout=ROWS4)
    kb.frag_store(kb.subview(kb.params[0], [0, 0], (4, 32)), f)  # cyclic store of a ROWS4 fragment
    with pytest.raises(TesseraError, match="must be the same"):
        kb.finish()


def test_a_launch_with_other_lanes_than_the_layout_is_a_kernel_error():
    x = np.zeros((4, 32), np.float32)
    with pytest.raises(KernelError, match="for 32 lanes"):
        run(_copy_kernel(ROWS4).finish(), [x, x.copy()], lanes=64)


def _shared_read(layout, cols, lanes=32):
    """Fill a shared [1, cols] f32 row by lane stores, then frag_load it under ``layout``."""
    kb = T.KernelBuilder("k", [("Y", T.buffer((1, cols), "f32"), True)])
    s = kb.alloc((1, cols), "f32")

    def fill(i):
        e = kb.binary("add", kb.binary("mul", i, lanes), kb.lane_id())
        kb.store(s, [0, e], kb.const(1.0, "f32"))
        return []
    kb.for_(0, cols // lanes, 1, body=fill)
    kb.barrier()
    if layout is not None:
        f = kb.frag_load(s, layout=layout)
        kb.frag_store(kb.subview(kb.params[0], [0, 0], (1, cols)), f, layout=layout)
    return run(kb.finish(), [np.zeros((1, cols), np.float32)], lanes=lanes).counters


def _load_counts(layout, cols):
    """(requests, wavefronts, ideal) of the frag_load alone: with minus without it."""
    a, b = _shared_read(layout, cols), _shared_read(None, cols)
    return (a.smem_requests - b.smem_requests, a.smem_wavefronts - b.smem_wavefronts,
            a.smem_ideal_wavefronts - b.smem_ideal_wavefronts)


def test_lds128_of_four_consecutive_words_per_lane_is_four_quarter_warp_wavefronts():
    # lane l reads words 4l..4l+3 as one 16-byte access: 8 lanes per phase cover 32 distinct banks
    assert _load_counts(TVLayout((32,), (4,), (4,), (1,)), 128) == (1, 4, 4)


def test_two_lds128_per_lane_eight_words_apart_conflict_two_ways():
    # lane l owns words 8l..8l+7: two 16-byte loads; in a phase lanes l and l+4 hit banks
    # 8l..8l+3 (mod 32) with different words: 2 wavefronts per phase, 4 phases, 2 requests
    assert _load_counts(TVLayout((32,), (8,), (4, 2), (1, 4)), 256) == (2, 16, 8)


def test_lanes_32_words_apart_reading_16_bytes_each_is_an_8_way_conflict_per_phase():
    # lane l owns words 32l..32l+31: 8 loads of 16 B; each phase's 8 lanes hit the same 4 banks
    # with distinct words (8 wavefronts; ideal 1): 8 requests x 4 phases x 8
    assert _load_counts(TVLayout((32,), (32,), (32,), (1,)), 1024) == (8, 256, 32)


def test_cyclic_ownership_as_a_layout_reads_one_word_per_lane_per_load():
    # j ≡ lane (mod 32): a lane's words are 32 apart, so 4 scalar loads of 32 consecutive words
    assert _load_counts(TVLayout((32,), (1,), (4,), (32,)), 128) == (4, 4, 4)
    # the same ownership as the LDS.128 case, written with two value modes
    assert _load_counts(TVLayout((32,), (4,), (2, 2), (1, 2)), 128) == (1, 4, 4)


def _mma_counts(with_mma: bool):
    """A [2, 4] k-major a and [2, 32] b in shared memory, acc [4, 32] under ROWS4, 32 lanes."""
    kb = T.KernelBuilder("k", [("Y", T.buffer((4, 32), "f32"), True)])
    sa, sb = kb.alloc((2, 4), "f32"), kb.alloc((2, 32), "f32")
    one = kb.const(1.0, "f32")
    lane = kb.lane_id()
    kb.if_(kb.binary("lt", lane, 8), then=lambda: kb.store(sa, [kb.binary("floordiv", lane, 4),
                                                               kb.binary("mod", lane, 4)], one) or [])
    kb.store(sb, [0, lane], one)
    kb.store(sb, [1, lane], one)
    kb.barrier()
    acc = kb.fill((4, 32), layout=ROWS4)
    if with_mma:
        acc = kb.mma(sa, sb, acc, layout=ROWS4, transpose_a=True)
    kb.frag_store(kb.subview(kb.params[0], [0, 0], (4, 32)), acc, layout=ROWS4)
    report = run(kb.finish(), [np.zeros((4, 32), np.float32)], lanes=32)
    return report.counters, report.outputs["Y"]


def test_an_mma_under_a_layout_counts_each_lanes_row_and_column_loads():
    # per k: a — each lane one word of row ty (4 distinct words, 1 wavefront); b — each lane
    # 4 consecutive words at 4·tx (16 B): 4 phases of 8 lanes, each 32 distinct banks.
    # K = 2: requests 2 + 2, wavefronts 2 + 8, ideal the same.
    (with_, y), (without, _) = _mma_counts(True), _mma_counts(False)
    assert (with_.smem_requests - without.smem_requests, with_.smem_wavefronts - without.smem_wavefronts,
            with_.smem_ideal_wavefronts - without.smem_ideal_wavefronts) == (4, 10, 10)
    assert np.array_equal(y, np.full((4, 32), 2.0, np.float32))
    assert with_.flops - without.flops == 2 * 4 * 2 * 32


def _cp(nbytes, transpose=False, src_shape=(4, 8), offset=0, fmt="f32"):
    dst_shape = src_shape[::-1] if transpose else src_shape
    kb = T.KernelBuilder("k", [("X", T.buffer((4, 16), fmt)), ("Y", T.buffer(dst_shape, fmt), True)])
    X, Y = kb.params
    s = kb.alloc(dst_shape, fmt)
    kb.cp_async(s, kb.subview(X, [0, offset], src_shape), nbytes=nbytes, transpose=transpose)
    kb.commit()
    kb.wait(0)
    kb.barrier()
    kb.frag_store(Y, kb.frag_load(s))
    return kb


@pytest.mark.parametrize("nbytes, fmt, why", [(2, "bf16", "not one of"), (32, "f32", "not one of"),
                                              (16, "f32", "pieces of 16 bytes")])
def test_the_verifier_allows_only_4_8_16_byte_pieces_of_whole_row_elements(nbytes, fmt, why):
    with pytest.raises(TesseraError, match=why):
        _cp(nbytes, src_shape=(4, 2), fmt=fmt).finish()


def test_a_transposing_copy_is_one_element_per_piece():
    with pytest.raises(TesseraError, match="one element when transposing"):
        _cp(8, transpose=True).finish()


def test_a_misaligned_16_byte_copy_is_a_kernel_error_at_run_time():
    x = np.zeros((4, 16), np.float32)
    with pytest.raises(KernelError, match="16-byte aligned"):
        run(_cp(16, offset=1).finish(), [x, np.zeros((4, 8), np.float32)], lanes=32)


def test_16_byte_copies_move_the_data_and_count_16_byte_pieces():
    x = np.arange(64, dtype=np.float32).reshape(4, 16)
    y = np.zeros((4, 8), np.float32)
    report = run(_cp(16).finish(), [x, y], lanes=32)
    assert np.array_equal(y, x[:, :8])
    # 8 pieces of 16 B by lanes 0..7: one request reading 4 rows of 32 B = 4 sectors
    four = run(_cp(4).finish(), [x, np.zeros((4, 8), np.float32)], lanes=32).counters
    assert report.counters.global_sectors == four.global_sectors == 4 + 4  # + the frag_store's 4 sectors


def test_a_transposing_copy_writes_the_transpose():
    x = np.arange(64, dtype=np.float32).reshape(4, 16)
    y = np.zeros((8, 4), np.float32)
    run(_cp(4, transpose=True).finish(), [x, y], lanes=32)
    assert np.array_equal(y, x[:, :8].T)


def test_the_mma_sync_layout_puts_c0_to_c3_where_the_ptx_table_does():
    layout = mma_sync(128, 128, 256)  # 8 warps as 4 x 2, each 2 x 8 tiles of 16 x 8
    assert layout.problem((128, 128)) is None
    owned = layout.offsets()
    # lane 5 (g = 1, t = 1) of warp 0, tile (0, 0): c0, c1 = (1, 2), (1, 3); c2, c3 = (9, 2), (9, 3)
    assert [divmod(int(o), 128) for o in owned[5, :4]] == [(1, 2), (1, 3), (9, 2), (9, 3)]
    # slot 4 is the next tile to the right (8 columns on); warp 1 starts 64 columns on
    assert divmod(int(owned[5, 4]), 128) == (1, 10) and divmod(int(owned[32 + 5, 0]), 128) == (1, 66)
    assert mma_sync(16, 16, 128) is None and mma_sync(20, 16, 32) is None


def test_the_verifier_checks_a_layout_against_the_kernels_recorded_lanes():
    module = _copy_kernel(ROWS4).finish()
    func = module.body.first_op
    func.attributes["launch.lanes"] = 32
    verify(module)
    func.attributes["launch.lanes"] = 64
    with pytest.raises(TesseraError, match="is for 32 lanes, the kernel has 64"):
        verify(module)
