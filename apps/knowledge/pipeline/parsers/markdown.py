"""Markdown: ATX headings make sections; front matter, HTML comments, <script>/<style> blocks and
`:::` container markers are dropped; code fences are kept whole (a `#` inside one is not a heading).
"""

from __future__ import annotations

import re

from apps.knowledge.pipeline.parsers.base import (
    Block,
    ParagraphCount,
    ParsedDocument,
    Section,
    TextBudget,
    has_visible_text,
)
from apps.knowledge.pipeline.parsers.text import text_decode

# Every pattern here runs on whatever a file puts in a heading line, so none may backtrack over
# the line for each position it starts at: a pattern starts only at a delimiter and scans no
# further than the next one (or a possessive run), and trailing anchors and hashes are stripped
# in plain Python. A 200 KB line of `[[[[` or `](](` costs time linear in its length.
_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*))?$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_CONTAINER = re.compile(r"^ {0,3}:::")
_RAW_BLOCK_OPEN = re.compile(r"^\s*<(script|style)\b[^>]*>", re.IGNORECASE)
_FRONT_MATTER = {"---": ("---", "..."), "+++": ("+++",)}

# \x00 separates the text between code spans (decoded text holds none): no pattern crosses it.
_IMAGE = re.compile(r"!\[([^\[\]\x00]*)\]\([^()\x00]*\)")
_LINK = re.compile(r"\[([^\[\]\x00]*)\]\([^()\x00]*\)")
_TAG = re.compile(r"(?<!\\)</?[A-Za-z][^<>\x00]*>")
_CODE_SPAN = re.compile(r"(?<!`)(`++)([^`]+)\1")
_EMPHASIS = (
    re.compile(r"(\*\*|\*)([^\s*\x00](?:[^*\x00]*[^\s*\x00])?)\1"),
    re.compile(r"(__|_)([^\s_\x00](?:[^_\x00]*[^\s_\x00])?)\1"),
)
_ESCAPED_STAR = re.compile(r"(?<!\s)\s*\\\*")
_ESCAPE = re.compile(r"\\([\\`*_{}\[\]()#+\-.!<>|~])")
_SPACES = re.compile(r"\s+")
# A longer "heading" is a paragraph that starts with a hash: its text stays, as text.
HEADING_MAX_CHARS = 1000


def _strip_anchor(title: str) -> str:
    """Without a trailing `{#anchor}` (the braces holding no `}`)."""
    stripped = title.rstrip()
    if not stripped.endswith("}"):
        return title
    body = stripped[:-1]
    start = body.find("{#", body.rfind("}") + 1)
    return body[:start].rstrip() if start >= 0 else title


def _strip_closing_hashes(title: str) -> str:
    """Without ATX closing hashes: a run of `#` at the end, alone or after white space."""
    stripped = title.rstrip()
    before = stripped.rstrip("#")
    if before == stripped or (before and not before[-1].isspace()):
        return title
    return before.rstrip()


def _clean_inline(text: str) -> str:
    text = _ESCAPED_STAR.sub("", text)
    text = _IMAGE.sub(r"\1", text)
    text = _LINK.sub(r"\1", text)
    text = _TAG.sub("", text)
    for emphasis in _EMPHASIS:
        text = emphasis.sub(r"\2", text)
    return _ESCAPE.sub(r"\1", text)


def heading_clean(raw: str) -> str:
    """A heading's plain title: no `{#anchor}`, closing hashes, markup, `\\*` markers or HTML tags;
    inline code keeps its content (`<slot>` stays) and escapes are resolved (`PropType\\<T>`)."""
    title = _strip_closing_hashes(_strip_anchor(raw))
    # [text, ticks, code, text, ticks, code, …, text]: the texts are cleaned in one pass.
    pieces = _CODE_SPAN.split(title)
    texts = _clean_inline("\x00".join(pieces[0::3])).split("\x00")
    codes = [code.strip() for code in pieces[2::3]]
    parts = [texts[0]]
    for code, text in zip(codes, texts[1:], strict=True):
        parts.extend((code, text))
    return _SPACES.sub(" ", "".join(parts)).strip()


def _drop_front_matter(lines: list[str]) -> list[str]:
    if not lines:
        return lines
    closers = _FRONT_MATTER.get(lines[0].strip())
    if not closers:
        return lines
    for index in range(1, min(len(lines), 500)):
        if lines[index].strip() in closers:
            return lines[index + 1 :]
    return lines


def _strip_comments(line: str, in_comment: bool) -> tuple[str, bool]:
    """Remove <!-- … --> from one line; returns the rest and whether a comment stays open. Only a
    comment that starts the line stays open past it: one after text closes on its line or is text
    (prose that writes `<!--` opened a comment no `-->` closed, and the rest of the file was lost)."""
    out: list[str] = []
    after_text = False
    position = 0
    while position < len(line):
        if in_comment:
            end = line.find("-->", position)
            if end < 0:
                return "".join(out), True
            position = end + 3
            in_comment = False
        else:
            start = line.find("<!--", position)
            after_text = after_text or bool(line[position:max(start, position)].strip())
            if start < 0 or (after_text and line.find("-->", start + 4) < 0):
                out.append(line[position:])
                break
            out.append(line[position:start])
            position = start + 4
            in_comment = True
    return "".join(out), in_comment


class _Builder:
    def __init__(self) -> None:
        self.sections: list[Section] = []
        self.stack: list[tuple[int, str]] = []
        self.blocks: list[Block] = []
        self.count = ParagraphCount()
        self.paragraph: list[str] = []

    def flush_paragraph(self) -> None:
        lines = [line.rstrip() for line in self.paragraph]
        self.paragraph = []
        text = "\n".join(lines).strip("\n")
        if not text.strip():
            return
        is_table = all(line.lstrip().startswith("|") for line in lines if line.strip())
        self.add(Block(text=text.strip(), kind="table" if is_table else "paragraph"))

    def add(self, block: Block) -> None:
        self.count.add()
        self.blocks.append(block)

    def flush_section(self) -> None:
        self.flush_paragraph()
        if self.blocks:
            headings = tuple(title for _, title in self.stack if title)
            self.sections.append(Section(headings=headings, blocks=tuple(self.blocks)))
        self.blocks = []

    def heading(self, level: int, title: str) -> None:
        self.flush_section()
        while self.stack and self.stack[-1][0] >= level:
            self.stack.pop()
        self.stack.append((level, title))


# Lines between two calls of the budget's tick: 5 million heading lines (20 MB) take a minute or
# two, and the pipeline's heartbeat rides on the tick (a run silent for
# KNOWLEDGE_HEARTBEAT_STALE_SECONDS is handed to another worker).
TICK_LINES = 10_000


def parse_text(text: str, budget: TextBudget | None = None) -> ParsedDocument:
    lines = _drop_front_matter(text.split("\n"))
    builder = _Builder()
    fence: str | None = None
    fence_lines: list[str] = []
    raw_block: str | None = None
    in_comment = False
    for number, line in enumerate(lines, start=1):
        if budget is not None and not number % TICK_LINES:
            budget.tick()
        if fence is not None:
            fence_lines.append(line)
            stripped = line.strip()
            if stripped.startswith(fence) and set(stripped) == {fence[0]}:
                builder.add(Block(text="\n".join(fence_lines), kind="code"))
                fence, fence_lines = None, []
            continue
        if raw_block is not None:
            if f"</{raw_block}" in line.lower():
                raw_block = None
            continue
        line, in_comment = _strip_comments(line, in_comment)
        if not line.strip():
            builder.flush_paragraph()
            continue
        opened = _FENCE.match(line)
        if opened:
            builder.flush_paragraph()
            fence, fence_lines = opened.group(1), [line]
            continue
        raw = _RAW_BLOCK_OPEN.match(line)
        if raw:
            builder.flush_paragraph()
            if f"</{raw.group(1).lower()}" not in line.lower():
                raw_block = raw.group(1).lower()
            continue
        heading = _HEADING.match(line) if len(line) <= HEADING_MAX_CHARS else None
        if heading:
            builder.heading(len(heading.group(1)), heading_clean((heading.group(2) or "").rstrip(" \t")))
            continue
        if _CONTAINER.match(line):
            builder.flush_paragraph()
            continue
        builder.paragraph.append(line)
    if fence is not None:  # an unclosed fence runs to the end, as in CommonMark
        builder.add(Block(text="\n".join(fence_lines), kind="code"))
    builder.flush_section()
    return ParsedDocument(file_type="markdown", sections=tuple(builder.sections))


def parse(data: bytes, budget: TextBudget) -> ParsedDocument:
    text = text_decode(data)
    budget.spend(len(text))  # no more text than the file holds: counted once
    return parse_text(text, budget)


def check(data: bytes) -> bool:
    """Decodes (ConversionFailed when nothing fits); whether the text holds anything visible."""
    return has_visible_text(text_decode(data))
