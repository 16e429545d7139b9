"""``python -m tessera_ref``: the ``tessera-ref`` command."""
import sys

from .cli import main

sys.exit(main())
