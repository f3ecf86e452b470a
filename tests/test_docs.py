"""docs/ stands alone: a page for every registered family, generated from the code and up to date."""

import pathlib
import re

import pytest

from jaxrot.present import docgen
from jaxrot.integrators import REGISTRY

DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs"


def test_every_registered_family_has_a_page():
    assert {i.family for i in REGISTRY.values()} <= set(docgen.FAMILIES)


@pytest.mark.parametrize("family", sorted(docgen.FAMILIES))
def test_method_page_is_current_and_lists_its_methods(family):
    page = DOCS / "methods" / docgen.PAGE[family]
    assert page.read_text() == docgen.render(family), f"stale: run python -m jaxrot.present.docgen ({page.name})"
    for i in REGISTRY.values():
        if i.family == family:
            assert f"| `{i.name}` | {i.order} |" in page.read_text()
    assert "## Papers" in page.read_text()


def test_problems_page_is_current():
    assert (DOCS / "problems.md").read_text() == docgen.render_problems()


def test_index_links_resolve():
    index = (DOCS / "index.md").read_text()
    links = re.findall(r"\]\(([^)#]+)\)", index)
    assert {f"methods/{p}" for p in docgen.PAGE.values()} <= set(links)
    for link in links:
        assert (DOCS / link).exists(), link


def test_docstring_tables_are_fenced():
    """A reST '====' line under text would render as a heading in markdown."""
    for p in (DOCS / "methods").glob("*.md"):
        text, fenced = p.read_text(), False
        for line in text.splitlines():
            if line.startswith("```"):
                fenced = not fenced
            assert fenced or not re.match(r"^=+( +=+)+\s*$", line), p.name


GUIDE_PAGES = ["running.md"]


@pytest.mark.parametrize("name", GUIDE_PAGES)
def test_user_guide_blocks_run_in_order(name):
    """The page's Python blocks run one after another, as a reader would paste them."""
    text = (DOCS / "user_guide" / name).read_text()
    scope = {"__name__": "__guide__"}
    for k, block in enumerate(re.findall(r"```python\n(.*?)```", text, flags=re.S)):
        exec(compile(block, f"{name} block {k}", "exec"), scope)


def test_site_builds_strictly(tmp_path):
    """The MkDocs site (user guide, method pages, API reference from the docstrings) builds with
    every warning an error: a broken link or a reference to a name that no longer exists fails."""
    import os
    import subprocess
    import sys

    root = DOCS.parent
    assert re.search(r"^strict: true$", (root / "mkdocs.yml").read_text(), flags=re.M)
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
                       cwd=root, capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SaveAt" in (tmp_path / "site" / "api" / "running" / "index.html").read_text()


def _first_table(text: str, header: str) -> str:
    lines = text.splitlines()
    i = next(k for k, line in enumerate(lines) if line.startswith(header))
    j = i
    while j < len(lines) and lines[j].startswith("|"):
        j += 1
    return "\n".join(lines[i:j])


def test_the_buss_table_in_the_docs_is_the_committed_run():
    head = "| algorithm (Buss) |"
    doc = (DOCS / "reproductions.md").read_text()
    run = (DOCS.parent / "figures" / "buss_table.md").read_text()
    assert _first_table(doc, head) == _first_table(run, head), "copy the table of figures/buss_table.md"
