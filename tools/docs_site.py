"""MkDocs hooks (mkdocs.yml): the site is docs/ plus the README as its home page and results/ as measured, and
the links written for the repository (GitHub's view: `docs/comparing.md`, `../results/README.md`) lead to the
same pages on the site.

The site mirrors the repository with docs/ at its root: docs/X is X, README.md is index.md, results/X stays
results/X. Each relative link is resolved against the page's place in the repository, mapped so, and written
relative to the page's place on the site. A link to a folder leads to its README.md; a folder without one is
not on the site, and its link is left as its text.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"(!?\[[^\]]*\])\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)

_repository_path: dict[str, str] = {}  # a page's path on the site -> its path in the repository


def site_path(repository_path: str) -> str:
    if repository_path == "README.md":
        return "index.md"
    if repository_path == "docs" or repository_path.startswith("docs/"):
        return repository_path[len("docs/") :]
    return repository_path


def on_files(files: Files, config: Any) -> Files:
    """Add the README (the home page) and every file of results/ (pages and the files they cite)."""
    _repository_path.clear()
    for file in files:
        _repository_path[file.src_uri] = f"docs/{file.src_uri}"
    added = [ROOT / "README.md", *sorted(p for p in (ROOT / "results").rglob("*") if p.is_file())]
    for path in added:
        repository_path = path.relative_to(ROOT).as_posix()
        uri = site_path(repository_path)
        files.append(File.generated(config, uri, abs_src_path=str(path)))
        _repository_path[uri] = repository_path
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    """The page's relative links, resolved in the repository and written for the site."""
    uri = page.file.src_uri
    repository_path = _repository_path.get(uri, f"docs/{uri}")

    def relink(match: re.Match[str]) -> str:
        text, target = match.group(1), match.group(2)
        if SCHEME.match(target) or target.startswith(("#", "/")):
            return match.group(0)
        path, hash_, anchor = target.partition("#")
        resolved = posixpath.normpath(posixpath.join(posixpath.dirname(repository_path), path))
        if (ROOT / resolved).is_dir():
            if not (ROOT / resolved / "README.md").is_file():
                return text[1:-1]  # a folder of the repository with no page: named, not linked
            resolved += "/README.md"  # the folder's page
        mapped = posixpath.relpath(site_path(resolved), posixpath.dirname(uri) or ".")
        return f"{text}({mapped}{hash_}{anchor})"

    pieces, last = [], 0
    for fence in FENCE.finditer(markdown):  # code blocks are left as written
        pieces += [LINK.sub(relink, markdown[last : fence.start()]), fence.group(0)]
        last = fence.end()
    pieces.append(LINK.sub(relink, markdown[last:]))
    return "".join(pieces)
