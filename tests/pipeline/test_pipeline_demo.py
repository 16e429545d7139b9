"""examples/pipeline_demo.py: two of seed 004's blocks as a 2-stage pipeline on the NVL72 mesh."""
import importlib.util
import pathlib

import pytest

DEMO = pathlib.Path(__file__).resolve().parents[2] / "examples" / "pipeline_demo.py"
#: The demo's SHA-256 of its losses and gradients (the same for both schedules: MESH-PP-3).
SHA = "49c28f56a9051e90bf2356b04a7692b54f87289cec7ba592c4eb85bcbc21ec0d"


def _demo():
    spec = importlib.util.spec_from_file_location("pipeline_demo", DEMO)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_the_demo_matches_the_unpipelined_model_and_its_sha(schedule, capsys):
    assert _demo().main(schedule) == SHA
    out = capsys.readouterr().out
    assert "micro-batch by micro-batch): bit-identical" in out
    assert f"SHA-256 of the losses and gradients: {SHA}" in out
    assert "(p-1)/m = 0.125" in out
