"""PDFs written by hand for parser and pipeline tests.

Text is set in a Type0 font whose ToUnicode map sends each code to the character it was written
from, so pypdf extracts exactly the characters a test asks for (ligatures, Kangxi radicals, CJK)
and sees each line's real font size, as it would in a PDF from a word processor.
"""

from __future__ import annotations

import functools
import io
import re
from collections.abc import Callable, Mapping, Sequence
from importlib.util import find_spec
from typing import Any


def without_brotli(test: Callable) -> Callable:
    """For a test that needs pypdf's DependencyError. pypdf decodes Brotli only with the optional
    brotli package, which is none of our dependencies: without it, a stream under /BrotliDecode
    raises that error. The test fails (it never skips) where brotli has come in, to be given a
    filter this server still lacks."""

    @functools.wraps(test)
    def checked(*args: Any, **kwargs: Any) -> Any:
        assert find_spec("brotli") is None, "brotli is installed, so pypdf decodes Brotli: pick another filter"
        return test(*args, **kwargs)

    return checked


# A line: (text, font size in points). With `matrix_size=True` the size is put in the text
# matrix (`1 Tf` and `18 0 0 18 x y Tm`), as LaTeX and many PDF writers do.
Line = tuple[str, float]


def _hex(text: str) -> str:
    return "".join(f"{ord(char):04X}" for char in text)


def _to_unicode(chars: Sequence[str]) -> str:
    pairs = "\n".join(f"<{ord(char):04X}> <{ord(char):04X}>" for char in chars)
    return ("/CIDInit /ProcSet findresource begin 12 dict begin begincmap\n"
            "/CIDSystemInfo << /Registry (Adobe) /Ordering (UCS) /Supplement 0 >> def\n"
            "/CMapName /Adobe-Identity-UCS def /CMapType 2 def\n"
            "1 begincodespacerange <0000> <FFFF> endcodespacerange\n"
            f"{len(chars)} beginbfchar\n{pairs}\nendbfchar\n"
            "endcmap CMapName currentdict /CMap defineresource pop end end")


def _stream(body: str) -> str:
    return f"<< /Length {len(body.encode())} >>\nstream\n{body}\nendstream"


def _outline_objects(outline, first_number: int, page_numbers: list[int]) -> dict[int, str]:
    """Outline items (title, page index, depth 0 = top) as linked outline dictionaries, root 6."""
    numbers = [first_number + index for index in range(len(outline))]
    parents: list[int | None] = []
    stack: list[tuple[int, int]] = []
    for index, (_title, _page, depth) in enumerate(outline):
        while stack and stack[-1][0] >= depth:
            stack.pop()
        parents.append(stack[-1][1] if stack else None)
        stack.append((depth, index))
    children: dict[int | None, list[int]] = {None: []}
    for index, parent in enumerate(parents):
        children.setdefault(parent, []).append(index)
    objects = {}
    for index, (title, page, _depth) in enumerate(outline):
        siblings = children[parents[index]]
        position = siblings.index(index)
        parent = numbers[parents[index]] if parents[index] is not None else 6
        parts = [f"/Title <FEFF{_hex(title)}>", f"/Parent {parent} 0 R",
                 f"/Dest [{page_numbers[page]} 0 R /XYZ 0 792 0]"]
        if position > 0:
            parts.append(f"/Prev {numbers[siblings[position - 1]]} 0 R")
        if position < len(siblings) - 1:
            parts.append(f"/Next {numbers[siblings[position + 1]]} 0 R")
        own = children.get(index, [])
        if own:
            parts += [f"/First {numbers[own[0]]} 0 R", f"/Last {numbers[own[-1]]} 0 R", f"/Count {len(own)}"]
        objects[numbers[index]] = "<< " + " ".join(parts) + " >>"
    top = children[None]
    objects[6] = f"<< /Type /Outlines /First {numbers[top[0]]} 0 R /Last {numbers[top[-1]]} 0 R /Count {len(top)} >>"
    return objects


def pdf_build(pages: Sequence[Sequence[Line]], *, outline: Sequence[tuple[str, int, int]] = (),
              matrix_size: bool = False) -> bytes:
    """A PDF of `pages` (each a list of lines, top to bottom) with an optional outline of
    (title, page index, depth) entries in reading order."""
    chars = sorted({char for lines in pages for text, _size in lines for char in text})
    objects: dict[int, str] = {
        3: "<< /Type /Font /Subtype /Type0 /BaseFont /Test /Encoding /Identity-H /DescendantFonts [4 0 R] "
           "/ToUnicode 5 0 R >>",
        4: "<< /Type /Font /Subtype /CIDFontType2 /BaseFont /Test /CIDSystemInfo << /Registry (Adobe) "
           "/Ordering (Identity) /Supplement 0 >> /DW 1000 /FontDescriptor 7 0 R >>",
        5: _stream(_to_unicode(chars)),
        7: "<< /Type /FontDescriptor /FontName /Test /Flags 4 /FontBBox [0 0 1000 1000] /ItalicAngle 0 "
           "/Ascent 800 /Descent -200 /CapHeight 700 /StemV 80 >>",
    }
    page_numbers = []
    for index, lines in enumerate(pages):
        page_number, content_number = 10 + 2 * index, 11 + 2 * index
        page_numbers.append(page_number)
        y = 780.0
        operations = []
        for text, size in lines:
            y -= size * 1.5
            if matrix_size:
                operations.append(f"BT /F1 1 Tf {size} 0 0 {size} 72 {y:.1f} Tm <{_hex(text)}> Tj ET")
            else:
                operations.append(f"BT /F1 {size} Tf 72 {y:.1f} Td <{_hex(text)}> Tj ET")
        objects[page_number] = (f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {content_number} 0 R "
                                "/Resources << /Font << /F1 3 0 R >> >> >>")
        objects[content_number] = _stream("\n".join(operations))
    objects[2] = f"<< /Type /Pages /Kids [{' '.join(f'{n} 0 R' for n in page_numbers)}] /Count {len(pages)} >>"
    catalog = "<< /Type /Catalog /Pages 2 0 R"
    if outline:
        objects.update(_outline_objects(outline, 10 + 2 * len(pages), page_numbers))
        catalog += " /Outlines 6 0 R"
    objects[1] = catalog + " >>"
    return pdf_write(objects)


def pdf_objects(data: bytes) -> dict[int, bytes]:
    """The numbered objects of a PDF that pdf_write wrote, to change one and write it again."""
    return {int(number): body for number, body
            in re.findall(rb"(?ms)^(\d+) 0 obj\n(.*?)\nendobj\n", data[: data.index(b"xref\n")])}


def pdf_write(objects: Mapping[int, str | bytes]) -> bytes:
    """A PDF file of these numbered objects (1 the catalog), with its cross-reference table."""
    out = io.BytesIO()
    out.write(b"%PDF-1.7\n")
    offsets = {}
    for number in sorted(objects):
        offsets[number] = out.tell()
        body = objects[number]
        out.write(f"{number} 0 obj\n".encode() + (body.encode() if isinstance(body, str) else body) + b"\nendobj\n")
    size = max(objects) + 1
    xref = out.tell()
    out.write(f"xref\n0 {size}\n0000000000 65535 f \n".encode())
    for number in range(1, size):
        out.write(f"{offsets[number]:010d} 00000 n \n".encode() if number in offsets else b"0000000000 65535 f \n")
    out.write(f"trailer\n<< /Size {size} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode())
    return out.getvalue()


def pdf_encrypt(data: bytes, *, user_password: str, owner_password: str, handler: str = "/Standard") -> bytes:
    """`data` encrypted (AES-128) with these passwords, its encryption dictionary naming `handler`
    as its security handler (pypdf writes the standard one; another one, such as certificate
    security or Microsoft's rights management, it cannot open)."""
    from pypdf import PdfReader, PdfWriter
    from pypdf.generic import NameObject

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(data)))
    writer.encrypt(user_password=user_password, owner_password=owner_password, algorithm="AES-128")
    writer._encrypt_entry[NameObject("/Filter")] = NameObject(handler)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def pdf_content_filtered(data: bytes, filter_name: str) -> bytes:
    """`data` (from pdf_build) with its first page's content stream declared compressed with
    `filter_name`. Its bytes stay as they are: a reader without that filter's decoder fails first."""
    content = data.find(b">>\nstream\nBT")
    return data[:content] + f" /Filter {filter_name} ".encode() + data[content:]


def pdf_catalog_in_object_stream(data: bytes, filter_name: str) -> bytes:
    """`data` (from pdf_build) with its catalog and page tree (objects 1 and 2) moved into an object
    stream declared compressed with `filter_name` and indexed by a cross-reference stream, as PDF
    1.5 writers save them. The stream's bytes stay as they are: a reader without that filter's
    decoder fails before it can read the catalog."""
    objects = {int(number): body for number, body
               in re.findall(rb"(?ms)^(\d+) 0 obj\n(.*?)\nendobj\n", data[: data.index(b"xref\n")])}
    packed = [1, 2]
    header, bodies = [], b""
    for number in packed:
        header.append(f"{number} {len(bodies)}")
        bodies += objects[number] + b"\n"
    stream = " ".join(header).encode() + b"\n" + bodies
    first = len(stream) - len(bodies)
    stream_number, xref_number = max(objects) + 1, max(objects) + 2

    out = io.BytesIO()
    out.write(b"%PDF-1.7\n")
    offsets = {}
    for number in sorted(set(objects) - set(packed)):
        offsets[number] = out.tell()
        out.write(f"{number} 0 obj\n".encode() + objects[number] + b"\nendobj\n")
    offsets[stream_number] = out.tell()
    out.write(f"{stream_number} 0 obj\n<< /Type /ObjStm /N {len(packed)} /First {first} /Filter {filter_name} "
              f"/Length {len(stream)} >>\nstream\n".encode() + stream + b"\nendstream\nendobj\n")
    offsets[xref_number] = out.tell()
    rows = b""  # /W [1 4 1]: type, offset (or object stream), generation (or index in the stream)
    for number in range(xref_number + 1):
        if number in packed:
            rows += b"\x02" + stream_number.to_bytes(4, "big") + bytes([packed.index(number)])
        elif number in offsets:
            rows += b"\x01" + offsets[number].to_bytes(4, "big") + b"\x00"
        else:
            rows += b"\x00" * 5 + b"\xff"
    out.write(f"{xref_number} 0 obj\n<< /Type /XRef /Size {xref_number + 1} /W [1 4 1] /Root 1 0 R "
              f"/Length {len(rows)} >>\nstream\n".encode() + rows + b"\nendstream\nendobj\n")
    out.write(f"startxref\n{offsets[xref_number]}\n%%EOF\n".encode())
    return out.getvalue()
