"""A griffe extension for two conventions of dgsgld's docstrings (loaded by ``mkdocs.yml``).

- Grouped items: ``mean1, mean2: (..., d).`` in an ``Args:`` or ``Attributes:`` section
  documents both names; griffe's Google parser reads one name per item, so the item is split into
  one per name, each with the whole description.
- reStructuredText's ``::`` before a literal block reads as ``:`` (the indented block is code in
  Markdown too).
- ``Example:`` sections are read as ``Examples:`` (griffe's name for a section of ``>>>``
  code; singular, it would be a note whose ``>>>`` lines read as Markdown quotes).
- A class's ``Attributes:`` section describes its fields: each description becomes the docstring
  of that field (when it has none), which the reference shows under the field's own heading
  (``mkdocs.yml`` hides the section's table, which would say it twice).
- Sphinx roles: ``:func:`sample```, ``:class:`~dgsgld.networks.Schedule```, ``:mod:`...``` become
  cross-references, the name resolved in the docstring's scope as Python would; ``~`` shows the
  last component only (``link_roles`` says which kind of link each name gets).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:func|class|mod|meth|attr|data|obj|exc|const):`(~?)([^`]+)`")
_SECTION = re.compile(r"^(\s*)([A-Z][A-Za-z ]*):\s*$")
_ITEM_SECTIONS = {"Args", "Arguments", "Parameters", "Params", "Keyword Args",
                  "Keyword Arguments", "Other Parameters", "Attributes"}
_GROUPED = re.compile(r"^(\s+)(\*{0,2}\w+(?:\s*,\s*\*{0,2}\w+)+)(\s*(?:\([^)]*\))?:.*)$")


def split_grouped_args(text: str) -> str:
    """``text`` with every ``a, b: description`` item of an arguments or attributes section
    split per name."""
    lines = text.splitlines()
    out: list[str] = []
    section_indent = None
    i = 0
    while i < len(lines):
        line = lines[i]
        section = _SECTION.match(line)
        if section:
            section_indent = len(section.group(1)) if section.group(2) in _ITEM_SECTIONS else None
            out.append(line)
            i += 1
            continue
        if section_indent is not None and line.strip() and (
                len(line) - len(line.lstrip()) <= section_indent):
            section_indent = None
        grouped = _GROUPED.match(line) if section_indent is not None else None
        if not grouped:
            out.append(line)
            i += 1
            continue
        indent = len(grouped.group(1))
        body = [grouped.group(3)]
        i += 1
        while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip())
                                  > indent):
            body.append(lines[i])
            i += 1
        while body and not body[-1].strip():
            body.pop()
            i -= 1
        for name in re.split(r"\s*,\s*", grouped.group(2)):
            out.append(grouped.group(1) + name + body[0])
            out.extend(body[1:])
    return "\n".join(out)


def literal_markers(text: str) -> str:
    """``text`` with each ``::`` that opens an indented literal block written ``:``."""
    text = re.sub(r"^[ \t]*::[ \t]*\n(?=[ \t]*\n)", "", text, flags=re.MULTILINE)
    return re.sub(r"(?<=\S)::[ \t]*\n(?=[ \t]*\n)", ":\n", text)


def plural_examples(text: str) -> str:
    """``text`` with its ``Example:`` section titles written ``Examples:``."""
    return re.sub(r"^(\s*)Example:[ \t]*$", r"\1Examples:", text, flags=re.MULTILINE)


def _get(collection: griffe.ModulesCollection, path: str) -> griffe.Object | griffe.Alias | None:
    try:
        return collection[path]
    except (KeyError, ValueError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None


def resolve(obj: griffe.Object | griffe.Alias, name: str,
            collection: griffe.ModulesCollection) -> str:
    """The full path ``name`` means in ``obj``'s docstring (as written when nothing resolves it).

    As Sphinx reads it: the name's first component in the scope of ``obj`` (a class's inherited
    members included), then of its module; ``.name`` is also looked for as the end of any path
    in ``obj``'s package.
    """
    dotted = name.startswith(".")
    name = name.lstrip(".")
    head, _, rest = name.partition(".")
    for scope in [obj] if obj.is_module else [obj, obj.parent]:
        if scope is None:
            continue
        if scope.is_class and head in scope.all_members:
            resolved = scope.all_members[head].path
        else:
            try:
                resolved = scope.resolve(head)
            except (griffe.NameResolutionError, griffe.AliasResolutionError, AttributeError):
                continue
        return f"{resolved}.{rest}" if rest else resolved
    if dotted:
        ends = [o.path for o in _objects(collection[obj.package.path])
                if o.path.endswith("." + name)]
        if len(ends) == 1:
            return ends[0]
    return name


def is_documented(collection: griffe.ModulesCollection, path: str) -> bool:
    """Whether the reference documents ``path`` under that name.

    True for a public module of the package, a name in a public module's ``__all__`` and a
    public member with a docstring of such a class, inherited or not (``docs/gen_api.py`` and
    ``mkdocs.yml`` render exactly these).
    """
    parts = path.split(".")
    if any(part.startswith("_") for part in parts):
        return False
    current = _get(collection, parts[0])
    for part in parts[1:]:
        child = _get(collection, f"{current.path}.{part}")
        if child is None:
            return False
        if current.is_module and not child.is_module:
            exports = {str(e) for e in current.exports or ()}
            if part not in exports:
                return False
        elif current.is_class and child.docstring is None:
            return False  # members without a docstring are not rendered
        elif not (current.is_module or current.is_class):
            return False
        current = child
    return True


def link_roles(text: str, obj: griffe.Object | griffe.Alias,
               collection: griffe.ModulesCollection, package: str) -> str:
    """``text`` with its Sphinx roles written as Markdown cross-references (or code).

    A name the reference documents becomes a cross-reference that ``mkdocs build --strict``
    checks; another public or private name of the package an optional one (a link where that
    object is rendered under some name, code otherwise); a name of another library code. A name
    that points into the package but to nothing there is logged as a warning.
    """

    def replace(match: re.Match[str]) -> str:
        short, name = match.group(1) == "~", match.group(2).strip().removesuffix("()")
        title = name.rsplit(".", 1)[-1] if short else name
        path = resolve(obj, name, collection)
        if not (path == package or path.startswith(package + ".")):
            return f"`{title}`"
        if _get(collection, path) is None:
            where = f"{obj.relative_filepath}:{obj.lineno}" if obj.lineno else obj.path
            griffe.logger.warning(
                f"{where}: the docstring of {obj.path} refers to {match.group(0)}, "
                f"which is {path}: no such object")
            return f"`{title}`"
        if is_documented(collection, path):
            return f"[`{title}`][{path}]"
        return f'<autoref optional identifier="{path}"><code>{title}</code></autoref>'

    return _ROLE.sub(replace, text)


def document_fields(cls: griffe.Class) -> None:
    """Give each field of ``cls`` without a docstring its description from ``Attributes:``."""
    sections = griffe.parse_google(cls.docstring, warnings=False)
    for section in sections:
        if section.kind is not griffe.DocstringSectionKind.attributes:
            continue
        for item in section.value:
            member = cls.all_members.get(item.name)
            if member is not None and not member.is_alias and member.docstring is None:
                member.docstring = griffe.Docstring(item.description, parent=member)


class DocstringConventions(griffe.Extension):
    """Rewrites each docstring of the package once it is loaded (see the module docstring)."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if pkg.extra.get("griffe_dgsgld", {}).get("done"):
            return
        pkg.extra["griffe_dgsgld"]["done"] = True
        objects = _objects(pkg)
        # Fields first get their docstrings, so that the links below see which are rendered.
        for obj in objects:
            if obj.docstring is not None:
                text = split_grouped_args(obj.docstring.value)
                obj.docstring.value = literal_markers(plural_examples(text))
                if obj.is_class:
                    document_fields(obj)
        for obj in objects:
            if obj.docstring is not None:
                obj.docstring.value = link_roles(obj.docstring.value, obj,
                                                 loader.modules_collection, pkg.name)


    # griffe 1.x calls the hook by this name.
    on_package_loaded = on_package


def _objects(obj: griffe.Object, seen: set[int] | None = None) -> list[griffe.Object]:
    """``obj`` and every object defined below it (aliases left out)."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return []
    seen.add(id(obj))
    found = [obj]
    for member in obj.members.values():
        if not member.is_alias:
            found += _objects(member, seen)
    return found
