"""The README is the front door and docs/ the reference: the README stays short enough to read in minutes, its
quick start is what CI runs, and every link in the README, docs/ and results/ leads somewhere that exists
(a moved section breaks a link, not a reader's trust). No framework is imported; this runs in well under a second."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import ROOT

README = ROOT / "README.md"
DOCS = ROOT / "docs"
# Every page a reader reaches from the README: docs/ and each results/ summary with the files it cites.
LINKED_PAGES = [README, *sorted(DOCS.glob("*.md")), *sorted((ROOT / "results").rglob("*.md"))]
# Reference material moved out of the README; the limit is the "at most about 15 KB".
README_LIMIT_BYTES = 15_500

MARKDOWN_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def github_anchor(heading: str) -> str:
    """The id GitHub gives a heading: lower case, punctuation dropped (word characters, hyphens and spaces
    stay), each space a hyphen."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors_of(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    anchors: set[str] = set()
    for line in text.splitlines():
        heading = re.match(r"#{1,6} (.+)", line)
        if heading:
            anchor = github_anchor(heading.group(1))
            suffix = 0
            while (anchor if suffix == 0 else f"{anchor}-{suffix}") in anchors:
                suffix += 1
            anchors.add(anchor if suffix == 0 else f"{anchor}-{suffix}")
    return anchors


def relative_links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text())
    return [target for target in MARKDOWN_LINK.findall(text) if not re.match(r"[a-z]+:", target)]


def test_the_readme_is_a_front_door_not_the_reference() -> None:
    size = len(README.read_bytes())
    assert size <= README_LIMIT_BYTES, f"README.md is {size:,} bytes; move reference material to docs/"
    readme = README.read_text()
    for heading in ("## Quick start", "## Concepts", "## Reproducing the published studies", "## Documentation"):
        assert heading in readme
    for concept in ("**Cell**", "**Sweep**", "**Task**", "**Setting**", "**Comparison**"):
        assert concept in readme


def test_every_page_in_docs_is_reachable_from_the_readme() -> None:
    linked = {target.split("#")[0] for target in relative_links(README)}
    unlinked = [page.name for page in sorted(DOCS.glob("*.md")) if f"docs/{page.name}" not in linked]
    assert not unlinked, f"docs pages the README does not link: {unlinked}"


def test_the_quick_start_runs_what_ci_runs() -> None:
    """.ci/run installs "exactly as README.md says": its setup and test lines must be the README's."""
    ci_lines = (ROOT / ".ci" / "run").read_text().splitlines()
    quick_start = README.read_text().split("## Quick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    readme_commands = [line.split("#", 1)[0].strip() for line in quick_start.strip().splitlines()]
    for marker in ('# README "Quick start": setup', '# README "Quick start": tests'):
        ci_command = ci_lines[ci_lines.index(marker) + 1].strip()
        assert ci_command in readme_commands, (
            f".ci/run runs {ci_command!r}; the README's quick start has {readme_commands}"
        )


def test_every_relative_link_leads_to_a_file_and_heading_that_exist() -> None:
    broken = []
    for page in LINKED_PAGES:
        for target in relative_links(page):
            path_part, _, anchor = target.partition("#")
            destination = (page.parent / path_part).resolve() if path_part else page
            if not destination.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
                continue
            headed_page = destination / "README.md" if destination.is_dir() else destination
            if anchor and headed_page.suffix == ".md" and anchor not in anchors_of(headed_page):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_no_table_is_cut_in_two_by_a_blank_line() -> None:
    """A blank line ends a Markdown table: the rows after it render as a paragraph of pipes, with no header."""
    cut = []
    for page in LINKED_PAGES:
        lines = FENCE.sub("", page.read_text()).splitlines()
        for number in range(1, len(lines) - 1):
            rows_go_on = lines[number - 1].startswith("|") and lines[number + 1].startswith("|")
            new_header = number + 2 < len(lines) and re.match(r"\|\s*:?-", lines[number + 2])
            if not lines[number].strip() and rows_go_on and not new_header:
                cut.append(f"{page.relative_to(ROOT)}: line {number + 1} (counted without code blocks)")
    assert not cut, "\n".join(cut)


def test_the_code_names_documentation_that_exists() -> None:
    """Docstrings, comments and messages point readers at docs/ pages by path; a moved page must take them along."""
    named: set[str] = set()
    for source in [*(ROOT / "src").rglob("*.py"), *(ROOT / "conf").rglob("*.yaml"), *(ROOT / "benchmarks").glob("*")]:
        if source.is_file():
            named.update(re.findall(r"\bdocs/[\w-]+\.md", source.read_text(errors="replace")))
    assert named, "no docs/ page named in src/, conf/ or benchmarks/: the search is broken"
    missing = sorted(name for name in named if not (ROOT / name).exists())
    assert not missing, f"named but missing: {missing}"


def test_configuration_page_lists_every_choice_of_every_group() -> None:
    """docs/configuration.md's table of groups names each choice in conf/, presets included: a new model or
    preset that the page leaves out fails here."""
    from trainbench.locations import choices

    rows = re.findall(r"^\| `(\w+)` \| (.+?) \|", (DOCS / "configuration.md").read_text(), re.MULTILINE)
    assert rows, "docs/configuration.md has no table of groups"
    for group, listed in rows:
        documented = set(re.findall(r"`(\w+)`", listed))
        assert documented == set(choices(group)), (group, set(choices(group)) ^ documented)
