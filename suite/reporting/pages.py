"""The published site's pages: a report's Markdown (the source the Jinja template renders) as an
HTML page, and the site's index.

markdown-it-py turns the Markdown into HTML: CommonMark, plus the GitHub tables tabulate writes
(its "table" rule), raw HTML escaped. Headings get GitHub's ids, so a link into a report's
section is the same on the site and on a forge that shows the Markdown. Plots stay files beside
the page, referenced relatively as the Markdown does: a page loads from disk (file://) or any
static host, fetches nothing else (the style sheet is inlined), and a plot missing from the
report's folder becomes a visible gap instead of a broken image.
"""

import html
import re
from dataclasses import dataclass, field
from pathlib import Path

import jinja2
from markdown_it import MarkdownIt

from suite.reporting.report import TEMPLATES


@dataclass
class Page:
    """One report as the site shows it."""

    title: str
    title_id: str
    summary: str  # the report's first paragraph, as text
    body: str  # HTML of everything after the title
    contents: list[tuple[str, str]] = field(default_factory=list)  # (id, text) of each section
    missing: list[str] = field(default_factory=list)  # plots referred to but absent
    images: list[tuple[str, str]] = field(default_factory=list)  # (src, alt) of those shown


def slug(text: str) -> str:
    """GitHub's heading id: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def _text(inline) -> str:
    parts = [
        " " if c.type in ("softbreak", "hardbreak") else c.content
        for c in inline.children or ()
        if c.type in ("text", "code_inline", "softbreak", "hardbreak")
    ]
    return "".join(parts)


def _image(self, tokens, idx, options, env):
    """A plot that is a file beside the page, else a visible gap saying which one is missing."""
    token = tokens[idx]
    src = token.attrGet("src") or ""
    alt = self.renderInlineAsText(token.children or [], options, env)
    if (env["folder"] / src).is_file() and "://" not in src and not src.startswith("/"):
        token.attrSet("src", env["prefix"] + src)
        env["images"].append((env["prefix"] + src, alt))
        return self.image(tokens, idx, options, env)
    env["missing"].append(src)
    gap = f"Plot missing: {alt} ({src} was not published)"
    return f'<span class="gap">{html.escape(gap)}</span>'


def _markdown() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    md.add_render_rule("image", _image)
    # a wide table scrolls inside the page instead of widening it
    md.add_render_rule("table_open", lambda *_: '<div class="scroll"><table>\n')
    md.add_render_rule("table_close", lambda *_: "</table></div>\n")
    return md


def render_markdown(text: str, folder: Path, prefix: str = "", demote: int = 0) -> Page:
    """A report's Markdown as a Page. `folder` holds its plots; `prefix` is put before their
    names (the page is elsewhere: the index); `demote` lowers every heading by that many
    levels (a section shown inside another page)."""
    md = _markdown()
    tokens = md.parse(text)
    seen: dict[str, int] = {}
    title, title_id, summary, contents, start = "", "", "", [], 0
    for i, token in enumerate(tokens):
        if token.type == "heading_open":
            heading = _text(tokens[i + 1])
            base = slug(heading)
            seen[base] = seen.get(base, -1) + 1
            ident = f"{base}-{seen[base]}" if seen[base] else base
            token.attrSet("id", ident)
            if token.tag == "h1" and not title:
                title, title_id, start = heading, ident, i + 3  # open, inline, close
            elif token.tag == "h2":
                contents.append((ident, heading))
        elif token.type == "paragraph_open" and title and not summary:
            summary = " ".join(_text(tokens[i + 1]).split())
    for token in tokens:
        if token.type in ("heading_open", "heading_close") and demote:
            token.tag = f"h{min(int(token.tag[1]) + demote, 6)}"
    env = {"folder": Path(folder), "prefix": prefix, "missing": [], "images": []}
    body = md.renderer.render(tokens[start:], md.options, env)
    missing = sorted(set(env["missing"]))
    return Page(title, title_id, summary, body, contents, missing, env["images"])


def section(text: str, heading: str) -> str | None:
    """The Markdown of a report's `## heading` section, up to the next `## `, or None."""
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    return f"## {heading}\n{match.group(1)}" if match else None


def _render(template: str, **values) -> str:
    """An HTML template of reports/templates/site/, every value escaped unless marked safe."""
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        undefined=jinja2.StrictUndefined,
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    return environment.get_template(f"site/{template}").render(**values)


def page_html(page: Page, title: str, source: str, published: str) -> str:
    """A page of the site one folder below the index (a run's report, the history), from the
    Markdown file `source` beside it: a contents list and the plots it lacks said first."""
    nav = [("Latest", "../index.html"), ("History", "../index.html#history")]
    return _render(
        "page.html.j2", title=title, page=page, source=source, published=published, nav=nav
    )


def index_html(title: str, runs: list, latest: dict | None, history: dict, published: str) -> str:
    """The site's index: the newest run's answer first, the history, then every run."""
    nav = [("Latest", "#latest"), ("History", "#history"), ("All runs", "#runs")]
    return _render(
        "index.html.j2",
        title=title,
        runs=runs,
        latest=latest,
        history=history,
        published=published,
        nav=nav,
    )
