"""A report's Markdown as the site's HTML: real tables, GitHub's heading ids, plots beside the page
or a gap that names the missing one, raw HTML escaped."""

from html.parser import HTMLParser

from suite.reporting.pages import render_markdown, section, slug

REPORT = """# LMS benchmark report

Generated 2026-11-21 from 4 records in `results`
(2 hosts: alpha, beta).

## The answer

| host   | images/sec           |
|--------|----------------------|
| alpha  | 12.5 ± 0.25 <b>x</b> |

## googlenet — 64px, batch 2, fp32, LMS off

![Training throughput](throughput.png)

![Simulated memory: googlenet](memory-aaaa.png)

## Hosts

## Hosts
"""


class Cells(HTMLParser):
    """The text of every <td>, and every tag's id."""

    def __init__(self):
        super().__init__()
        self.cells, self.ids, self._in = [], [], False

    def handle_starttag(self, tag, attrs):
        self._in = self._in or tag == "td"
        self.cells += [""] if tag == "td" else []
        self.ids += [value for name, value in attrs if name == "id"]

    def handle_endtag(self, tag):
        self._in = self._in and tag != "td"

    def handle_data(self, data):
        if self._in:
            self.cells[-1] += data


def parsed(body: str) -> Cells:
    cells = Cells()
    cells.feed(body)
    return cells


def test_tables_are_html_tables_and_headings_have_githubs_ids(tmp_path):
    (tmp_path / "throughput.png").write_bytes(b"\x89PNG")
    page = render_markdown(REPORT, tmp_path)
    assert page.title == "LMS benchmark report" and page.title_id == "lms-benchmark-report"
    assert page.summary == "Generated 2026-11-21 from 4 records in results (2 hosts: alpha, beta)."
    found = parsed(page.body)
    assert found.cells == ["alpha", "12.5 ± 0.25 <b>x</b>"]  # raw HTML is text, not markup
    assert "<b>" not in page.body
    assert found.ids == [
        "the-answer",
        "googlenet--64px-batch-2-fp32-lms-off",
        "hosts",
        "hosts-1",
    ]
    heading = "googlenet — 64px, batch 2, fp32, LMS off"
    assert page.contents[1] == (slug(heading), heading) == (found.ids[1], heading)
    assert "<h1" not in page.body  # the title is the page's own heading


def test_a_plot_beside_the_page_is_an_image_and_a_missing_one_a_gap(tmp_path):
    (tmp_path / "throughput.png").write_bytes(b"\x89PNG")
    page = render_markdown(REPORT, tmp_path, prefix="2026-11-21/")
    assert '<img src="2026-11-21/throughput.png" alt="Training throughput"' in page.body
    assert page.missing == ["memory-aaaa.png"]
    assert (
        '<span class="gap">Plot missing: Simulated memory: googlenet (memory-aaaa.png was not '
        "published)</span>" in page.body
    )
    assert "memory-aaaa.png" not in page.body.split("Plot missing")[0]


def test_a_shown_section_keeps_its_tables_one_level_down(tmp_path):
    answer = section(REPORT, "The answer")
    assert answer.startswith("## The answer\n") and "## googlenet" not in answer
    page = render_markdown(answer, tmp_path, demote=1)
    assert page.body.startswith('<h3 id="the-answer">The answer</h3>')
    assert parsed(page.body).cells[0] == "alpha"
    assert section(REPORT, "Regression check") is None
