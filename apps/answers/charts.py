"""Inline SVG charts for the RAG report page (the console runs offline: no chart library, no CDN).

Each function takes plain numbers and returns SVG markup built with format_html, so every label
is escaped."""

from __future__ import annotations

from collections.abc import Sequence

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

WIDTH = 720
HEIGHT = 180
PAD_LEFT = 44
PAD_RIGHT = 12
PAD_TOP = 14
PAD_BOTTOM = 28


def _n(value: float) -> str:
    return f"{value:.1f}"


def _x(i: int, n: int) -> float:
    inner = WIDTH - PAD_LEFT - PAD_RIGHT
    return PAD_LEFT + (i + 0.5) * inner / max(n, 1)


def _y(value: float, top: float) -> float:
    inner = HEIGHT - PAD_TOP - PAD_BOTTOM
    return PAD_TOP + inner * (1 - (value / top if top else 0))


def _frame(*, title: str, labels: Sequence[str], top_label: str, element_id: str, body: SafeString) -> SafeString:
    first, last = (labels[0], labels[-1]) if labels else ("", "")
    base = HEIGHT - PAD_BOTTOM
    return format_html(
        '<svg id="{}" class="rag-chart" role="img" aria-label="{}" viewBox="0 0 {} {}" width="100%" '
        'preserveAspectRatio="xMidYMid meet" xmlns="http://www.w3.org/2000/svg">'
        '<title>{}</title>'
        '<line x1="{}" y1="{}" x2="{}" y2="{}" class="rag-axis"/>'
        '<line x1="{}" y1="{}" x2="{}" y2="{}" class="rag-axis"/>'
        '<text x="{}" y="{}" class="rag-tick" text-anchor="end">{}</text>'
        '<text x="{}" y="{}" class="rag-tick" text-anchor="end">0</text>'
        '<text x="{}" y="{}" class="rag-tick" text-anchor="start">{}</text>'
        '<text x="{}" y="{}" class="rag-tick" text-anchor="end">{}</text>'
        '{}</svg>',
        element_id, title, WIDTH, HEIGHT, title,
        PAD_LEFT, PAD_TOP, PAD_LEFT, base, PAD_LEFT, base, WIDTH - PAD_RIGHT, base,
        PAD_LEFT - 6, PAD_TOP + 4, top_label, PAD_LEFT - 6, base + 4,
        PAD_LEFT, HEIGHT - 8, first, WIDTH - PAD_RIGHT, HEIGHT - 8, last, body,
    )


def volume_bars(*, labels: Sequence[str], values: Sequence[int], element_id: str = "rag-volume-chart") -> SafeString:
    """Questions per day as bars, each with a tooltip naming its day and count."""
    n = len(values)
    top = max([*values, 1])
    inner = WIDTH - PAD_LEFT - PAD_RIGHT
    bar = max(1.0, inner / max(n, 1) * 0.7)
    base = HEIGHT - PAD_BOTTOM
    bars = format_html_join(
        "", '<rect class="rag-bar" x="{}" y="{}" width="{}" height="{}"><title>{}: {}</title></rect>',
        ((_n(_x(i, n) - bar / 2), _n(_y(v, top)), _n(bar), _n(base - _y(v, top)), labels[i], v)
         for i, v in enumerate(values)),
    )
    return _frame(title="Questions per day", labels=labels, top_label=str(top), element_id=element_id, body=bars)


def rate_line(*, labels: Sequence[str], rates: Sequence[float | None],
              element_id: str = "rag-helpful-chart", title: str = "Helpful rate per day") -> SafeString:
    """A 0–100 % line through the days that have a rate; days without one leave a gap."""
    n = len(rates)
    segments: list[list[tuple[float, float]]] = [[]]
    dots = []
    for i, rate in enumerate(rates):
        if rate is None:
            if segments[-1]:
                segments.append([])
            continue
        point = (_x(i, n), _y(rate, 1.0))
        segments[-1].append(point)
        dots.append((point[0], point[1], labels[i], round(rate * 100)))
    lines = format_html_join(
        "", '<polyline class="rag-line" fill="none" points="{}"/>',
        ((" ".join(f"{x:.1f},{y:.1f}" for x, y in segment),) for segment in segments if len(segment) > 1),
    )
    points = format_html_join(
        "", '<circle class="rag-dot" cx="{}" cy="{}" r="3"><title>{}: {} %</title></circle>',
        ((_n(x), _n(y), label, rate) for x, y, label, rate in dots))
    body = mark_safe(str(lines) + str(points))  # noqa: S308 -- both built by format_html_join
    return _frame(title=title, labels=labels, top_label="100 %", element_id=element_id, body=body)
