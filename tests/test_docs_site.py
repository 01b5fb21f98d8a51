"""The documentation as a site (mkdocs.yml, MkDocs with the Material theme): every page of docs/ in the navigation,
search, and a --strict build, so that a link or a heading that breaks on the site fails here. The links are
written for the repository (GitHub's view); on the site they must lead to the same pages."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from mkdocs.config import load_config

from conftest import ROOT

pytestmark = pytest.mark.slow  # a real `mkdocs build` (about 2 s)


def nav_pages(nav: list) -> list[str]:
    pages = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages += nav_pages(value) if isinstance(value, list) else [value]
    return pages


def test_the_navigation_lists_every_page_of_docs() -> None:
    config = load_config(str(ROOT / "mkdocs.yml"))
    pages = nav_pages(config["nav"])
    assert sorted(p for p in pages if "/" not in p and p != "index.md") == sorted(
        p.name for p in (ROOT / "docs").glob("*.md")
    )
    assert {"index.md", "results/README.md"} <= set(pages)
    assert any(name.endswith("search") for name in config["plugins"]) and config["theme"].name == "material"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(folder)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return folder


def test_the_site_builds_strictly_with_every_page_and_a_search_index(site: Path) -> None:
    for page in (ROOT / "docs").glob("*.md"):
        assert (site / page.stem / "index.html").is_file(), page.name
    assert (site / "index.html").is_file() and (site / "results" / "index.html").is_file()
    index = json.loads((site / "search" / "search_index.json").read_text())
    texts = " ".join(doc["text"] for doc in index["docs"])
    assert "trainbench.config_hash" in texts and "How fast does my training run on this machine?" in texts


def folder_of_the_repository(site_path: str) -> bool:
    """A link to a folder of the repository without a page of its own (conf/suite_cell/), which MkDocs leaves as
    written: the site has no page there."""
    return (ROOT / site_path).is_dir() or (ROOT / "docs" / site_path).is_dir()


def test_links_written_for_the_repository_lead_to_the_same_pages_on_the_site(site: Path) -> None:
    """docs/measurement.md links `../results/README.md#fast-mode-on-an-h100`; the README links
    `docs/comparing.md`: on the site both lead to a page that exists, at a heading it has."""
    broken = []
    for page in site.rglob("index.html"):
        for target in re.findall(r'<a [^>]*href="([^"#:]*)(#[^"]*)?"', page.read_text()):
            path, anchor = target
            if not path or path.startswith(("/", "mailto")):
                continue
            destination = (page.parent / path).resolve()
            html = destination / "index.html" if destination.is_dir() else destination
            if not html.exists():
                if not folder_of_the_repository(destination.relative_to(site.resolve()).as_posix()):
                    broken.append(f"{page.relative_to(site)}: {path}")
            elif anchor and html.suffix == ".html" and f'id="{anchor[1:]}"' not in html.read_text():
                broken.append(f"{page.relative_to(site)}: {path}{anchor} (no such heading)")
    assert not broken, broken
    home = (site / "index.html").read_text()
    assert 'href="comparing/"' in home and 'href="docs/comparing.md"' not in home
