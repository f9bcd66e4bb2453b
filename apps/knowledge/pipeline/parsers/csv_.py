"""CSV: each row becomes one record, `header: value; header: value`, under the header's names.

Rows are read one at a time and each value is spent from the budget as it is made: a file of
millions of short rows, or one row of millions of cells, stops at the budget instead of being held
whole (as lists of cells, many times the file's size) first. The upload check reads every row and
keeps none.

Each row is a block of its own, ~110 bytes as Python objects however short the row: a 9 MB file of
4.5 million one-letter rows held 660 MiB. So a file of more than KNOWLEDGE_CSV_MAX_ROWS rows is
refused, at upload and in the pipeline, as soon as the row past the limit is read.

The csv module makes a whole row, a list of its cells, before handing it over: one line of 16
million two-digit cells (a 50 MB file) held 1.2 GB. So a row of more than
KNOWLEDGE_CSV_MAX_COLUMNS cells is refused before the csv module reads it: its delimiters are
counted as its lines are handed to the reader, and only a row with more than the limit of them is
counted cell by cell (_Width), so that commas in quoted prose are not cells.
"""

from __future__ import annotations

import csv
import sys
from collections.abc import Iterator

from django.conf import settings

from apps.knowledge.pipeline.parsers.base import Block, ConversionFailed, ParsedDocument, Section, TextBudget
from apps.knowledge.pipeline.parsers.text import text_decode

_DELIMITERS = ",\t;|"
_FIELD_SEPARATOR = "; "
# The csv module refuses a field over 131,072 characters unless told otherwise, and a valid file
# with one long cell (a pasted article) was refused as "not valid CSV". A cell is no longer than
# its file, which the upload limit bounds, and the budget bounds the text made from it.
csv.field_size_limit(max(csv.field_size_limit(), sys.maxsize))


def _lines(text: str) -> Iterator[str]:
    """The text's lines with their newlines (text_decode made every line end `\\n`), one at a
    time: a StringIO would hold a copy of the text at four bytes a character."""
    start = 0
    while start < len(text):
        end = text.find("\n", start) + 1 or len(text)
        yield text[start:end]
        start = end


def _cells_scan(text: str, delimiter: str, *, quoted: bool, cells: int, limit: int) -> tuple[bool, int]:
    """Cells counted through `text` (lines of one row), as the csv module reads them, from
    `cells` and `quoted` (inside a quoted cell) at its start: whether a quoted cell is still open
    at its end, and the count, which stops past `limit`. A cell is quoted when a quote opens it;
    in a quoted cell a delimiter is text and a doubled quote is a quote."""
    position = 0
    while True:
        if quoted:
            end = position
            while (end := text.find('"', end)) >= 0 and text.startswith('"', end + 1):
                end += 2
            if end < 0:
                return True, cells
            position, quoted = end + 1, False
        found = text.find(delimiter, position)
        if found < 0:
            return False, cells
        cells += 1
        if cells > limit:
            return False, cells
        position = found + 1
        if text.startswith('"', position):
            position, quoted = position + 1, True


class _Width:
    """Hands a text's lines to the csv reader, refusing a row of more than KNOWLEDGE_CSV_MAX_COLUMNS
    cells before the reader makes it. `delivered` counts the rows the reader has handed back
    (row_delivered): a line asked for after one starts a row, any other continues it (inside a
    quoted cell)."""

    def __init__(self, delimiter: str):
        self.delimiter = delimiter
        self.limit = settings.KNOWLEDGE_CSV_MAX_COLUMNS
        self.delivered = 0
        self.pending: list[str] = []  # the current row's lines, while its delimiters are few

    def row_delivered(self) -> None:
        self.delivered += 1
        self.pending = []  # not held while the row is made a record: a line may be the whole file

    def lines(self, text: str) -> Iterator[str]:
        row = -1  # the value of `delivered` when the current row started
        delimiters = 0
        exact: tuple[bool, int] | None = None  # (quoted, cells) once the row's cells are counted
        for number, line in enumerate(_lines(text), start=1):
            if row != self.delivered:
                row, delimiters, exact, start = self.delivered, 0, None, number
            if exact is None:
                delimiters += line.count(self.delimiter)
                self.pending.append(line)
                if delimiters >= self.limit:  # as many cells as delimiters and one more, at most
                    first = "".join(self.pending)
                    opened = first.startswith('"')  # the row's first cell is quoted
                    exact = _cells_scan(first[1:] if opened else first, self.delimiter, quoted=opened, cells=1,
                                        limit=self.limit)
                    self.pending = []
            else:
                exact = _cells_scan(line, self.delimiter, quoted=exact[0], cells=exact[1], limit=self.limit)
            if exact is not None and exact[1] > self.limit:
                raise ConversionFailed(f"The row that starts at line {start:,} has more than {self.limit:,} cells, "
                                       "more than a row may (KNOWLEDGE_CSV_MAX_COLUMNS). Check its delimiters, or "
                                       "split the file.")
            yield line


def _rows(data: bytes) -> Iterator[list[str]]:
    """The rows that hold a value, one at a time; ConversionFailed at the first malformed one."""
    text = text_decode(data)
    try:
        dialect = csv.Sniffer().sniff(text[:8192], delimiters=_DELIMITERS)
        delimiter = dialect.delimiter
    except csv.Error:
        delimiter = ","
    width = _Width(delimiter)
    reader = csv.reader(width.lines(text), delimiter=delimiter, strict=True)
    limit = settings.KNOWLEDGE_CSV_MAX_ROWS + 1  # the header row is not counted
    kept = 0
    start = 1  # the line the row being read starts at (a quoted cell may span lines)
    try:
        for row in reader:
            width.row_delivered()
            if any(cell.strip() for cell in row):
                kept += 1
                if kept > limit:
                    raise ConversionFailed(f"The file has more than {limit - 1:,} rows, more than a document may "
                                           "(KNOWLEDGE_CSV_MAX_ROWS). Split the file.")
                yield row
            start = reader.line_num + 1
    except csv.Error as exc:
        raise ConversionFailed(f"The file is not valid CSV: {exc}, in the row that starts at line {start:,}.") from exc


def _record(header: list[str], row: list[str], budget: TextBudget) -> str:
    fields: list[str] = []
    for index, cell in enumerate(row):
        value = cell.strip()
        if not value:
            continue
        name = header[index] if index < len(header) and header[index] else f"column_{index + 1}"
        field = f"{name}: {value}"
        # Each value repeats its column's name: long names over many rows multiply the text.
        budget.spend(len(field) + (len(_FIELD_SEPARATOR) if fields else 0))
        fields.append(field)
    return _FIELD_SEPARATOR.join(fields)


def parse(data: bytes, budget: TextBudget) -> ParsedDocument:
    rows = _rows(data)
    first = next(rows, None)
    if first is None:
        return ParsedDocument(file_type="csv", sections=())
    header = [name.strip() for name in first]
    blocks = []
    for row in rows:
        record = _record(header, row, budget)
        if record:
            blocks.append(Block(text=record, kind="record"))
    return ParsedDocument(file_type="csv", sections=(Section(headings=(), blocks=tuple(blocks)),) if blocks else ())


def check(data: bytes) -> None:
    for _row in _rows(data):
        pass
