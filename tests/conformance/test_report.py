"""What a conformance failure and the matrix say (issue 33): the clause ids, the first differing
element with its value and bit pattern (of the value, not the bytes in memory), the inputs
there; each failing case's message and each n/a or unsupported entry's reasons; the summary
written into the docs from a run."""
import ml_dtypes
import numpy as np
import pytest

from tessera_conformance import assert_bits, assert_close, run
from tessera_conformance.harness import CLAUSES, begin_case
from tessera_conformance.report import Matrix
from tessera_conformance.summary import BEGIN, END, coverage_of, rows_of, update


def _message(fn) -> str:
    with pytest.raises(AssertionError) as info:
        fn()
    return str(info.value)


def test_a_bit_difference_names_the_clause_the_element_its_bits_and_the_inputs():
    token = CLAUSES.set(("NUM-EW-1",))
    try:
        x = np.array([0.5, 2.0, -3.0], np.float32)
        got = run("interp", lambda v: v * 2.0, x)
        want = got.copy()
        want[1] = np.float32(1.0)
        text = _message(lambda: assert_bits(got, want, "mul"))
    finally:
        CLAUSES.reset(token)
    assert text.startswith("[NUM-EW-1] mul: 1 of 3 elements differ in their bits; the first at (1,)")
    assert "got 4.0 (0x40800000), expected 1.0 (0x3f800000)" in text  # the value's bits, not 0000803f
    assert "the inputs there: input 0 = 2.0 (0x40000000)" in text


def test_bit_patterns_of_narrow_formats_and_of_scalars():
    begin_case(())
    bf = np.array([1.0, -2.0], ml_dtypes.bfloat16)
    assert "got -2 (0xc000), expected 2 (0x4000)" in _message(lambda: assert_bits(bf, np.abs(bf)))
    assert "got -0.0 (0x8000000000000000), expected 0.0 (0x0000000000000000)" in \
        _message(lambda: assert_bits(np.float64(-0.0), np.float64(0.0)))


def test_a_count_or_shape_mismatch_is_an_assertion_not_a_python_error():
    begin_case(())
    assert "2 results expected, got 1 results" in _message(lambda: assert_bits([np.ones(2)], [np.ones(2), np.ones(2)]))
    assert "shape (3,), expected (2,)" in _message(lambda: assert_bits(np.ones(3), np.ones(2)))
    assert "the worst at (1,): got nan" in _message(lambda: assert_close([1.0, np.nan], [1.0, 2.0], rel=0.1))


def test_the_matrix_lists_failure_messages_and_why_entries_did_not_run(tmp_path):
    m = Matrix(["b"])
    m.add(["NUM-EW-1"], "b", "fail", "AssertionError: [NUM-EW-1] mul: 1 of 3 elements differ | here", "case::one")
    m.add(["NUM-EW-2"], "b", "n/a", "the case ran nothing on b", "case::two")
    m.add(["NUM-EW-2"], "b", "unsupported", "b refuses the program: no fma", "case::three")
    m.write(tmp_path / "m.md")
    text = (tmp_path / "m.md").read_text()
    assert "- NUM-EW-1 on b: `case::one`: AssertionError: [NUM-EW-1] mul: 1 of 3 elements differ \\| here" in text
    assert "- NUM-EW-2 on b: n/a: the case ran nothing on b (1 case); unsupported: b refuses the program: no fma " \
           "(1 case)" in text
    assert "| unsupported |" in text


def test_the_docs_summary_is_replaced_between_its_markers_and_read_back():
    doc = f"intro\n{BEGIN}\nold\n{END}\nrest\n"
    new = update(doc, {"interp": {"pass": 3, "not testable": 2}, "numpy-naive": {"FAIL": 1, "pass": 4}},
                 "3 of 5 clauses have a case")
    assert new.startswith("intro\n" + BEGIN) and new.endswith(END + "\nrest\n") and "old" not in new
    assert rows_of(new) == {"interp": {"pass": 3, "not testable": 2}, "numpy-naive": {"FAIL": 1, "pass": 4}}
    assert coverage_of(new) == "3 of 5 clauses have a case"
    again = update(new, {"interp": {"pass": 5}}, "4 of 5 clauses have a case")  # a row not re-run is kept
    assert rows_of(again) == {"interp": {"pass": 5}, "numpy-naive": {"FAIL": 1, "pass": 4}}
