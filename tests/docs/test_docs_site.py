"""The documentation site's generators (docs/gen_api.py, docs/gen_repo_pages.py,
docs/griffe_dgsgld.py), checked without running mkdocs.

The API reference must hold an entry for every name of every public ``__all__``: the package's
public modules are walked here independently of the generator and each name is looked up in the
generated pages, so a name or a module the generator leaves out fails.
"""

import importlib
import importlib.util
import pkgutil
import posixpath
import re
import sys
import textwrap
from pathlib import Path

import pytest

import dgsgld

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _load(name):
    spec = importlib.util.spec_from_file_location(f"_docs_{name}", DOCS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


gen_api = _load("gen_api")
gen_repo_pages = _load("gen_repo_pages")


def _resolve(identifier):
    """The object ``identifier`` names: the longest importable module prefix, then attributes."""
    parts = identifier.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for part in parts[i:]:
            obj = getattr(obj, part)
        return obj
    raise ImportError(identifier)


def _public_listings(package):
    root = importlib.import_module(package)
    modules = [package] + [
        info.name for info in pkgutil.walk_packages(root.__path__, package + ".")
        if not any(part.startswith("_") for part in info.name.split("."))]
    listings = {}
    for name in modules:
        module = importlib.import_module(name)
        listings[name] = list(getattr(module, "__all__", ()))
    return listings


def _check_reference(package):
    """Every (module, name) of every public ``__all__`` has one entry, documented somewhere."""
    listings = _public_listings(package)
    pages = gen_api.pages(package)
    markdown = "\n".join(gen_api.page_markdown(p) for p in pages)
    blocks = re.findall(r"^::: (\S+)$", markdown, re.MULTILINE)
    entries = {}
    for page in pages:
        for section in page.sections:
            for entry in section.entries:
                key = (entry.module, entry.name)
                assert key not in entries, f"{key} has two entries"
                entries[key] = entry
    expected = {(m, n) for m, names in listings.items() for n in names}
    assert set(entries) == expected, (
        f"missing: {sorted(expected - set(entries))}; extra: {sorted(set(entries) - expected)}")
    for (module, name), entry in entries.items():
        obj = getattr(importlib.import_module(module), name)
        assert _resolve(entry.target) is obj, f"{module}.{name} documented as {entry.target}"
        # Documented once: one ``::: target`` block in the whole reference.
        assert blocks.count(entry.target) == 1, (entry.target, blocks.count(entry.target))
    # Every public module with names of its own opens a section.
    for module, names in listings.items():
        if names:
            assert module in blocks
    return pages, entries


def test_every_public_name_of_dgsgld_has_one_entry_in_the_api_reference():
    pages, entries = _check_reference("dgsgld")
    assert pages[0].path == "reference/index.md"
    assert {e.name for e in entries.values() if e.module == "dgsgld"} == set(dgsgld.__all__)
    # A top-level name renders on the page of the module that defines it, linked from the top.
    sample = entries[("dgsgld", "sample")]
    assert not sample.rendered
    assert (dgsgld.sample.__module__ + ".").startswith(sample.target.rsplit(".", 1)[0] + ".")


def _make_package(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


@pytest.fixture
def toy_package(tmp_path, monkeypatch):
    """A package shaped like dgsgld: re-exports, a private module, a package without __all__."""
    name = "toypkg_docs_site"
    _make_package(tmp_path, {
        f"{name}/__init__.py": '''
            """Top."""
            from ._core import run as run
            from . import models as models
            from .shapes import Circle as Circle
            __all__ = ["run", "models", "Circle"]
            ''',
        f"{name}/_core.py": '''
            def run():
                """Run."""
            ''',
        f"{name}/models.py": '''
            """Models."""
            from ._helpers import fit as fit
            SIZE = 1
            LIMIT = 1
            __all__ = ["fit", "SIZE", "LIMIT"]
            ''',
        f"{name}/_helpers.py": '''
            def fit():
                """Fit."""
            ''',
        f"{name}/shapes/__init__.py": '''
            """Shapes: no __all__ of its own."""
            from .circle import Circle as Circle
            ''',
        f"{name}/shapes/circle.py": '''
            class Circle:
                """A circle."""
            __all__ = ["Circle"]
            ''',
        f"{name}/shapes/_private.py": '''
            __all__ = ["hidden"]
            hidden = 0
            ''',
    })
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name, tmp_path
    for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[module]


def test_the_reference_follows_the_package_layout(toy_package):
    name, _ = toy_package
    pages, entries = _check_reference(name)
    assert [p.path for p in pages] == ["reference/index.md", "reference/models.md",
                                       "reference/shapes.md"]
    # `run` is defined in a private module and listed at the top only: rendered there.
    assert entries[(name, "run")].rendered
    # `Circle` is rendered with its defining module's page and linked from the top.
    assert entries[(f"{name}.shapes.circle", "Circle")].rendered
    assert entries[(name, "Circle")].target == f"{name}.shapes.circle.Circle"
    assert not entries[(name, "Circle")].rendered
    assert f"[`Circle`][{name}.shapes.circle.Circle]: A circle." in gen_api.page_markdown(pages[0])
    # A public module listed in an __all__ points to its own page.
    assert entries[(name, "models")].target == f"{name}.models"
    assert not entries[(name, "models")].rendered
    # Two constants equal as objects (the int 1) stay two entries.
    assert entries[(f"{name}.models", "SIZE")].rendered
    assert entries[(f"{name}.models", "LIMIT")].rendered
    # Private modules have no page nor section.
    assert all("_private" not in s.module for p in pages for s in p.sections)


def test_a_new_public_name_gets_an_entry(toy_package):
    name, root = toy_package
    (root / name / "models.py").write_text(
        '"""Models."""\nfrom ._helpers import fit as fit\n'
        'def predict():\n    """Predict."""\n__all__ = ["fit", "predict"]\n')
    _, entries = _check_reference(name)
    assert entries[(f"{name}.models", "predict")].rendered


def test_a_name_in_all_that_does_not_exist_is_refused(toy_package):
    name, root = toy_package
    (root / name / "models.py").write_text('"""Models."""\n__all__ = ["missing"]\n')
    with pytest.raises(AttributeError, match="models.__all__ lists 'missing'"):
        gen_api.pages(name)


def test_links_out_of_docs_point_to_the_sites_copies(tmp_path):
    _make_package(tmp_path, {
        "docs/guide.md": '''
            # Guide
            See [the notebook](../bench/README.md#timing), [an example](../examples/run.py),
            [a figure](figures/a.png), [gone](../nowhere.md) and [the web](https://example.org).

            ```python
            text = "[not a link](../bench/README.md)"
            ```
            ''',
        "docs/figures/a.png": "",
        "bench/README.md": "Back to [the guide](../docs/guide.md) and [raw](data.json).\n",
        "bench/data.json": "{}",
        "examples/run.py": "print('```')\n",
        "README.md": "Read [the guide](docs/guide.md).\n",
    })
    site = gen_repo_pages.Site(tmp_path, {"README.md": "index.md"})
    pages = site.pages()
    guide = pages["guide.md"][1]
    assert "[the notebook](bench/README.md#timing)" in guide
    assert "[an example](examples/run.md)" in guide
    assert "[a figure](figures/a.png)" in guide
    assert "[gone](../nowhere.md)" in guide  # left for mkdocs --strict to report
    assert "[the web](https://example.org)" in guide
    assert '"[not a link](../bench/README.md)"' in guide  # code is left alone
    assert pages["bench/README.md"][1] == (
        "Back to [the guide](../guide.md) and [raw](data.md).\n")
    assert pages["index.md"][1] == "Read [the guide](guide.md).\n"
    # A source file shown as a page, fenced past its own backtick runs.
    assert pages["examples/run.md"][1].startswith("# `examples/run.py`\n\n````python\n")
    assert "figures/a.png" not in pages  # unchanged docs files are not copied


def test_a_repository_file_cannot_replace_a_docs_page(tmp_path):
    _make_package(tmp_path, {"docs/index.md": "# Home\n", "README.md": "# Readme\n"})
    with pytest.raises(ValueError, match="would replace docs/index.md"):
        gen_repo_pages.Site(tmp_path, {"README.md": "index.md"})


def test_every_relative_link_of_the_site_reaches_a_page_or_file():
    site = gen_repo_pages.Site()
    changed = site.pages()
    files = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*") if p.is_file()}
    texts = {f: (DOCS / f).read_text() for f in files if f.endswith(".md")}
    texts.update({f: text for f, (_, text) in changed.items()})
    files |= set(changed)
    files |= {page.path for page in gen_api.pages("dgsgld")}  # the generated API reference
    for site_path, text in texts.items():
        text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
        for link in re.findall(r"\]\(([^)\s]+)", text):
            path = link.split("#")[0]
            if not path or re.match(r"^[a-z]+:", path):
                continue
            target = posixpath.normpath(posixpath.join(posixpath.dirname(site_path), path))
            assert target in files, f"{site_path}: {link}"


def test_grouped_arguments_are_split_per_name():
    pytest.importorskip("griffe")
    griffe_dgsgld = _load("griffe_dgsgld")
    text = textwrap.dedent("""\
        Summary.

        Args:
            mean1, mean2: ``(..., d)``,
                the means.
            cov (Array): ``(..., d, d)``.

        Returns:
            a, b: not an item list: kept.
        """)
    assert griffe_dgsgld.split_grouped_args(text) == textwrap.dedent("""\
        Summary.

        Args:
            mean1: ``(..., d)``,
                the means.
            mean2: ``(..., d)``,
                the means.
            cov (Array): ``(..., d, d)``.

        Returns:
            a, b: not an item list: kept.""")


def test_sphinx_roles_become_links_checked_where_the_reference_documents_the_name(
        tmp_path, caplog):
    griffe = pytest.importorskip("griffe")
    griffe_dgsgld = _load("griffe_dgsgld")
    _make_package(tmp_path, {
        "toyroles/__init__.py": '''
            """See :func:`f`, :func:`~toyroles.a.g`, :mod:`toyroles._private`,
            :func:`numpy.sum`, :func:`toyroles.a.gone` and :meth:`~.Box.size`::

                f()

            Example:
                >>> f()
            """
            from .a import f as f
            from .a import Box as Box
            __all__ = ["f", "Box"]
            ''',
        "toyroles/a.py": '''
            def f():
                """F."""
            def g():
                """G."""
            class Box:
                """A box.

                Attributes:
                    width, height: in metres.
                """
                width: float
                height: float
                def size(self):
                    """Width times height."""
            __all__ = ["f", "Box"]
            ''',
        "toyroles/_private.py": "",
    })
    loader = griffe.GriffeLoader(
        search_paths=[str(tmp_path)],
        extensions=griffe.load_extensions(griffe_dgsgld.DocstringConventions))
    with caplog.at_level("WARNING"):
        package = loader.load("toyroles")
    text = package.docstring.value
    assert "[`f`][toyroles.a.f]" in text  # in an __all__: a link mkdocs --strict checks
    assert '<autoref optional identifier="toyroles.a.g"><code>g</code></autoref>' in text
    assert '<autoref optional identifier="toyroles._private">' in text
    assert "`numpy.sum`" in text and "[`numpy.sum`]" not in text  # another library: code
    assert "`toyroles.a.gone`" in text
    assert any("toyroles.a.gone" in r.getMessage() and "no such object" in r.getMessage()
               for r in caplog.records)
    assert "[`size`][toyroles.a.Box.size]" in text  # `.name`: found by its ending
    assert "[`size`][toyroles.a.Box.size]:\n\n    f()" in text  # reST's `::` read as `:`
    assert "\nExamples:\n    >>> f()" in text
    # The grouped attributes became the fields' own docstrings.
    box = package["a.Box"]
    assert box.members["width"].docstring.value == "in metres."
    assert box.members["height"].docstring.value == "in metres."
