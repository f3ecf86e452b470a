"""docs/ stands alone: a page for every registered family, generated from the code and up to date;
a site that builds without a single warning; an API entry for every public name."""

import importlib
import os
import pathlib
import re
import subprocess
import sys
import textwrap
import warnings

import pytest

import jaxrot
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


# A block preceded by the line "<!-- slow tier -->" (MkDocs shows nothing of it) runs in the slow tier
# only: the default run takes the page's other blocks, in order
_SLOW_BLOCK = "<!-- slow tier -->"
GUIDE_PAGES = [pytest.param("running.md", False, id="running.md"),
               pytest.param("running.md", True, id="running.md-every-block", marks=pytest.mark.slow),
               pytest.param("error_maps.md", True, id="error_maps.md"),
               pytest.param("newton_maps.md", True, id="newton_maps.md"),
               # one fit: a minute and a half of compiling on 2 cores; tests/test_fitting.py runs the same fit (slow
               # tier too), test_torque_functions.py::test_damping_fit_recovers_c an optax fit by default
               pytest.param("fitting_inertia.md", True, id="fitting_inertia.md", marks=pytest.mark.slow)]


def _python_blocks(text: str) -> list[tuple[str, bool]]:
    """The page's ```python blocks, dedented (a block may sit in a list item), each with whether it
    is left to the slow tier."""
    found = re.findall(r"(?:^([^\n]*)\n)?^[ \t]*```python\n(.*?)^[ \t]*```", text, flags=re.S | re.M)
    assert len(found) == text.count("```python"), "a ```python fence this test does not see"
    return [(textwrap.dedent(b), before.strip() == _SLOW_BLOCK) for before, b in found]


@pytest.mark.parametrize("name,every_block", GUIDE_PAGES)
def test_user_guide_blocks_run_in_order(name, every_block):
    """The page's Python blocks run one after another, as a reader would paste them."""
    text = (DOCS / "user_guide" / name).read_text()
    blocks = _python_blocks(text)
    assert blocks, f"{name} has no ```python block"
    assert every_block or any(slow for _, slow in blocks), f"{name} has no slow block: run it whole"
    scope = {"__name__": "__guide__"}
    for k, (block, slow) in enumerate(blocks):
        if every_block or not slow:
            exec(compile(block, f"{name} block {k}", "exec"), scope)


# The examples of the reference pages outside the user guide, run as written (the page assumes
# ``import jaxrot``); a deprecated spelling in them is an error
REFERENCE_EXAMPLES = [("choosing.md", 0, False), ("kernels.md", 0, True), ("kernels.md", 1, True), ("kernels.md", 2, True)]


@pytest.mark.parametrize("name,index,needs_warp", REFERENCE_EXAMPLES, ids=[f"{n}-{k}" for n, k, _ in REFERENCE_EXAMPLES])
def test_reference_page_examples_run(name, index, needs_warp):
    if needs_warp:
        pytest.importorskip("warp")
    block, _ = _python_blocks((DOCS / name).read_text())[index]
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        exec(compile(block, f"{name} block {index}", "exec"), {"__name__": "__doc__", "jaxrot": jaxrot})


# What a clean build prints (MkDocs logs at INFO without -v); any other line is a finding
_ROUTINE_BUILD_LINE = re.compile(
    r"^INFO +- +(Cleaning site directory|Building documentation to directory|Documentation built in)")


@pytest.fixture(scope="session")
def built_site(tmp_path_factory):
    """One MkDocs build for the whole session: its exit code, everything it printed, the site."""
    site = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    # no -q: quiet mode drops the warnings before strict mode can count them, so a strict build
    # with -q passes whatever the warnings
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
                       cwd=DOCS.parent, capture_output=True, text=True, env=env, timeout=600)
    return r.returncode, r.stdout + r.stderr, site


def test_site_builds_without_a_warning(built_site):
    """The MkDocs site (user guide, method pages, API reference from the docstrings) builds, and
    prints nothing but its routine lines: a broken link or anchor, a page outside the navigation or a
    reference to a name that no longer exists fails. Strict mode's exit code alone is not enough:
    MkDocs logs a link to a file excluded from the site at INFO, and counts no line that another
    library prints on its own."""
    code, out, _ = built_site
    assert re.search(r"^strict: true$", (DOCS.parent / "mkdocs.yml").read_text(), flags=re.M)
    findings = [line for line in out.splitlines() if line.strip() and not _ROUTINE_BUILD_LINE.match(line)]
    assert code == 0 and not findings, f"exit code {code}:\n" + "\n".join(findings or out.splitlines())


def test_api_pages_show_no_raw_restructuredtext(built_site):
    """The docstrings' cross-reference roles (``:class:`~jaxrot.State```) and literal-block markers
    (a paragraph ending in ``::``, as ``Example::``) are made readable by the site's hook (docs/hooks/roles.py): none is left on the
    API pages."""
    _, _, site = built_site
    pages = sorted((site / "api").glob("*/index.html"))
    assert pages
    for page in pages:
        html = page.read_text()
        assert not re.search(r":(class|func|meth|attr|data|mod|exc|obj):<code>", html), page
        assert "::</p>" not in html, page
    assert "<p>Example:</p>" in (site / "api" / "running" / "index.html").read_text()


def _resolve(dotted: str):
    """The object a dotted path names (modules imported, then attributes), or None."""
    parts = dotted.split(".")
    for k in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:k]))
        except ImportError:
            continue
        for name in parts[k:]:
            obj = getattr(obj, name, None)
            if obj is None:
                return None
        return obj
    return None


def test_every_public_name_has_an_api_entry(built_site):
    """Each name in ``jaxrot.__all__`` (read now, so a new public name needs its entry) is rendered
    on an API page: some ``:::`` entry, or a member of one, is the very object (an entry may name it
    by its defining module, or by a package that re-exports it)."""
    code, out, site = built_site
    pages = sorted((site / "api").rglob("index.html"))
    assert pages, f"the site did not build (exit code {code}):\n{out[-3000:]}"
    anchors = {a for page in pages for a in re.findall(r'id="(jaxrot(?:\.\w+)+)"', page.read_text())}
    rendered = {id(obj) for obj in map(_resolve, anchors) if obj is not None}
    missing = [name for name in jaxrot.__all__ if id(getattr(jaxrot, name)) not in rendered]
    assert not missing, f"public names with no entry on a docs/api page (add a ::: line): {missing}"


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
