"""examples/llama (issue 28 items 6-7): the tiny config's first steps have the same loss bits
and parameter SHA-256 on one device, on a simulated dp=2 x tp=2 mesh and on 2 and 4 processes
(``reduction="exact"``); a checkpoint saved on one mesh continues bit-identically on another;
the model learns (the held-out loss falls below the corpus's unigram entropy); the step's
loss matches PyTorch; user errors are clear messages."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parent.parent.parent
EXAMPLE = REPO / "examples" / "llama"
sys.path.insert(0, str(EXAMPLE))

import model  # noqa: E402
import train  # noqa: E402
from tessera_ref.errors import UsageError  # noqa: E402

TINY = model.CONFIGS["tiny"]
K = 3


@pytest.fixture(scope="module")
def corpus():
    return train.split(train.load_corpus())[0]


def steps(run: train.Run, data, n: int, first: int = 0) -> list:
    """The loss bits of ``n`` steps from step ``first`` (the batches the CLI would draw)."""
    return [np.float32(float(run.train_step(*train.batch(data, TINY, i)))).view(np.uint32)
            for i in range(first, first + n)]


def tiny_run(dp=1, tp=1, **kw) -> train.Run:
    return train.Run(TINY, dp, tp, steps=K, lr=1e-2, exact=True, **kw)


@pytest.fixture(scope="module")
def one_device(corpus):
    run = tiny_run()
    return steps(run, corpus, K), run.digest()


def test_one_device_and_a_2x2_mesh_give_the_same_bits(corpus, one_device):
    run = tiny_run(2, 2)
    assert run.params["l0.q"].layout.dims == ((), ("tp",))  # Megatron's layout, on a mesh
    assert (steps(run, corpus, K), run.digest()) == one_device
    assert len(set(one_device[0])) > 1  # the steps changed the loss


def test_the_first_loss_is_pytorchs(corpus):
    """An independent check of the model: the same weights and batch in PyTorch (float32,
    its own attention, RoPE, RMSNorm and cross-entropy) give the first loss to 6 digits."""
    torch = pytest.importorskip("torch")
    import torch_reference
    ids, labels = train.batch(corpus, TINY, 0)
    want = torch_reference.loss_fn(TINY)({k: torch.tensor(v) for k, v in model.init_params(TINY).items()},
                                         torch.tensor(ids).long(), torch.tensor(labels).long())
    got = float(train.Run(TINY, steps=5, lr=1e-2).train_step(ids, labels))
    assert got == pytest.approx(float(want), rel=1e-6)


def test_a_checkpoint_from_a_mesh_continues_on_one_device_with_the_same_bits(corpus, one_device, tmp_path):
    saved = tiny_run(2, 2)
    first = steps(saved, corpus, 1)
    path = saved.save(str(tmp_path))
    assert os.path.basename(path) == "step-000001"
    resumed = tiny_run()
    assert resumed.restore(str(tmp_path)) == path and resumed.done == 1
    assert (first + steps(resumed, corpus, K - 1, first=1), resumed.digest()) == one_device


def test_it_learns(corpus):
    """80 steps of the tiny config: the held-out loss falls below the unigram entropy."""
    data = train.load_corpus()
    entropy = train.unigram_entropy(data)
    counts = np.bincount(data, minlength=256)
    assert entropy == pytest.approx(-sum(c / len(data) * np.log(c / len(data)) for c in counts if c), rel=1e-12)
    run = train.Run(TINY, steps=80, lr=1e-2)
    held = train.eval_batches(train.split(data)[1], TINY)
    before = run.eval_loss(held)
    for i in range(80):
        run.train_step(*train.batch(corpus, TINY, i))
    after = run.eval_loss(held)
    assert before > 5.4 > entropy > after, (before, entropy, after)  # ln 256 = 5.55 at the start


def _cli(*args, timeout=120):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, str(EXAMPLE / "train.py"), *args], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=timeout)


@pytest.mark.parametrize("args, message", [
    (["--mesh", "2x2"], "--mesh '2x2' is not two positive integers dp,tp"),
    (["--mesh", "1,3"], "tp=3 does not divide the model's 4 query heads"),
    (["--mesh", "3,1"], "dp=3 does not divide the batch of"),
    (["--resume"], "--resume needs --ckpt-dir"),
    (["--backend", "nope"], "--backend 'nope' is not one of the available backends"),
])
def test_user_errors_are_one_line_with_the_fix(args, message):
    done = _cli("--config", "tiny", "--steps", "1", *args)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert message in done.stderr and "Fix:" in done.stderr, done.stderr


def test_a_missing_corpus_says_where_it_looked(tmp_path):
    with pytest.raises(UsageError, match="no corpus: .*docs/spec holds no \\*.md files") as e:
        train.load_corpus(str(tmp_path))
    assert "checkout of the repository" in e.value.fix


def test_resume_without_a_checkpoint_or_from_another_model(tmp_path):
    with pytest.raises(UsageError, match="holds no checkpoint"):
        tiny_run().restore(str(tmp_path))
    tiny_run().save(str(tmp_path))
    other = train.Run(TINY.with_(layers=2), steps=5, lr=1e-2, exact=True)
    with pytest.raises(UsageError, match="cannot resume from .*step-000000: .*another tree") as e:
        other.restore(str(tmp_path))
    assert "--config" in e.value.fix


def test_the_cli_prints_progress_checkpoints_and_resumes(tmp_path):
    ck = tmp_path / "ck"
    done = _cli("--config", "tiny", "--steps", "2", "--ckpt-dir", str(ck), "--ckpt-every", "1", "--exact",
                "--digest", "--eval-every", "2")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[:2] for line in lines if line.startswith("step")] == [["step", "1/2"], ["step", "2/2"]]
    assert "simulated H100 x1:" in lines[2] and sorted(os.listdir(ck)) == ["step-000001", "step-000002"]
    again = _cli("--config", "tiny", "--steps", "3", "--ckpt-dir", str(ck), "--resume", "--exact", "--digest",
                 "--mesh", "2,2")
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[0] == f"resumed from {ck / 'step-000002'}"
    assert [line.split()[1] for line in again.stdout.splitlines() if line.startswith("step")] == ["3/3"]


@pytest.mark.parametrize("n", [2, pytest.param(4, marks=pytest.mark.slow)])
def test_several_processes_give_the_same_bits(one_device, n):
    """tessera-ref launch -n 2 (each process owning one dp row of the 2 x 2 mesh) or -n 4 (one
    device each): the CLI's loss bits and parameter SHA-256 are one device's (10-15 s)."""
    sys.path.insert(0, str(REPO / "tests" / "multiprocess"))
    from _ranks import launch
    done = launch(n, EXAMPLE / "train.py", "--config", "tiny", "--steps", K, "--mesh", "2,2", "--exact",
                  "--digest", "--quiet", "--lr", "1e-2", timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    out = dict(line.split(": ", 1) for line in done.stdout.splitlines() if ": " in line)
    assert out["loss bits"].split() == [f"{b:08x}" for b in one_device[0]]
    assert out["params sha256"] == one_device[1]
