"""Writing the toy backend as an installed distribution with an entry point."""
import pathlib

HERE = pathlib.Path(__file__).resolve().parent


def write_toy_distribution(root: pathlib.Path, target: str = "toy_backend:CountingBackend") -> pathlib.Path:
    """A directory that, on sys.path, holds the toy backend module and an installed
    distribution declaring it under the ``tessera_ref.backends`` entry-point group."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "toy_backend.py").write_text((HERE / "toy_backend.py").read_text())
    info = root / "toy_backend-0.1.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-backend\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[tessera_ref.backends]\ntoy = {target}\n")
    return root


