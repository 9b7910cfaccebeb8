"""The API reference's pages, generated from the package's ``__all__`` lists.

Run by mkdocs-gen-files at build time (``mkdocs.yml``); ``python docs/gen_api.py`` prints the
pages and their entries. Nothing here names a subpackage: the pages follow whatever the package
holds when it is imported, so a module that moves or a name that is added needs no edit here.

- A *public module* is ``dgsgld`` or any module below it whose dotted name has no component
  starting with ``_``. Its public names are its ``__all__`` (a module without ``__all__`` lists
  none of its own, only through its public submodules).
- Pages: ``reference/index.md`` for ``dgsgld.__all__``, and one page for each public module
  directly below ``dgsgld`` with a section for it and one for each public module below it.
- Each object is documented once, on its *home* page: the page whose module contains the one that
  defines it (``obj.__module__``), else the first page that lists it. Every other ``__all__`` that
  lists the same object gets a link to that entry (on the same page nothing more is written).
  A public module listed in an ``__all__`` links to its own page or section.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import types
from dataclasses import dataclass, field

PACKAGE = "dgsgld"
REFERENCE = "reference"


@dataclass(frozen=True)
class Entry:
    """One name of one ``__all__``: ``module.name``, documented at ``target``.

    Attributes:
        module: the dotted name of the module whose ``__all__`` lists the name.
        name: the name.
        target: the identifier whose rendering documents the object (``module.name`` of its
            first listing on its home page, or a public module's own name).
        rendered: whether this entry is the one that renders ``target`` (``::: target``).
    """

    module: str
    name: str
    target: str
    rendered: bool


@dataclass
class Section:
    """A public module's part of a page: its heading, then its entries in ``__all__`` order."""

    module: str
    entries: list[Entry] = field(default_factory=list)


@dataclass
class Page:
    """One page of the reference: its path below the docs folder, its title and its sections."""

    path: str
    title: str
    sections: list[Section]


def _is_public(name: str) -> bool:
    return not any(part.startswith("_") for part in name.split("."))


def public_modules(package: str = PACKAGE) -> list[str]:
    """Every public module of ``package``, the package first, then sorted by dotted name.

    Imports each of them (that is how their ``__all__`` is read).
    """
    root = importlib.import_module(package)
    names = [package]
    for info in pkgutil.walk_packages(root.__path__, package + ".", onerror=_raise):
        if _is_public(info.name):
            names.append(info.name)
    for name in names:
        importlib.import_module(name)
    return [package, *sorted(names[1:])]


def _raise(name: str) -> None:
    raise ImportError(f"gen_api: importing {name} failed while listing the public modules")


def public_names(module: str) -> list[str]:
    """The names in ``module.__all__`` (none when it has no ``__all__``), each checked to exist."""
    mod = importlib.import_module(module)
    names = list(getattr(mod, "__all__", ()))
    for name in names:
        if not hasattr(mod, name):
            raise AttributeError(f"{module}.__all__ lists {name!r}, which {module} does not define")
    return names


def _key(obj: object, name: str) -> object:
    # A module, class or function is the same entry under any name; a value (a constant) only
    # under the same name, since equal small ints and strings are one object in CPython.
    if isinstance(obj, types.ModuleType) or hasattr(obj, "__qualname__"):
        return id(obj)
    return (id(obj), name)


def _defined_in(obj: object) -> str | None:
    defined_in = getattr(obj, "__module__", None)
    return defined_in if isinstance(defined_in, str) else None


def _within(module: str, top: str) -> bool:
    return module == top or module.startswith(top + ".")


def pages(package: str = PACKAGE) -> list[Page]:
    """The reference's pages: the top-level ``__all__`` first, then one per public child module.

    Every name of every public ``__all__`` is an entry of exactly one section; an object listed in
    several ``__all__`` lists is rendered once (``Entry.rendered``) and linked from the others.
    """
    modules = public_modules(package)
    tops = [m for m in modules if m.count(".") == package.count(".") + 1]
    for top in tops:
        if top.rsplit(".", 1)[1] in ("index", "SUMMARY"):
            raise ValueError(f"gen_api: the page of {top} would take the name of another page")
    # The sections of each page, in order: the page's module, then the public modules below it.
    sections = {package: [package], **{t: [m for m in modules if _within(m, t)] for t in tops}}
    listed = {m: [(name, getattr(importlib.import_module(m), name)) for name in public_names(m)]
              for m in modules}

    # Home page: that of the module defining the object if it lists it, else the first listing
    # it (child pages in order, the top-level page last).
    candidates: dict[object, list[str]] = {}
    defined_in: dict[object, str | None] = {}
    for page in [*tops, package]:
        for m in sections[page]:
            for name, obj in listed[m]:
                key = _key(obj, name)
                defined_in[key] = _defined_in(obj)
                if page not in candidates.setdefault(key, []):
                    candidates[key].append(page)
    home = {key: next((t for t in listing if t != package and defined_in[key]
                       and _within(defined_in[key], t)), listing[0])
            for key, listing in candidates.items()}

    # The identifier documenting each object: a public module's own name, else the object's
    # first listing on its home page.
    target: dict[object, str] = {}
    for page in [*tops, package]:
        for m in sections[page]:
            for name, obj in listed[m]:
                key = _key(obj, name)
                if isinstance(obj, types.ModuleType):
                    if obj.__name__ not in modules:
                        raise ValueError(f"{m}.__all__ lists {name!r}, the module "
                                         f"{obj.__name__}, which is not a public module of "
                                         f"{package}")
                    target[key] = obj.__name__
                elif home[key] == page:
                    target.setdefault(key, f"{m}.{name}")

    result = []
    for page in [package, *tops]:
        page_sections = []
        for m in sections[page]:
            section = Section(m)
            for name, obj in listed[m]:
                ident = target[_key(obj, name)]
                rendered = ident == f"{m}.{name}" and not isinstance(obj, types.ModuleType)
                section.entries.append(Entry(m, name, ident, rendered))
            page_sections.append(section)
        path = (f"{REFERENCE}/index.md" if page == package
                else f"{REFERENCE}/{page.split('.')[-1]}.md")
        result.append(Page(path, page, page_sections))
    return result


def _summary(obj: object) -> str:
    """The first sentence of ``obj``'s docstring, its Sphinx roles written as code."""
    doc = " ".join((inspect.getdoc(obj) or "").split("\n\n", 1)[0].split())
    doc = re.sub(r":(?:py:)?[a-z]+:`~?\.?([^`]+)`", r"``\1``", doc)
    sentence = re.match(r"(.*?[.!?])(?:\s|$)", doc)
    return sentence.group(1) if sentence else doc


def _link(entry: Entry) -> str:
    summary = _summary(getattr(importlib.import_module(entry.module), entry.name))
    return f"- [`{entry.name}`][{entry.target}]" + (f": {summary}" if summary else "")


def page_markdown(page: Page) -> str:
    """The Markdown of one page: mkdocstrings' ``::: identifier`` blocks and links to the rest.

    A section opens with its module's docstring; then each object whose home it is, in
    ``__all__`` order; then a list of links to the entries of the names documented elsewhere.
    The top-level page lists every name of its ``__all__`` first, as the index of the API.
    """
    here = {s.module for s in page.sections}
    here |= {e.target for s in page.sections for e in s.entries if e.rendered}
    top = page.path == f"{REFERENCE}/index.md"
    lines = []
    for i, section in enumerate(page.sections):
        level = 1 if i == 0 else 2
        lines += [f"::: {section.module}", "    options:", "      members: false",
                  "      show_root_full_path: true",
                  "      show_root_heading: true", f"      heading_level: {level}", ""]
        if top:
            lines += [_link(entry) for entry in section.entries] + [""]
        for entry in section.entries:
            if entry.rendered:
                lines += [f"::: {entry.target}", "    options:",
                          f"      heading_level: {level + 1}", ""]
        links = [_link(e) for e in section.entries if not e.rendered and e.target not in here]
        if links and not top:
            lines += ["Documented elsewhere:", "", *links, ""]
    return "\n".join(lines)


def write_pages() -> None:
    """Write every page, and the API section's navigation, into mkdocs-gen-files' docs folder."""
    import mkdocs_gen_files

    all_pages = pages()
    nav = []
    for page in all_pages:
        with mkdocs_gen_files.open(page.path, "w") as f:
            f.write(page_markdown(page))
        rel = page.path.split("/", 1)[1]
        nav.append(f"* [{page.title}]({rel})")
        mkdocs_gen_files.set_edit_path(page.path, "gen_api.py")
    with mkdocs_gen_files.open(f"{REFERENCE}/SUMMARY.md", "w") as f:
        f.write("\n".join(nav) + "\n")


if __name__ == "<run_path>":  # run by mkdocs-gen-files (runpy.run_path)
    write_pages()
elif __name__ == "__main__":
    for p in pages():
        shown = sum(e.rendered for s in p.sections for e in s.entries)
        total = sum(len(s.entries) for s in p.sections)
        print(f"{p.path}: {len(p.sections)} sections, {total} entries, {shown} rendered here")
