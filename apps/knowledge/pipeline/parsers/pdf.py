"""PDF: the text of each page, with its page number, NFKC-normalised, under recovered headings.

Headings come from the outline (bookmarks) when the PDF has one: each entry is placed on its page
at the line that carries its title (or at the top of the page when no line does), its level being
its depth in the outline. Without an outline, lines set notably larger than the body text are
headings, ranked by size (the largest is level 1). Encrypted or unreadable files fail.

A PDF breaks a paragraph's lines where its page ran out of width; those breaks are joined
(`_join_lines`), the others kept as written.
"""

from __future__ import annotations

import bisect
import io
import logging
import math
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass

from django.conf import settings

from apps.knowledge.pipeline.parsers.base import (
    Block,
    ConversionFailed,
    DocumentTooLarge,
    ParsedDocument,
    Section,
    TextBudget,
    has_visible_text,
)
from apps.knowledge.pipeline.parsers.text import paragraphs
from apps.knowledge.pipeline.terms import CJK_CHARS

logging.getLogger("pypdf").setLevel(logging.ERROR)
logger = logging.getLogger("bailinghub.knowledge")

# pypdf raises NotImplementedError for what it cannot decode: a security handler other than the
# standard one (certificate or Microsoft IRM protection) and stream filters it does not know.
_READ_ERRORS = (ValueError, KeyError, TypeError, AttributeError, IndexError, OSError, RecursionError,
                NotImplementedError)

# NFKC folds ligatures (ﬁ), Kangxi radicals and CJK compatibility ideographs (⼈ → 人) and
# full-width letters and digits. It would also turn full-width CJK punctuation into ASCII, and
# the chunker ends a sentence at ！？； only in their full-width forms (at .!? only before a
# space), so those and the ideographic space and ellipsis are kept as written.
_KEPT = "\u3000\u2026\uff01\uff08\uff09\uff0c\uff0e\uff1a\uff1b\uff1f\uff3b\uff3d\uff5b\uff5d\uff5e"
_TO_NORMALISE = re.compile(f"[^{_KEPT}]+")
_SPACES = re.compile(r"\s+")
_CJK = re.compile(f"[{CJK_CHARS}]")
# A table of contents' entries ("2 Scope . . . . . 7") are set like headings but are not.
_DOT_LEADER = re.compile(r"(?:\.\s?){4,}|…{2,}")
_NUMBERING = re.compile(
    r"(?:chapter|appendix|part|section|第)?[0-9a-z一二三四五六七八九十百零〇.\-:()、章节篇部条]{1,12}"
)
_NUMBERING_MAX_CHARS = len("appendix") + 12
# A line set at least this much larger than the body is a heading candidate.
HEADING_SIZE_RATIO = 1.15
HEADING_MAX_CHARS = 120
# An outline entry's title is cut to this (NUL-terminated titles, as some writers make, lose the NUL).
OUTLINE_TITLE_MAX_CHARS = 300
MAX_HEADING_LEVELS = 6
MAX_TITLE_LINES = 3
# When headings would hold more than this share of the text, sizes do not mark headings here.
MAX_HEADING_SHARE = 0.5
# Content-stream bytes the pages may be drawn from, per character of the text budget. Text takes
# at least a byte of operators per character, and pypdf interprets content at a few hundred KB a
# second: a tiny stream that inflates to megabytes (or one stream shared by thousands of pages)
# is refused before pypdf parses it, and the work stays proportional to the file's size.
CONTENT_BYTES_PER_CHAR = 1


def text_normalise(text: str) -> str:
    """NFKC, except the full-width punctuation that CJK sentences end with (see _KEPT)."""
    if unicodedata.is_normalized("NFKC", text):
        return text
    return _TO_NORMALISE.sub(lambda match: unicodedata.normalize("NFKC", match.group()), text)


def _key(text: str) -> str:
    """How a title and a line are compared: no spaces, case-folded."""
    return _SPACES.sub("", text).casefold()


def _carries(line_key: str, title_key: str) -> bool:
    """Whether a line is the title, allowing a section number before one of them ("2.1 Scope"
    for the bookmark "Scope", "第三章总则" for "总则", or the other way round)."""
    if not line_key or not title_key:
        return False
    if line_key == title_key:
        return True
    longer, shorter = (line_key, title_key) if len(line_key) > len(title_key) else (title_key, line_key)
    return longer.endswith(shorter) and bool(_NUMBERING.fullmatch(longer[: len(longer) - len(shorter)]))


@dataclass(frozen=True)
class _Line:
    text: str
    size: float  # the size most of the line's characters are set in, in points; 0 when unknown


@dataclass(frozen=True)
class _Heading:
    level: int
    title: str


def _declared_pages(reader) -> int:
    """Whether the page tree holds pages, read without walking it: the count the catalog declares,
    or when that is no positive integer (0, -1 and 1.0 are seen in files viewers open), the number
    of the tree's direct kids, which the pipeline's walk then counts."""
    tree = reader.trailer["/Root"]["/Pages"]
    # .get() hands an indirect object ("/Count 12 0 R") back as a reference: resolve it.
    count, kids = (value.get_object() if value is not None else None
                   for value in (tree.get("/Count"), tree.get("/Kids")))
    if isinstance(count, int) and count > 0:
        return count
    return len(kids) if isinstance(kids, list) else 0


def _pages_over(reader, limit: int) -> bool:
    """Whether the page tree holds more than `limit` pages, found by walking it and stopping at
    the first page past the limit. pypdf's own walk (`len(reader.pages)`) builds an object for
    every page first: 99,000 empty pages (a 10 MB file) took 250 MB and 11 s before a word was
    read. Pages and nodes are counted at each reference, as pypdf counts them (a 6 KB file can
    refer to one page a million times); a cycle or a tree deeper than pypdf's limit is left for
    pypdf's walk to refuse, as damage."""
    from pypdf import get_configuration
    from pypdf.generic import ArrayObject, DictionaryObject, IndirectObject, PdfObject

    depth = get_configuration().page_tree_maximum_depth  # deeper, pypdf's walk refuses the tree
    stack: list[tuple[PdfObject, frozenset]] = [(reader.trailer["/Root"]["/Pages"], frozenset())]
    pages = nodes = 0
    while stack:
        item, ancestors = stack.pop()
        node = item.get_object()
        if not isinstance(node, DictionaryObject):
            continue
        kids = node.get("/Kids")
        kids = kids.get_object() if kids is not None else None
        if node.get("/Type") != "/Page" and isinstance(kids, ArrayObject):
            key = (item.idnum, item.generation) if isinstance(item, IndirectObject) else id(node)
            if key in ancestors or len(ancestors) >= depth:
                continue
            nodes += 1
            # Writers give a node two kids or more, so a tree has fewer nodes than pages; twice
            # the limit, and the depth besides, leaves room for an odd writer.
            if nodes > 2 * limit + depth:
                return True
            inside = ancestors | {key}
            stack.extend((kid, inside) for kid in reversed(kids))
            continue
        pages += 1
        if pages > limit:
            return True
    return False


def _too_many_pages(limit: int) -> ConversionFailed:
    return ConversionFailed(f"The PDF has more than {limit:,} pages, more than a document may "
                            "(KNOWLEDGE_PDF_MAX_PAGES). Split it into smaller files.")


# Limits pypdf keeps itself (pypdf.Configuration), past which it raises LimitReachedError: the
# start of its message, the setting, and what the file holds past it, in an operator's words.
# (LZW, RunLength and Brotli streams have limits of their own and a message without the figure.)
_PYPDF_LIMITS = (
    ("Limit reached while decompressing. ", "zlib_maximum_output_length",  # Flate's: "… N bytes remaining."
     "a compressed stream that inflates to more than {:,} bytes, the most the PDF reader decompresses of one"),
    ("Limit reached while decompressing", None,  # LZW's, RunLength's, Brotli's, each a setting of its own
     "a compressed stream that inflates past the most the PDF reader decompresses of one"),
    ("Maximum page tree depth reached", "page_tree_maximum_depth",
     "a page tree nested deeper than {:,} levels, the most the PDF reader follows"),
    ("Maximum page tree entry limit reached", "page_tree_maximum_entries",
     "a page tree of more than {:,} entries, the most the PDF reader reads"),
    ("Maximum page tree page entry limit exceeded", "page_tree_maximum_page_entries",
     "pages of more than {:,} entries together, the most the PDF reader reads"),
    ("Maximum outline depth reached", "outline_maximum_depth",
     "bookmarks nested deeper than {:,} levels, the most the PDF reader follows"),
)


def _past_pypdf_limit(exc: Exception) -> ConversionFailed:
    """The failure for a LimitReachedError, naming the limit it reports. It was reported as the
    text cap (a stream inflating past pypdf's ceiling: "its text exceeds 20,000,000 characters") or
    as too many pages (a page tree 5,000 levels deep over one page)."""
    from pypdf import get_configuration

    reason = str(exc)
    for start, name, holds in _PYPDF_LIMITS:
        if reason.startswith(start):
            what = f"{holds.format(getattr(get_configuration(), name))} (pypdf's {name})" if name else holds
            break
    else:
        what = f"more than the PDF reader reads (pypdf: {reason[:200].rstrip('.')})"
    return ConversionFailed(f"The PDF has {what}: its text cannot be read here. Upload its text as a .txt file.")


def _no_decoder(exc: Exception) -> ConversionFailed:
    """pypdf raises DependencyError, which is no PyPdfError, for a stream filter or a cipher it
    knows but has no decoder for here: Brotli without the brotli package, JBIG2 without the
    jbig2dec program, AES without the cryptography package. Which one is for the server's log."""
    logger.warning("pypdf lacks a decoder for a PDF: %s", exc)
    return ConversionFailed("The PDF uses a compression or encryption method this server has no decoder for; "
                            "upload a copy saved with standard settings (or its text as a .txt file).")


def _reader(data: bytes, *, walk_pages: bool = True):
    """An open reader of a readable, unencrypted PDF of at most KNOWLEDGE_PDF_MAX_PAGES pages.
    Counting the pages walks the whole page tree — at upload, in the web process, a 50 MB file of
    300,000 tiny pages took most of a minute and a gigabyte — so without `walk_pages` the count
    the catalog declares is taken, and a tree that does not hold it fails in the pipeline, as the
    document's error. With it, the tree is walked only up to the page limit (_pages_over)."""
    from pypdf import PasswordType, PdfReader
    from pypdf.errors import DependencyError, LimitReachedError, PyPdfError

    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        # A PDF that only restricts printing or copying opens with the empty password, in any viewer
        # as here: its text is read. One that asks for a password to open is refused.
        encrypted = reader.is_encrypted and reader.decrypt("") == PasswordType.NOT_DECRYPTED
        limit = settings.KNOWLEDGE_PDF_MAX_PAGES
        declared = None if encrypted or walk_pages else _declared_pages(reader)
        over = not encrypted and (_pages_over(reader, limit) if walk_pages else declared > limit)
        pages = None if encrypted or over else len(reader.pages) if walk_pages else declared
    except NotImplementedError as exc:  # a security handler pypdf lacks: certificate, Microsoft IRM
        raise ConversionFailed("The PDF is protected by a security handler that cannot be opened here (such as "
                               "certificate security or rights management); upload an unprotected copy.") from exc
    except DependencyError as exc:  # e.g. the catalog in a Brotli-compressed object stream
        raise _no_decoder(exc) from exc
    except LimitReachedError as exc:  # e.g. a page tree deeper than pypdf follows
        raise _past_pypdf_limit(exc) from exc
    except (PyPdfError, *_READ_ERRORS) as exc:
        raise ConversionFailed("The PDF is damaged and cannot be read.") from exc
    if encrypted:
        raise ConversionFailed("The PDF is encrypted; upload a copy without a password.")
    if over:
        raise _too_many_pages(limit)
    if not pages or pages < 0:
        raise ConversionFailed("The PDF has no pages.")
    return reader


def _scale(matrix) -> float:
    """The vertical scale of a text or transformation matrix [a b c d e f]."""
    try:
        return math.hypot(float(matrix[2]), float(matrix[3])) or 1.0
    except (TypeError, ValueError, IndexError):
        return 1.0


def _content_bytes(page) -> int:
    """The decompressed size of the page's content stream(s) (pypdf caches the decoding)."""
    from pypdf.generic import ArrayObject, StreamObject

    contents = page.get("/Contents")
    contents = contents.get_object() if contents is not None else None
    streams = [item.get_object() for item in contents] if isinstance(contents, ArrayObject) else [contents]
    return sum(len(stream.get_data()) for stream in streams if isinstance(stream, StreamObject))


def _page_lines(page, budget: TextBudget) -> list[_Line]:
    """The page's text lines (as pypdf extracts them), each with the size it is set in; the text
    is spent from `budget` as pypdf reports it, so a page that expands without end stops early."""
    sizes: dict[str, Counter] = {}
    current: Counter = Counter()
    pending: list[str] = []

    def close_line() -> None:
        nonlocal current
        key = _key("".join(pending))
        if key:
            sizes.setdefault(key, Counter()).update(current)
        pending.clear()
        current = Counter()

    def visit(text, cm, tm, _font, font_size) -> None:
        if not text:
            return
        # pypdf swallows exceptions inside form XObjects: the budget stays exceeded and
        # raises again on every later call, and after the page.
        budget.spend(len(text))
        size = round(float(font_size or 0) * _scale(tm) * _scale(cm), 1)
        pieces = text.split("\n")
        for index, piece in enumerate(pieces):
            if index:
                close_line()
            if piece.strip():
                pending.append(piece)
                current[size] += len(piece.strip())

    text = page.extract_text(visitor_text=visit) or ""
    budget.tick()
    close_line()
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")
    lines = []
    for raw in text.split("\n"):
        counted = sizes.get(_key(raw))
        lines.append(_Line(text=text_normalise(raw), size=counted.most_common(1)[0][0] if counted else 0.0))
    return lines


def _outline(reader) -> list[tuple[int, int, str]]:
    """(page index, level, title) of each outline entry that points at a page, in outline order.
    A damaged outline is no outline: the text is still there, and font sizes may still tell."""
    from pypdf.errors import DependencyError, PyPdfError

    entries: list[tuple[int, int, str]] = []

    def walk(items, level: int) -> None:
        for item in items:
            if isinstance(item, list):
                if level < MAX_HEADING_LEVELS:
                    walk(item, level + 1)
                continue
            try:
                page = reader.get_destination_page_number(item)
                title = item.title
            except (PyPdfError, DependencyError, *_READ_ERRORS):
                continue
            title = _SPACES.sub(" ", text_normalise(str(title or "").replace("\x00", ""))).strip()
            if len(title) > OUTLINE_TITLE_MAX_CHARS:  # not a title: it would ride in every chunk's path
                title = title[: OUTLINE_TITLE_MAX_CHARS - 1].rstrip() + "…"
            if page is not None and title:
                entries.append((page, level, title))

    try:
        walk(reader.outline, 1)
    except (PyPdfError, DependencyError, *_READ_ERRORS):
        return []
    return entries


def _outline_headings(pages: list[list[_Line]], entries) -> list[list[_Line | _Heading]]:
    """Each page's lines with the outline's headings placed in them: at the first line (after the
    previous heading on that page) that carries the title, which the heading then replaces; a
    title no line carries goes in before that line. Work linear in the lines and the entries: each
    line is keyed once (_TitleIndex), and a title is found by lookup, not by reading the page."""
    by_page: dict[int, list[tuple[int, str]]] = {}
    for page, level, title in entries:
        if 0 <= page < len(pages):
            by_page.setdefault(page, []).append((level, title))
    placed: list[list[_Line | _Heading]] = []
    for number, lines in enumerate(pages):
        wanted = by_page.get(number)
        if not wanted:
            placed.append(list(lines))
            continue
        index = _TitleIndex(lines)
        replaced: dict[int, _Heading] = {}
        before: dict[int, list[_Heading]] = {}  # headings no line carries, before the line they precede
        cursor = 0  # the first line not yet passed
        for level, title in wanted:
            found = index.first_carrying(_key(title), start=cursor)
            if found is None:
                before.setdefault(cursor, []).append(_Heading(level, title))
            else:
                replaced[found] = _Heading(level, title)
                cursor = found + 1
        items: list[_Line | _Heading] = []
        for position, line in enumerate(lines):
            items.extend(before.get(position, ()))
            items.append(replaced.get(position, line))
        items.extend(before.get(len(lines), ()))
        placed.append(items)
    return placed


class _TitleIndex:
    """The lines of a page by the titles they carry (_carries), for finding the first one at or
    after a position: a line carries its own key, and the key without a section number in front
    ("2.1 Scope" carries "Scope"); a title with a number in front is also carried by the line of
    its rest ("Scope" carries "2.1 Scope")."""

    def __init__(self, lines: list[_Line]):
        self.positions: dict[str, list[int]] = {}  # title key -> the lines carrying it, in order
        self.exact: dict[str, list[int]] = {}  # line key -> its lines, in order
        for position, line in enumerate(lines):
            key = _key(line.text)
            if not key:
                continue
            self.exact.setdefault(key, []).append(position)
            for title in {key, *_numbered_rests(key)}:
                self.positions.setdefault(title, []).append(position)

    def first_carrying(self, title: str, *, start: int) -> int | None:
        if not title:
            return None
        candidates = [self.positions.get(title, []), *(self.exact.get(rest, []) for rest in _numbered_rests(title))]
        firsts = [found[at] for found in candidates if (at := bisect.bisect_left(found, start)) < len(found)]
        return min(firsts, default=None)


def _numbered_rests(key: str) -> list[str]:
    """What follows a section number at the start of `key`, for each way to read one there
    (_NUMBERING is at most _NUMBERING_MAX_CHARS long); never empty."""
    return [key[cut:] for cut in range(1, min(_NUMBERING_MAX_CHARS, len(key) - 1) + 1)
            if _NUMBERING.fullmatch(key[:cut])]


def _join_title(lines: list[str]) -> str:
    """A title broken over lines, rejoined (no space between two CJK characters)."""
    title = ""
    for line in lines:
        line = _SPACES.sub(" ", line).strip()
        if title and not (_CJK.match(title[-1]) and _CJK.match(line[:1])):
            title += " "
        title += line
    return title


def _size_headings(pages: list[list[_Line]]) -> list[list[_Line | _Heading]]:
    """Each page's lines, those set notably larger than the body made headings, levels by size.

    Up to MAX_TITLE_LINES consecutive lines of one size make one heading (a title broken over
    lines); a longer run is a paragraph set large, not a heading.
    """
    weights: Counter = Counter()
    for lines in pages:
        for line in lines:
            if line.size:
                weights[line.size] += len(line.text.strip())
    if len(weights) < 2:
        return [list(lines) for lines in pages]
    body = weights.most_common(1)[0][0]

    def is_candidate(line: _Line) -> bool:
        text = line.text.strip()
        return (line.size >= body * HEADING_SIZE_RATIO and 0 < len(text) <= HEADING_MAX_CHARS
                and any(char.isalpha() for char in text) and not _DOT_LEADER.search(text))

    runs: list[list[tuple[list[_Line], bool]]] = []
    for lines in pages:
        page_runs: list[tuple[list[_Line], bool]] = []
        for line in lines:
            candidate = is_candidate(line)
            if (page_runs and candidate and page_runs[-1][1]
                    and page_runs[-1][0][-1].size == line.size):
                page_runs[-1][0].append(line)
            else:
                page_runs.append(([line], candidate))
        runs.append([(run, candidate and len(run) <= MAX_TITLE_LINES) for run, candidate in page_runs])
    heading_chars = sum(len(line.text.strip()) for page_runs in runs for run, heading in page_runs if heading
                        for line in run)
    if not heading_chars or heading_chars > sum(weights.values()) * MAX_HEADING_SHARE:
        return [list(lines) for lines in pages]
    ranks = sorted({run[0].size for page_runs in runs for run, heading in page_runs if heading}, reverse=True)
    level = {size: min(rank, MAX_HEADING_LEVELS) for rank, size in enumerate(ranks, start=1)}
    placed: list[list[_Line | _Heading]] = []
    for page_runs in runs:
        items: list[_Line | _Heading] = []
        for run, heading in page_runs:
            if heading:
                items.append(_Heading(level[run[0].size], _join_title([line.text for line in run])))
            else:
                items.extend(run)
        placed.append(items)
    return placed


# Where a line that ends a sentence or a clause stops: no wrapped line is joined after these.
_LINE_END_KEPT = frozenset(".!?:;。！？：；．…")
_CLOSING = "\"')]}’”）」』】》"
# A line that starts a list item: a bullet, or an enumerator ("1.", "2)", "(a)", "一、", "（三）").
_LIST_ITEM = re.compile(r"\s*(?:[•·◦▪▫■□●○‣⁃–—*-]\s|(?:\d{1,3}|[a-zA-Z]|[ivxIVX]{1,4})[.)]\s|\(\w{1,3}\)\s"
                        r"|[一二三四五六七八九十]{1,3}[、.]|（[一二三四五六七八九十\d]{1,3}）)")
# Scripts written without spaces between words (Han, kana) and their full-width punctuation; Hangul
# is written with spaces.
_UNSPACED = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\U00020000-\U0002fa1f"
                       "\u3000-\u303f\uff00-\uffef]")
_SOFT_HYPHEN = "\u00ad"
_HANGUL = re.compile("[\uac00-\ud7af\u1100-\u11ff\u3130-\u318f]")
# A line at least this share of the page's widest line as wide is full: it was wrapped, not ended.
FULL_LINE_SHARE = 0.6
# ... and at least this wide (Latin characters; CJK count two): on a page of short lines only (a
# list without bullets, a table's cells, verse) each line was the page's "full" width, and they
# were glued into one.
WRAPPED_LINE_MIN_WIDTH = 40


def _width(text: str) -> int:
    """A line's width in Latin characters: a wide (CJK) character counts two."""
    return sum(2 if unicodedata.east_asian_width(char) in "WF" else 1 for char in text)


def _wrapped(line: str, following: str, full_width: float) -> str | None:
    """What joins `line` to the `following` one when the PDF wrapped a paragraph between them
    ("" between two CJK characters, or after a hyphen; " " before a lower-case or Hangul word),
    or None when the break may be the document's own: `line` is not full, ends a sentence or a
    clause, `following` starts a list item, or the two do not go on as one text (a capital, a
    digit, CJK after Latin or Latin after CJK: kept as written). A hyphen at the end is
    kept ("well-\nknown" → "well-known"; a word the writer hyphenated across lines keeps its
    hyphen, as printed); only a soft hyphen (U+00AD, which marks such a break) is dropped."""
    end, start = line.rstrip(), following.lstrip()
    if not end or not start or _width(end) < full_width or _LIST_ITEM.match(following):
        return None
    last = end.rstrip(_CLOSING)[-1:] or end[-1]
    if last in _LINE_END_KEPT:
        return None
    if end[-1] == _SOFT_HYPHEN and start[0].isalpha():
        return _SOFT_HYPHEN  # _join_lines drops it
    if _UNSPACED.match(end[-1]) and _UNSPACED.match(start[0]):
        return ""
    if _UNSPACED.match(end[-1]) or not (start[0].islower() or _HANGUL.match(start[0])):
        return None
    return "" if end[-1] == "-" and end[-2:-1].isalpha() else " "


def _join_lines(lines: list[str], full_width: float) -> str:
    """A run of a page's lines, the breaks the PDF made inside a paragraph joined (_wrapped). Kept
    as pieces of one line each, joined once: growing one string copied the text so far at every
    line (40,000 wrapped lines took 36 s, with no heartbeat in between)."""
    pieces: list[str] = []
    for index, line in enumerate(lines):
        joint = _wrapped(lines[index - 1], line, full_width) if index else None
        if joint is None:
            pieces.append(("\n" if index else "") + line)
            continue
        # The line before is not blank (_wrapped), so its piece ends the text so far.
        pieces[-1] = pieces[-1].rstrip()
        if joint == _SOFT_HYPHEN:
            pieces[-1] = pieces[-1][:-1]
            joint = ""
        pieces.append(joint + line.lstrip())
    return "".join(pieces)


def _sections(pages: list[list[_Line | _Heading]]) -> tuple[Section, ...]:
    sections: list[Section] = []
    stack: list[_Heading] = []
    blocks: list[Block] = []

    def flush_section() -> None:
        if blocks:
            sections.append(Section(headings=tuple(heading.title for heading in stack), blocks=tuple(blocks)))
        blocks.clear()

    for number, items in enumerate(pages, start=1):
        widest = max((_width(item.text.strip()) for item in items if isinstance(item, _Line)), default=0)
        full_width = max(WRAPPED_LINE_MIN_WIDTH, widest * FULL_LINE_SHARE)
        lines: list[str] = []
        for item in [*items, None]:
            if isinstance(item, _Line):
                lines.append(item.text)
                continue
            blocks.extend(Block(text=paragraph, page=number)
                          for paragraph in paragraphs(_join_lines(lines, full_width)))
            lines = []
            if item is not None:
                flush_section()
                while stack and stack[-1].level >= item.level:
                    stack.pop()
                stack.append(item)
    flush_section()
    return tuple(sections)


def _pages(reader, budget: TextBudget) -> list[list[_Line]]:
    content_budget = budget.max_chars * CONTENT_BYTES_PER_CHAR
    pages = []
    for page in reader.pages:
        content_budget -= _content_bytes(page)
        if content_budget < 0:
            budget.exceeded = True
            raise DocumentTooLarge(budget.max_chars)
        pages.append(_page_lines(page, budget))
    return pages


def parse(data: bytes, budget: TextBudget) -> ParsedDocument:
    from pypdf.errors import DependencyError, LimitReachedError, PyPdfError

    reader = _reader(data)
    try:
        pages = _pages(reader, budget)
        entries = _outline(reader)
    except LimitReachedError as exc:  # e.g. a stream inflating past pypdf's own ceiling
        raise _past_pypdf_limit(exc) from exc
    except DependencyError as exc:  # e.g. a page's content in a Brotli-compressed stream
        raise _no_decoder(exc) from exc
    except (PyPdfError, *_READ_ERRORS) as exc:
        raise ConversionFailed("The PDF is damaged and its text cannot be extracted.") from exc
    placed = _outline_headings(pages, entries) if entries else _size_headings(pages)
    sections = _sections(placed)
    if not any(has_visible_text(block.text) for section in sections for block in section.blocks):
        raise ConversionFailed("The PDF has no extractable text (scanned pages need OCR first).")
    return ParsedDocument(file_type="pdf", sections=sections)


def check(data: bytes) -> None:
    _reader(data, walk_pages=False)
