"""A grading's result: one ``Row`` per exercise, gathered in a ``Report``.

The report prints as a text table (``str(report)``), renders as an HTML table in a notebook
(``_repr_html_``) and gives the JSON of ``npformer learn check --json`` (``to_json``). Under each row
that failed or raised comes its message: for a failure the grader's diagnosis (at most three lines),
for an error the learner's own traceback.
"""
from __future__ import annotations

import html
from dataclasses import dataclass

STATUSES = ("pass", "fail", "error", "todo")


@dataclass(frozen=True)
class Row:
    """One exercise's result. ``message`` is "" on pass and todo; ``output`` is what the learner's code
    printed while it was graded (captured, so that it never breaks the table)."""

    name: str
    status: str
    message: str = ""
    output: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {', '.join(STATUSES)}, got {self.status!r}")


@dataclass(frozen=True)
class Report:
    """The rows in the lesson's order, and ``note``: a line about how they were graded, or ""."""

    rows: tuple[Row, ...]
    note: str = ""

    @property
    def exit_code(self) -> int:
        """0 when no exercise failed or raised (todo counts as neither), else 1."""
        return int(any(r.status in ("fail", "error") for r in self.rows))

    def counts(self) -> dict[str, int]:
        return {s: sum(r.status == s for r in self.rows) for s in STATUSES}

    def summary(self) -> str:
        """e.g. "3 pass, 1 fail, 0 error, 8 todo"."""
        return ", ".join(f"{n} {s}" for s, n in self.counts().items())

    def to_json(self) -> dict:
        """``{"exercises": [{"name", "status", "message"}, ...]}``; the message is "" on pass and todo."""
        return {"exercises": [{"name": r.name, "status": r.status, "message": _shown(r)} for r in self.rows]}

    def text(self) -> str:
        width = max([len("exercise")] + [len(r.name) for r in self.rows])
        lines = [f"{'exercise':<{width}}  status", f"{'-' * width}  ------"]
        previous = ""
        for r in self.rows:
            lines.append(f"{r.name:<{width}}  {r.status}")
            shown = _shown(r)
            if shown and shown == previous:             # e.g. a syntax error: every exercise's, said once
                lines.append("    (the same as above)")
            else:
                lines += ["    " + line for line in shown.splitlines()]
            previous = shown
        lines.append(self.summary())
        if self.note:
            lines.append(self.note)
        return "\n".join(lines)

    __str__ = text

    def __repr__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        colour = {"pass": "#1a7f37", "fail": "#cf222e", "error": "#9a6700", "todo": "#57606a"}
        body = []
        for r in self.rows:
            message = html.escape(_shown(r))
            body.append(f'<tr><td><code>{html.escape(r.name)}</code></td>'
                        f'<td style="color:{colour[r.status]};font-weight:bold">{r.status}</td>'
                        f'<td><pre style="margin:0;white-space:pre-wrap">{message}</pre></td></tr>')
        note = f"<p>{html.escape(self.note)}</p>" if self.note else ""
        return ('<table class="npformer-learn"><thead><tr><th>exercise</th><th>status</th><th>diagnosis</th></tr>'
                f'</thead><tbody>{"".join(body)}</tbody></table><p>{html.escape(self.summary())}</p>{note}')


def _shown(row: Row) -> str:
    return row.message if row.status in ("fail", "error") else ""
