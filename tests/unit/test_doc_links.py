"""Every relative link in the READMEs and docs/ resolves (issue 28, item 6), without mkdocs.

`make docs` (mkdocs, `strict: true`) checks the links between the pages of docs/; the READMEs
live outside docs/, so this test checks them too: README.md, docs/**, and the README of each part
(hookcore, drivers, examples, helm, bench). A link resolves when its file exists inside the
checkout and, for a Markdown target with an anchor, that file has a heading with that anchor as
GitHub spells it (the READMEs are read there). The README stays short; docs/ has the rest, every
page in mkdocs.yml's nav."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
README_LIMIT = 15_000  # bytes: issue 28's "a README a newcomer reads in five minutes"


def checked_files(root: Path) -> list[Path]:
    """The Markdown files whose links are checked."""
    files = [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
    for part in ("hookcore", "drivers", "examples", "helm", "bench"):
        files += sorted(p for p in (root / part).rglob("README.md")
                        if not {"build", "results", "node_modules"} & set(p.relative_to(root).parts))
    return [f for f in files if f.is_file()]


FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"", re.IGNORECASE)


def prose_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) of the text outside code: fenced blocks and indented blocks are
    skipped, code spans blanked (a link written in code is an example, not a link)."""
    in_fence = False
    in_indented = False
    previous_blank = True
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            in_fence = not in_fence
            previous_blank = False
            continue
        if in_fence:
            continue
        blank = not line.strip()
        if not blank:  # a blank line neither opens nor closes an indented block
            indented = line.startswith(("    ", "\t"))
            in_indented = indented and (previous_blank or in_indented)
        previous_blank = blank
        if in_indented or blank:
            continue
        yield number, CODE_SPAN.sub("", line)


def links(text: str) -> Iterator[tuple[int, str]]:
    """(line number, target) of every link and reference definition in the prose."""
    for number, line in prose_lines(text):
        for m in INLINE_LINK.finditer(line):
            yield number, m.group(1)
        m = REFERENCE_DEF.match(line)
        if m:
            yield number, m.group(1)


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text lowercased, punctuation but `-` and `_`
    dropped, each space a `-`."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = text.replace("`", "").replace("*", "")
    text = unicodedata.normalize("NFC", text).strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of a Markdown file: its headings' (numbered on repeats, as GitHub does) and
    explicit `<a name=...>`/`<a id=...>`."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    text = path.read_text(encoding="utf-8")
    for _, line in prose_lines(text):
        m = HEADING.match(line)
        if m:
            slug = github_slug(m.group(2))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            found.add(slug if n == 0 else f"{slug}-{n}")
        found.update(HTML_ANCHOR.findall(line))
    return found


def broken_links(root: Path, files: list[Path]) -> list[str]:
    """One line per link of `files` that does not resolve inside `root`."""
    problems: list[str] = []
    anchor_cache: dict[Path, set[str]] = {}
    root = root.resolve()
    for f in files:
        rel = f.relative_to(root)
        for number, target in links(f.read_text(encoding="utf-8")):
            where = f"{rel}:{number}: {target}"
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):  # http:, https:, mailto:
                continue
            if target.startswith("/"):
                problems.append(f"{where}: an absolute path; write it relative to {rel.parent}/")
                continue
            path_part, _, anchor = target.partition("#")
            dest = (f.parent / path_part).resolve() if path_part else f.resolve()
            if not dest.is_relative_to(root):
                problems.append(f"{where}: points outside the checkout")
            elif not dest.exists():
                problems.append(f"{where}: no such file or directory")
            elif anchor and dest.suffix == ".md":
                if dest not in anchor_cache:
                    anchor_cache[dest] = anchors(dest)
                if anchor not in anchor_cache[dest]:
                    problems.append(f"{where}: {dest.relative_to(root)} has no heading with anchor #{anchor}")
    return problems


def test_every_relative_link_resolves() -> None:
    files = checked_files(ROOT)
    assert ROOT / "README.md" in files and ROOT / "docs" / "index.md" in files
    assert ROOT / "hookcore" / "README.md" in files and ROOT / "drivers" / "example" / "README.md" in files
    problems = broken_links(ROOT, files)
    assert not problems, "broken links (fix the target, or the link):\n" + "\n".join(problems)


def test_the_checker_finds_each_kind_of_broken_link(tmp_path: Path) -> None:
    """The check above passes only because the links are good: on a tree with one broken link of
    each kind it names each, and nothing else (links in code are examples, not links)."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text("# A page\n\n## Sharing modes: hook, MPS\n\nText.\n")
    (tmp_path / "README.md").write_text(
        "# Readme\n\n"
        "[good](docs/page.md) [good anchor](docs/page.md#sharing-modes-hook-mps) [own](#readme)\n"
        "[missing file](docs/nope.md) and [missing anchor](docs/page.md#nope)\n"
        "[outside](../elsewhere.md) [absolute](/docs/page.md) [web](https://example.com/x)\n"
        "[ref]: docs/gone.md\n\n"
        "`[in code](docs/nope.md)`\n\n"
        "    [indented code](docs/nope.md)\n\n"
        "```\n[fenced](docs/nope.md)\n```\n"
    )
    problems = broken_links(tmp_path, [tmp_path / "README.md", tmp_path / "docs" / "page.md"])
    assert [p.split(": ")[1] for p in problems] == [
        "docs/nope.md", "docs/page.md#nope", "../elsewhere.md", "/docs/page.md", "docs/gone.md"], problems
    assert "README.md:4: docs/nope.md: no such file or directory" in problems
    assert "README.md:4: docs/page.md#nope: docs/page.md has no heading with anchor #nope" in problems


@pytest.mark.parametrize(("heading", "slug"), [
    ("The watchdog: what really runs on the devices", "the-watchdog-what-really-runs-on-the-devices"),
    ("Devices shared by a hook: `SharedDeviceDriver`", "devices-shared-by-a-hook-shareddevicedriver"),
    ("Built and installed here, with no registry", "built-and-installed-here-with-no-registry"),
    ("What a claim's containers get (CDI edits)", "what-a-claims-containers-get-cdi-edits"),
])
def test_github_slug(heading: str, slug: str) -> None:
    assert github_slug(heading) == slug


def test_the_readme_stays_short() -> None:
    size = len((ROOT / "README.md").read_bytes())
    assert size < README_LIMIT, (f"README.md is {size} bytes (limit {README_LIMIT}): move the detail into a page of docs/"
                                 " and link it")


def test_every_page_is_in_the_nav() -> None:
    """mkdocs warns (and under `strict: true` fails) on a page outside the nav; this holds it
    without mkdocs, so a page added to docs/ is reachable from the site."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    assert config["strict"] is True and config["docs_dir"] == "docs"

    def pages(nav: object) -> Iterator[str]:
        if isinstance(nav, str):
            yield nav
        elif isinstance(nav, list):
            for item in nav:
                yield from pages(item)
        elif isinstance(nav, dict):
            for value in nav.values():
                yield from pages(value)

    in_nav = set(pages(config["nav"]))
    on_disk = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    assert on_disk == in_nav, f"docs/ pages not in mkdocs.yml's nav: {sorted(on_disk - in_nav)}; " \
                              f"nav entries with no page: {sorted(in_nav - on_disk)}"
