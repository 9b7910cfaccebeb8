"""Repository files outside ``docs/`` in the site, and the links to them.

Run by mkdocs-gen-files at build time (``mkdocs.yml``). The guides link to files by their place
in the repository (``../benchmarks/README.md``, ``../examples/bnn_equinox.py``) so that the links
work where the repository is browsed; mkdocs only knows ``docs/``. So:

- ``PAGES`` puts chosen repository files into the site (the README is the home page).
- Any other repository file that a page links to is put into the site too: a Markdown file as a
  page at its repository path, any other file as a page showing its source at its path with the
  suffix replaced by ``.md`` (``examples/bnn_equinox.py`` -> ``examples/bnn_equinox.md``).
- Every relative link of these pages and of the pages in ``docs/`` is rewritten to the site path
  of its target. A link to a file that is nowhere is left as written, so that
  ``mkdocs build --strict`` reports it.

The sources stay as they are; only the site's copies change.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = "docs"

# Repository files (outside docs/) shown in the site, by site path.
PAGES = {
    "README.md": "index.md",
    "benchmarks/README.md": "benchmarks/README.md",
}

_LANGUAGES = {".py": "python", ".sh": "bash", ".toml": "toml", ".yml": "yaml", ".yaml": "yaml",
              ".json": "json", ".txt": "text"}
# An inline link or image target, ``](target)`` or ``](target "title")``, and a reference
# definition, ``[label]: target``.
_INLINE = re.compile(r"(\]\()([^)\s]+)((?:\s+\"[^\"]*\")?\))")
_DEFINITION = re.compile(r"^(\s{0,3}\[[^\]]+\]:\s+)(\S+)(.*)$", re.MULTILINE)
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")


def _is_relative(target: str) -> bool:
    return not (target.startswith(("#", "/", "mailto:")) or re.match(r"^[a-zA-Z][\w+.-]*:", target))


def _split_fragment(target: str) -> tuple[str, str]:
    for mark in ("#", "?"):
        if mark in target:
            i = target.index(mark)
            return target[:i], target[i:]
    return target, ""


class Site:
    """The site paths of repository files, and the pages made from those outside ``docs/``.

    Attributes:
        root: the repository root.
        mirrored: repository path -> site path, for each file outside ``docs/`` in the site.
    """

    def __init__(self, root: Path = ROOT, pages: dict[str, str] | None = None):
        self.root = root
        self.mirrored = dict(PAGES if pages is None else pages)
        self._docs = {p.relative_to(root / DOCS).as_posix()
                      for p in (root / DOCS).rglob("*") if p.is_file()}
        for repo_path, site_path in self.mirrored.items():
            self._check_free(repo_path, site_path)

    def _check_free(self, repo_path: str, site_path: str) -> None:
        if site_path in self._docs:
            raise ValueError(f"gen_repo_pages: {repo_path} would replace docs/{site_path}")
        taken = [r for r, s in self.mirrored.items() if s == site_path and r != repo_path]
        if taken:
            raise ValueError(f"gen_repo_pages: {repo_path} and {taken[0]} both map to {site_path}")

    def site_path(self, repo_path: str) -> str | None:
        """Where ``repo_path`` is in the site; a file outside ``docs/`` is added to the site."""
        if repo_path.startswith(DOCS + "/"):
            return repo_path[len(DOCS) + 1:]
        if repo_path not in self.mirrored:
            if repo_path.startswith("../") or not (self.root / repo_path).is_file():
                return None
            stem, suffix = posixpath.splitext(repo_path)
            site = repo_path if suffix == ".md" else stem + ".md"
            self._check_free(repo_path, site)
            self.mirrored[repo_path] = site
        return self.mirrored[repo_path]

    def rewrite(self, text: str, repo_path: str) -> str:
        """``text`` of the file at ``repo_path`` with its relative links pointing into the site."""
        here = posixpath.dirname(self.site_path(repo_path))
        there = posixpath.dirname(repo_path)

        def target(link: str) -> str:
            if not _is_relative(link):
                return link
            path, fragment = _split_fragment(link)
            if not path:
                return link
            site = self.site_path(posixpath.normpath(posixpath.join(there, path)))
            if site is None:
                return link
            return posixpath.relpath(site, here or ".") + fragment

        out, in_fence = [], None
        for line in text.splitlines(keepends=True):
            fence = _FENCE.match(line)
            if fence and (in_fence is None or fence.group(1)[0] == in_fence[0]
                          and len(fence.group(1)) >= len(in_fence)):
                in_fence = fence.group(1) if in_fence is None else None
                out.append(line)
            elif in_fence is not None:
                out.append(line)
            else:
                line = _INLINE.sub(lambda m: m.group(1) + target(m.group(2)) + m.group(3), line)
                out.append(_DEFINITION.sub(
                    lambda m: m.group(1) + target(m.group(2)) + m.group(3), line))
        return "".join(out)

    def page(self, repo_path: str) -> str:
        """The site's page for a repository file outside ``docs/``."""
        text = (self.root / repo_path).read_text(encoding="utf-8")
        if repo_path.endswith(".md"):
            return self.rewrite(text, repo_path)
        runs = [len(r) for r in re.findall(r"`{3,}", text)]
        fence = "`" * max(3, *(n + 1 for n in runs)) if runs else "```"
        language = _LANGUAGES.get(posixpath.splitext(repo_path)[1], "text")
        return f"# `{repo_path}`\n\n{fence}{language}\n{text.rstrip()}\n{fence}\n"

    def pages(self) -> dict[str, tuple[str, str]]:
        """Site path -> (repository path, content) of every page that differs from its source.

        The ``docs/`` pages whose links change, and every mirrored file (including those that
        the links reach, followed until no new file is added).
        """
        result = {}
        for site in sorted(self._docs):
            if site.endswith(".md"):
                text = (self.root / DOCS / site).read_text(encoding="utf-8")
                new = self.rewrite(text, f"{DOCS}/{site}")
                if new != text:
                    result[site] = (f"{DOCS}/{site}", new)
        done: set[str] = set()
        while pending := [r for r in self.mirrored if r not in done]:
            for repo_path in pending:
                done.add(repo_path)
                result[self.mirrored[repo_path]] = (repo_path, self.page(repo_path))
        return result


def write_pages() -> None:
    """Write the pages into mkdocs-gen-files' docs folder, each editable at its source."""
    import mkdocs_gen_files

    for site, (repo_path, content) in Site().pages().items():
        with mkdocs_gen_files.open(site, "w") as f:
            f.write(content)
        mkdocs_gen_files.set_edit_path(site, posixpath.relpath(repo_path, DOCS))


if __name__ == "<run_path>":  # run by mkdocs-gen-files (runpy.run_path)
    write_pages()
elif __name__ == "__main__":
    for site, (repo_path, _) in Site().pages().items():
        print(f"{site} <- {repo_path}")
