"""mkdocs-gen-files script (mkdocs.yml): writes the generated reference pages into the
site at build time (grouper.cli.reference); nothing it writes is committed."""

from __future__ import annotations

import mkdocs_gen_files

from grouper.cli.reference import pages

for name, render in pages().items():
    path = f"reference/{name}"
    with mkdocs_gen_files.open(path, "w") as fh:
        fh.write(render())
    # "edit this page" has no source file to point to: the page comes from the code
    mkdocs_gen_files.set_edit_path(path, None)
