"""The committed block reports are what README's command builds from the committed records alone:
`scheda-reproduce table=T scale=cpu "phases=[report]" report_dir=...` from the checkout's root,
with no data and no run folder. A change to how a report reads records or words its verdicts shows
here as a diff of the committed file (rebuild it with that command and commit it with the change);
only the line that dates the build may differ."""

from __future__ import annotations

import difflib
import re

import pytest

from helpers import REPO, run_module

RESULTS = REPO / "docs" / "results"
BUILT = re.compile(r"^(- Built from the records of .*), \d{4}-\d\d-\d\d \d\d:\d\d;", re.M)


LINKED = re.compile(r"\]\(([^)]*/)?([^/)]+\.png)\)")  # an image the report links from where it is built


def undated(text: str) -> str:
    """The text without the build's date, and each image linked by its file's name (the report links a
    record's image relative to the folder it is built in)."""
    return LINKED.sub(r"](\2)", BUILT.sub(r"\1, <when>;", text))


@pytest.mark.parametrize("table", ["features", "stacked", "paper_settings"])
def test_a_committed_report_is_what_its_records_give(table, tmp_path):
    args = [f"table={table}", "scale=cpu", "phases=[report]", f"report_dir={tmp_path}",
            f"out_dir={tmp_path / 'out'}"]  # its log there, not in the checkout's outputs/
    proc = run_module("scheda.protocol.reproduce", args, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    raw = (RESULTS / f"{table}_cpu.md").read_text()
    assert BUILT.search(raw), "the committed report no longer says when it was built"
    built, committed = undated((tmp_path / f"{table}_cpu.md").read_text()), undated(raw)
    assert built == committed, "".join(difflib.unified_diff(committed.splitlines(True), built.splitlines(True),
                                                            f"docs/results/{table}_cpu.md", "rebuilt"))
