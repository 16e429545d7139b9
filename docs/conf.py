"""Sphinx configuration for the tessera_ref documentation."""
import tessera_ref

project = "tessera_ref"
author = "the tessera_ref developers"
release = tessera_ref.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
myst_enable_extensions = ["colon_fence", "dollarmath", "deflist"]
myst_heading_anchors = 3
exclude_patterns = ["_build", "spec/_*.md"]

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": True}
napoleon_google_docstring = True

html_theme = "furo"
html_title = f"tessera_ref {release}"
html_static_path = []
nitpicky = False
