"""The README stays a short guide, and every relative link in README.md, docs/*.md and
benchmarks/README.md leads to a file of the repository (and every `#anchor` to a heading).
No network: web links are not followed."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README_MAX_BYTES = 12_500

_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.S | re.M)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REF_DEF = re.compile(r"^\s*\[[^\]]+\]:\s*(\S+)", re.M)
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$", re.M)


def documents() -> list[Path]:
    docs = sorted((ROOT / "docs").glob("*.md")) if (ROOT / "docs").is_dir() else []
    return [ROOT / "README.md", ROOT / "benchmarks" / "README.md", *docs]


def _prose(text: str) -> str:
    """The text without fenced code blocks and inline code (links there are examples)."""
    return _INLINE_CODE.sub("", _FENCE.sub("", text))


def links(text: str) -> list[str]:
    prose = _prose(text)
    return [*_LINK.findall(prose), *_REF_DEF.findall(prose)]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: link markup dropped, lower case, punctuation removed, spaces to '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)     # links keep their text
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())        # backticks, '*', ':' ... go; '_' stays
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    seen: dict[str, int] = {}
    out: set[str] = set()
    for _, title in _HEADING.findall(_FENCE.sub("", text)):
        base = slug(title)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """'target: why' for each relative link in `path` that does not resolve."""
    text = path.read_text(encoding="utf-8")
    bad = []
    for target in links(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):      # http:, https:, mailto: ...
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path.resolve()
        try:
            dest.relative_to(root.resolve())
        except ValueError:
            bad.append(f"{target}: points outside the repository")
            continue
        if not dest.exists():
            bad.append(f"{target}: no such file")
            continue
        if anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text(encoding="utf-8")):
            bad.append(f"{target}: no heading #{anchor} in {dest.relative_to(root.resolve())}")
    return bad


def test_readme_is_a_short_guide() -> None:
    size = (ROOT / "README.md").stat().st_size
    assert size <= README_MAX_BYTES, f"README.md is {size} bytes; keep it under {README_MAX_BYTES} (move detail to docs/)"


@pytest.mark.parametrize("path", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path: Path) -> None:
    assert path.is_file(), f"{path.relative_to(ROOT)} is missing"
    assert broken_links(path) == []


def test_readme_links_the_docs_and_the_picture() -> None:
    found = links((ROOT / "README.md").read_text(encoding="utf-8"))
    assert "assets/explorer.png" in found
    assert any(t.startswith("docs/") for t in found)


def test_the_checker_finds_broken_links(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A title\n\n## Second, part (2)\n", encoding="utf-8")
    doc = tmp_path / "README.md"
    doc.write_text("[ok](docs/a.md) [ok](docs/a.md#second-part-2) [ok](#top) [web](https://example.org/x)\n"
                   "[gone](docs/b.md) [bad anchor](docs/a.md#third) [out](../elsewhere.md)\n"
                   "`[code](not/checked.md)`\n\n```\n[fenced](not/checked.md)\n```\n\n# Top\n",
                   encoding="utf-8")
    assert broken_links(doc, root=tmp_path) == [
        "docs/b.md: no such file",
        "docs/a.md#third: no heading #third in docs/a.md",
        "../elsewhere.md: points outside the repository",
    ]


def _front_matter() -> dict[str, str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert text.startswith("---\n"), "README.md must open with the Space's YAML front matter"
    block = text[4:text.index("\n---\n", 4)]
    fields = {}
    for line in block.splitlines():
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip().strip('"')
    return fields


def test_space_front_matter() -> None:
    fields = _front_matter()
    for key in ("title", "emoji", "colorFrom", "colorTo", "sdk", "sdk_version", "python_version",
                "app_file", "short_description", "license", "pinned"):
        assert fields.get(key), f"README front matter lacks {key}"
    assert fields["sdk"] == "gradio" and fields["app_file"] == "app.py"
    assert fields["python_version"] == "3.11" and fields["license"] == "apache-2.0"
    assert len(fields["short_description"]) <= 60, "a Space's short_description is at most 60 characters"
    pinned = re.search(r"^gradio==(\S+)$", (ROOT / "requirements.txt").read_text(encoding="utf-8"), re.M)
    assert pinned and fields["sdk_version"] == pinned.group(1), \
        "sdk_version must be the gradio version requirements.txt pins"


def test_slugs_follow_github() -> None:
    assert slug("Model drafters: `draft_model`, `self_draft`, `glide`") == "model-drafters-draft_model-self_draft-glide"
    assert slug("Why several rows cost so much here: `cpu_linear.py`") == "why-several-rows-cost-so-much-here-cpu_linearpy"
    assert anchors("# A\n\n## A\n\n```\n# not a heading\n```\n") == {"a", "a-1"}


# --- the house on paper: docs/ARCHITECTURE.md and docs/development.md name every module ---------

PACKAGE = ROOT / "specviz"


def module_paths(package: Path = PACKAGE) -> list[str]:
    """Every module of the package as its path under specviz/: "core/tree.py", "__init__.py"."""
    return sorted(p.relative_to(package).as_posix() for p in package.rglob("*.py"))


def unnamed_modules(text: str, paths: list[str]) -> list[str]:
    """The paths that `text` never names, as `core/tree.py` or `specviz/core/tree.py` (a path
    inside a longer one, `cli/errors.py` for `errors.py`, does not count)."""
    return [p for p in paths
            if not re.search(rf"(?:(?<=specviz/)|(?<![\w/.])){re.escape(p)}(?![\w/])", text)]


def test_architecture_names_every_module() -> None:
    """docs/ARCHITECTURE.md's diagram gives every module its line: a new module without one fails here."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    missing = unnamed_modules(text, module_paths())
    assert not missing, f"docs/ARCHITECTURE.md does not name {missing}: give each a line in the diagram"


def _layout_entries(text: str) -> dict[str, str]:
    """docs/development.md's project layout: entry (a folder under specviz/ like "drafters/kit/",
    or a root module like "errors.py") -> its text, continuation lines included."""
    block = text.split("## Project layout", 1)[1]
    block = block[block.index("```"):].split("```")[1]
    entries: dict[str, str] = {}
    inside = False
    current = None
    for line in block.splitlines():
        if line.startswith("specviz/"):
            inside = True
            continue
        if inside and not line.startswith("  "):
            inside = False
        if not inside:
            continue
        match = re.match(r"^  (\S+)\s*(.*)$", line)
        if match:
            current = match.group(1)
            entries[current] = match.group(2)
        elif current is not None:
            entries[current] += " " + line.strip()
    return entries


def unlisted_in_layout(text: str, paths: list[str]) -> list[str]:
    """Modules docs/development.md's layout does not list: a root module needs its own entry; a
    module in a folder needs its name (without .py) in its folder's entry."""
    entries = _layout_entries(text)
    missing = []
    for path in paths:
        folder, _, name = path.rpartition("/")
        if not folder:
            if path not in entries:
                missing.append(path)
        elif f"{folder}/" not in entries:
            missing.append(f"{folder}/ (the folder)")
        elif name != "__init__.py" and not re.search(rf"(?<![\w.]){re.escape(name[:-3])}(?![\w])",
                                                       entries[f"{folder}/"]):
            missing.append(path)
    return sorted(set(missing))


def test_development_lists_every_module_by_folder() -> None:
    text = (ROOT / "docs" / "development.md").read_text(encoding="utf-8")
    missing = unlisted_in_layout(text, module_paths())
    assert not missing, f"docs/development.md's project layout does not list {missing}"


def test_a_missing_module_would_be_found() -> None:
    paths = ["__init__.py", "errors.py", "cli/errors.py", "core/tree.py", "core/__init__.py", "viz/tree.py"]
    assert unnamed_modules("  errors.py  x\n  specviz/core/tree.py\n  __init__.py\n cli/errors.py", paths) \
        == ["core/__init__.py", "viz/tree.py"]
    layout = ("## Project layout\n\n```\napp.py   x\nspecviz/\n  __init__.py  the API\n  core/   tree, flat_tree,\n"
              "          trace\n  viz/    the tree\ndocs/    y\n```\n")
    assert unlisted_in_layout(layout, paths + ["core/trace.py", "core/timing.py", "drafters/kit/base.py"]) == [
        "cli/ (the folder)", "core/timing.py", "drafters/kit/ (the folder)", "errors.py"]


def test_doc_paths_into_the_package_exist() -> None:
    """Every `specviz/....py` path the README and docs mention is a file (moved modules are renamed
    there, not left at their 0.9 place)."""
    stale = []
    for path in [*documents(), ROOT / "examples" / "specviz-echo-drafter" / "README.md"]:
        for mention in sorted(set(re.findall(r"(?<![\w/.-])specviz/[\w/]+\.py\b", path.read_text(encoding="utf-8")))):
            if not (ROOT / mention).is_file():
                stale.append(f"{path.relative_to(ROOT)}: {mention}")
    assert not stale, stale
