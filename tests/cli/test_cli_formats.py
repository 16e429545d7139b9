"""``tessera-ref formats`` (tessera_ref/cli/formats.py)."""
import json

import pytest

from tessera_ref.cli import main


def test_formats_table_lists_every_format(capsys):
    assert main(["formats"]) == 0
    text = capsys.readouterr().out
    for name in ["f64", "f32", "f16", "bf16", "fp8_e4m3", "fp8_e5m2", "fp6_e2m3", "fp6_e3m2",
                 "fp4_e2m1", "e8m0", "int8", "int4"]:
        assert f"\n{name} " in text


# The numbers of ../shared/reference/formats.md (OCP OFP8 / MX v1.0), typed in by hand.
REFERENCE = {
    "fp8_e4m3": dict(bias=7, max=448, min_normal=2**-6, min_subnormal=2**-9),
    "fp8_e5m2": dict(bias=15, max=57344, min_normal=2**-14, min_subnormal=2**-16),
    "fp6_e3m2": dict(bias=3, max=28, min_normal=2**-2, min_subnormal=2**-4),
    "fp6_e2m3": dict(bias=1, max=7.5, min_normal=1, min_subnormal=2**-3),
    "fp4_e2m1": dict(bias=1, max=6, min_normal=1, min_subnormal=0.5),
    "e8m0": dict(bias=127, max=2**127, min_normal=2**-127, min_subnormal=None),
}


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_formats_json_matches_the_reference_numbers(capsys, name):
    main(["formats", "--json"])
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    row = rows[name]
    for key, value in REFERENCE[name].items():
        assert row[key] == value, (name, key)
    assert rows["fp4_e2m1"]["aka"] == "fp4" and rows["fp6_e2m3"]["aka"] == "fp6"
    assert rows["fp4_e2m1"]["bytes_per_1k"] == 512
