"""``python -m tessera_ref.cli``: the ``tessera-ref`` command."""
import sys

from . import main

sys.exit(main())
