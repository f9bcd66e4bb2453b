"""Plain text, decoded with the first of these that fits:

1. the encoding a byte order mark names: UTF-8, UTF-16 or UTF-32;
2. UTF-32 or UTF-16 without a byte order mark, little- or big-endian (`bomless_decode`);
3. UTF-8 (refused, saying where, when it is UTF-8 but for a few invalid bytes: `_utf8_damage`);
4. Japanese EUC-JP, when the bytes read as Japanese in it (`japanese_reads`);
5. Korean EUC-KR (Windows' code page 949, which includes it), when the bytes read as Korean in it
   (`korean_reads`);
6. GB18030 (which includes GBK) or Big5 (Windows' code page 950), when the bytes read as Chinese
   in one of them: the one whose common characters they are more of (`chinese_encoding`);
7. Japanese Shift-JIS (Windows' code page 932), when the bytes read as Japanese in it;
8. Windows-1252 (Western European), when the bytes read as such (`reads_as_western`).

GB18030 decodes almost any bytes, and Windows-1252 decodes all of them: without the checks a
German "Müller" (b"M\\xfcller") became "M黮ler", Traditional Chinese saved as Big5 was read as
GB18030 (three quarters of drcd's passages, as mojibake), and Korean saved as EUC-KR was read as
GB18030 (every one of Django's Korean translations: its Hangul rows are GB2312's common hanzi),
as was EUC-JP (its kana rows are GB2312's too, its kanji other hanzi). Text in none of these (a
Cyrillic or Greek code page, ...) fails, and is to be saved as UTF-8.

Each candidate is judged on the whole file, decoded a chunk at a time (`_decoded_pieces`), and only
the one chosen is decoded whole: decoded whole, each held a copy of the text, and counting a set's
characters with re.sub listed every run of them, so a 50 MB GBK file peaked at 667 MB. A choice
made on the first chunk alone would change with where a file's non-ASCII text starts.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterable, Iterator

from apps.knowledge.pipeline.parsers.base import (
    Block,
    ConversionFailed,
    ParagraphCount,
    ParsedDocument,
    Section,
    TextBudget,
    has_visible_text,
)

_BOMS = (
    (b"\xef\xbb\xbf", "utf-8"),
    (b"\xff\xfe\x00\x00", "utf-32-le"),
    (b"\x00\x00\xfe\xff", "utf-32-be"),
    (b"\xff\xfe", "utf-16-le"),
    (b"\xfe\xff", "utf-16-be"),
)
# The C0 controls that separate (vertical tab, form feed — a page break —, the file, group, record
# and unit separators) become a space: deleted, they glued the words on either side into one.
_SEPARATING = re.compile(r"[\x0b\x0c\x1c-\x1f]")
# The other C0 controls than tab and newline, and DEL: noise in text, harmful in a tsvector.
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1b\x7f]")
_BLANK_LINES = re.compile(r"\n[ \t\u3000]*\n")
# Bytes decoded at a time while a candidate encoding is judged, and characters counted at a time.
_CHUNK_BYTES = 256 * 1024
_CHUNK_CHARS = 256 * 1024

# UTF-16 or UTF-32 without a byte order mark is recognised from this many bytes at the start.
_HEAD_BYTES = 8192
_WIDE = ((4, "utf-32-le", "utf-32-be"), (2, "utf-16-le", "utf-16-be"))
_SPACING = "\t\n\r "
# Binary data read as UTF-16 or UTF-32 has U+0000 (NUL bytes in an aligned pair or four) or the
# two noncharacters, or more of the other C0 controls than line breaks, tabs and spaces.
_NOT_TEXT = re.compile(r"[\x00\ufffe\uffff]")
_CONTROLS = re.compile(r"[\x01-\x08\x0b\x0c\x0e-\x1f]+")


def _runs_of(encoding: str, codes: Iterable[int]) -> re.Pattern:
    """Runs of the characters these two-byte `codes` are in `encoding`, less those it leaves
    undefined or maps to private use."""
    chars = []
    for code in codes:
        try:
            chars.append(code.to_bytes(2, "big").decode(encoding))
        except UnicodeDecodeError:
            continue
    common = "".join(char for char in chars if not "\ue000" <= char <= "\uf8ff")
    return re.compile(f"[{re.escape(common)}]+")


# GB2312's symbols (rows 0xA1-0xA9: full-width punctuation, digits and letters) and its 3,755
# level-1 hanzi (rows 0xB0-0xD7).
_GB2312_COMMON = _runs_of("gb18030", (lead << 8 | trail for lead in (*range(0xA1, 0xAA), *range(0xB0, 0xD8))
                                      for trail in range(0xA1, 0xFF)))
# Big5's symbols (0xA140-0xA3BF: full-width punctuation, digits and letters, bopomofo) and its
# 5,401 frequently used hanzi (0xA440-0xC67E), as code page 950 decodes them.
_BIG5_COMMON = _runs_of("cp950", (
    code for code in (lead << 8 | trail for lead in range(0xA1, 0xC7)
                      for trail in (*range(0x40, 0x7F), *range(0xA1, 0xFF)))
    if code < 0xA3C0 or 0xA440 <= code <= 0xC67E))
# Well under traditional Chinese's share (no drcd document under 55%) and well over Western
# text's (none, but for a capital followed by an accent: see chinese_encoding).
CHINESE_MIN_SHARE = 1 / 3

# Hiragana and katakana (with the prolonged sound mark and the iteration marks): Japanese prose is
# half kana, Chinese and Korean text has none. Read as EUC-JP or Shift-JIS, none of the bench's
# Chinese passages (GBK or Big5, 1,500 of each set) nor Django's Korean translations was over 9%
# kana; Django's Japanese translations were 67% kana at the median. A text under
# JAPANESE_MIN_KANA_SHARE (kanji alone) or with fewer than JAPANESE_MIN_KANA (a word of two: Big5's
# "日期" reads as "ら戳" in Shift-JIS) is not told from Chinese.
_KANA = re.compile("[\u3041-\u3096\u309d\u309e\u30a1-\u30fa\u30fc-\u30fe]+")
JAPANESE_MIN_KANA_SHARE = 0.2
JAPANESE_MIN_KANA = 3
# EUC-KR's 2,350 Hangul syllables (KS X 1001's rows 0xB0-0xC8), the ones Korean is written with.
# Korean read as code page 949 is nearly all of them: Django's translations all but a few
# symbols, prose with typographic quotes, bullets or hanja ("大韓民國") 88-92%; the bench's
# Chinese passages saved as GBK, read so, at most 77% (those of over 20 characters outside ASCII):
# GB2312's hanzi of rows 0xB0-0xC8 are these syllables in EUC-KR, the others hanja.
# Code page 949's other 8,822 syllables are rare in Korean, and are what Shift-JIS reads as.
_HANGUL = _runs_of("cp949", (lead << 8 | trail for lead in range(0xB0, 0xC9) for trail in range(0xA1, 0xFF)))
KOREAN_MIN_SHARE = 0.85
# A short text is held to more: dureader's "北京牡丹交通卡 年费" (nine characters, a space) reads
# 88% syllables. Under KOREAN_SHORT_CHARS characters outside ASCII, KOREAN_SHORT_MIN_SHARE.
KOREAN_SHORT_CHARS = 24
KOREAN_SHORT_MIN_SHARE = 0.95
# Korean writes spaces between words, Chinese none between its characters: a syllable, a space,
# a syllable, at least once per KOREAN_SYLLABLES_PER_SPACE syllables.
_HANGUL_SPACED = re.compile("[\uac00-\ud7a3] [\uac00-\ud7a3]")
KOREAN_SYLLABLES_PER_SPACE = 12

# UTF-8 with a few bytes that are not (a file cut inside a character, a stray byte of another
# encoding pasted in) went on to the other encodings: French UTF-8 with one Latin-1 byte was read
# as GB18030 ("Caf茅 cr猫me") and indexed so; Chinese UTF-8 with one was refused as "not UTF-8".
# Text in the other encodings read here makes fewer characters that decode as UTF-8 by chance
# than sequences that do not: at most 0.84 per invalid one in the bench's Chinese passages saved
# as GBK, Big5, EUC-KR, Shift-JIS or EUC-JP (1,500 of each set) and in Django's translations in
# their code pages, none in Western European text.
UTF8_MIN_VALID_PER_INVALID = 4

_HIGH_MASK = b"a" * 0x80 + b"h" * 0x80
_HIGH_RUN = re.compile(rb"hhh+")
# Well over Western text's share (none) and well under other code pages' (60% at least).
WESTERN_MAX_RUN_SHARE = 1 / 4

# Windows-1252, the five bytes it leaves undefined (0x81, 0x8D, 0x8F, 0x90, 0x9D) read as in
# Latin-1: how the WHATWG Encoding Standard (every browser) decodes "windows-1252" and "latin1".
_WINDOWS_1252 = "".join(bytes((byte,)).decode("cp1252", errors="ignore") or chr(byte) for byte in range(256))


def _spacing(text: str) -> int:
    return sum(text.count(char) for char in _SPACING)


def has_bom(data: bytes) -> bool:
    return any(data.startswith(bom) for bom, _ in _BOMS)


def bomless_decode(data: bytes) -> str | None:
    """The text of `data` if it is UTF-32 or UTF-16 without a byte order mark, else None.

    Its line breaks, tabs and spaces are code units of their own (UTF-16-LE "\\n" is `0a 00`, BE
    `00 0a`); read in the other byte order they are U+0A00, U+2000 and the like, unassigned or
    rare. So the byte order giving more of them in the first 8 KiB is the text's; then all of
    `data` must decode strictly, and read like text (see _NOT_TEXT). Where the NUL bytes sit is
    no guide: a Chinese text's 一 (U+4E00) is `00 4e` in UTF-16-LE, at an even offset, and in
    some of the bench's Chinese paragraphs most NULs are such. UTF-8 text with a stray NUL after
    a space has one such unit by chance, and stays binary: bytes that are valid UTF-8 must keep
    at least half the spacing they show read as UTF-8 (UTF-16 text read so shows all of it).
    """
    head = data[:_HEAD_BYTES]
    if b"\x00" not in head:
        return None
    try:
        # A character cut at the end of the head is no error.
        utf8_spacing = _spacing(codecs.getincrementaldecoder("utf-8")().decode(head))
    except UnicodeDecodeError:
        utf8_spacing = 0
    for width, little, big in _WIDE:
        if len(data) % width:
            continue
        spacing = {encoding: _spacing(head.decode(encoding, errors="replace")) for encoding in (little, big)}
        if spacing[little] == spacing[big]:
            continue
        encoding = little if spacing[little] > spacing[big] else big
        if spacing[encoding] < utf8_spacing / 2:
            continue
        try:
            text = data.decode(encoding)
        except UnicodeDecodeError:
            continue
        if not _NOT_TEXT.search(text) and _matched(text, _CONTROLS) < _spacing(text):
            return text
    return None


def _pieces(text: str) -> Iterator[str]:
    for start in range(0, len(text), _CHUNK_CHARS):
        yield text[start:start + _CHUNK_CHARS]


def _decoded_pieces(data: bytes, encoding: str, errors: str = "strict") -> Iterator[str]:
    """`data` decoded as `encoding` _CHUNK_BYTES at a time, together the text a whole decode gives:
    a character cut at the end of a chunk is completed by the next one. UnicodeDecodeError where
    it does not decode (its position is within the chunk)."""
    decoder = codecs.getincrementaldecoder(encoding)(errors)
    view = memoryview(data)
    for start in range(0, len(data), _CHUNK_BYTES):
        end = start + _CHUNK_BYTES
        yield decoder.decode(view[start:end], final=end >= len(data))


def _wide(text: str) -> int:
    """How many of `text`'s characters are outside ASCII."""
    return sum(len(piece) - len(piece.encode("ascii", errors="ignore")) for piece in _pieces(text))


def _matched(text: str, runs: re.Pattern) -> int:
    """How many of `text`'s characters `runs` (runs of a set of characters) matches: removed, a
    piece at a time, they are counted without a list of millions of matches or of the text between
    them (a run cut between two pieces counts the same)."""
    return sum(len(piece) - len(runs.sub("", piece)) for piece in _pieces(text))


def _tally(data: bytes, encoding: str, runs: re.Pattern) -> tuple[int, int] | None:
    """(characters outside ASCII, of them those `runs` matches) in `data` decoded as `encoding`,
    or None when it does not decode; counted a chunk at a time, never holding the whole text."""
    wide = matched = 0
    try:
        for piece in _decoded_pieces(data, encoding):
            wide += _wide(piece)
            matched += _matched(piece, runs)
    except UnicodeDecodeError:
        return None
    return wide, matched


def chinese_encoding(data: bytes) -> str | None:
    """The encoding `data` reads as Chinese in: GB18030 or Big5 (code page 950), whichever gives the
    larger share of its characters outside ASCII in its encoding's common set, when that share is
    at least CHINESE_MIN_SHARE; else None. The common sets: GB2312's symbols and level-1 hanzi,
    Big5's symbols and frequently used hanzi.

    Chinese is made of them: 99% of it in the bench's simplified corpora (cmrc2018, dureader, the
    laws, the Vue docs) saved as GBK, 70% in traditional Chinese saved as GBK (drcd), 96-100% in
    drcd saved as Big5. Each encoding decodes much of the other's text, as other characters: the
    Simplified corpora saved as GBK read 0.77-1.0 common as GB18030 and at most 0.83 as Big5 (most
    fail to decode), drcd saved as GBK 0.56-0.83 as GB18030 (none decodes as Big5), and drcd saved
    as Big5 0.22-0.50 as GB18030 (1,500 passages each).

    Windows-1252 text that decodes as GB18030 at all (no accent before a space, a full stop or a
    line end) pairs each accent with the byte after it: an ASCII letter ("ül" in "Müller") makes no
    GB2312 character, another lower-case accent ("çã" in "Administração") a level-2 hanzi or an
    unassigned one. Only a capital or a sign such as ¿ or § before an accent makes a common one:
    "AÇÃO" or "¿Él" alone still reads as Chinese. In Big5 a capital from À to Æ before an ASCII
    letter is a frequent hanzi ("Äpfel" reads 100% common), so Big5 only wins for bytes that do
    not read as Western (`reads_as_western`), which no drcd passage saved as Big5 does (0 of
    1,500): in them most bytes above 0x7F stand in runs, where Western text has single accents.
    A text of a few hanzi may read as Western too ("你好" in Big5), and is then read as such.
    """
    best, best_share = None, 0.0
    for encoding, common in (("gb18030", _GB2312_COMMON), ("cp950", _BIG5_COMMON)):
        tally = _tally(data, encoding, common)
        if tally is None:
            continue
        wide, matched = tally
        share = matched / wide if wide else 0.0
        if share < CHINESE_MIN_SHARE or share <= best_share:  # a tie stays GB18030
            continue
        # The Western check (a pass over every byte) only when Big5 would win.
        if encoding == "gb18030" or not reads_as_western(data):
            best, best_share = encoding, share
    return best


def japanese_reads(data: bytes, encoding: str) -> bool:
    """Whether `data` decodes as `encoding` (euc_jp or cp932) with at least JAPANESE_MIN_KANA_SHARE
    of its characters outside ASCII kana, and at least JAPANESE_MIN_KANA."""
    tally = _tally(data, encoding, _KANA)
    if tally is None:
        return False
    wide, kana = tally
    return kana >= JAPANESE_MIN_KANA and kana >= JAPANESE_MIN_KANA_SHARE * wide


def korean_reads(data: bytes) -> bool:
    """Whether `data` decodes as code page 949 (EUC-KR and its Unified Hangul Code extension) with
    at least KOREAN_MIN_SHARE of its characters outside ASCII Hangul syllables, spaced as words
    (see _HANGUL_SPACED). A text of a word or two is not told from Chinese."""
    wide = syllables = spaced = 0
    tail = ""
    try:
        for piece in _decoded_pieces(data, "cp949"):
            wide += _wide(piece)
            syllables += _matched(piece, _HANGUL)
            # A match is three characters: the last two not in one may begin one in the next piece.
            text, end = tail + piece, 0
            for match in _HANGUL_SPACED.finditer(text):
                spaced, end = spaced + 1, match.end()
            tail = text[max(end, len(text) - 2):]
    except UnicodeDecodeError:
        return False
    share = KOREAN_MIN_SHARE if wide >= KOREAN_SHORT_CHARS else KOREAN_SHORT_MIN_SHARE
    if not wide or syllables < share * wide:
        return False
    return bool(spaced) and spaced * KOREAN_SYLLABLES_PER_SPACE >= syllables


def reads_as_western(data: bytes) -> bool:
    """Whether `data` reads as Windows-1252 text: at most WESTERN_MAX_RUN_SHARE of its bytes
    above 0x7F stand in runs of three or more.

    Western European text's accents and typographic signs (é, ß, ç, “, €, —) stand alone or in
    twos ("ção", "“É") among ASCII letters: none stood in a longer run in Django's translations
    into the 16 languages it has that Windows-1252 writes. Cyrillic, Greek, Hebrew, Arabic and Thai
    code pages fill whole words with such bytes, as Shift-JIS and EUC-KR do: 87% to 100% of them
    stood in runs in each of those translations, 60% in Japanese and 82% in Korean at least.
    Other Latin code pages pass, and their letters Windows-1252 lacks come out wrong (Polish ł in
    Windows-1250 as ³, Turkish ş in Windows-1254 as þ).
    """
    # "h" for each byte above 0x7F, "a" for the others, a chunk at a time: a pattern with a literal
    # prefix is found fast, and bytes that are clearly not Western stop early.
    view = memoryview(data)
    chunks = [view[start:start + _CHUNK_BYTES] for start in range(0, len(data), _CHUNK_BYTES)]
    limit = sum(bytes(chunk).translate(_HIGH_MASK).count(b"h") for chunk in chunks) * WESTERN_MAX_RUN_SHARE
    in_runs = 0
    carried = 0  # the bytes above 0x7F that end the chunks read so far
    for chunk in chunks:
        mask = bytes(chunk).translate(_HIGH_MASK)
        body = mask.lstrip(b"h")
        if not body:
            carried += len(mask)
            continue
        run = carried + len(mask) - len(body)
        if run >= 3:
            in_runs += run
        inner = body.rstrip(b"h")
        carried = len(body) - len(inner)
        for match in _HIGH_RUN.finditer(inner):
            in_runs += match.end() - match.start()
        if in_runs > limit:
            return False
    if carried >= 3:
        in_runs += carried
    return in_runs <= limit


def _utf8_damage(data: bytes, error: UnicodeDecodeError) -> ConversionFailed | None:
    """The failure to report when `data` is UTF-8 but for a few invalid sequences (at least
    UTF8_MIN_VALID_PER_INVALID characters outside ASCII decode for each that does not); else None."""
    replaced = wide = 0
    for piece in _decoded_pieces(data, "utf-8", "replace"):
        replaced += piece.count("\ufffd")
        wide += _wide(piece)
    invalid = replaced - data.count("\ufffd".encode())
    if invalid <= 0 or wide - replaced < UTF8_MIN_VALID_PER_INVALID * invalid:
        return None
    line = data.count(b"\n", 0, error.start) + 1
    where = f"byte {error.start:,} (line {line:,})"
    what = (f"1 invalid byte sequence, at {where}" if invalid == 1
            else f"{invalid:,} invalid byte sequences, the first at {where}")
    return ConversionFailed(f"The text is UTF-8 except for {what}: the file was cut short, or bytes of another "
                            "encoding were pasted into it. Correct it, save it as UTF-8 and upload it again.")


def legacy_encoding(data: bytes) -> str | None:
    """The encoding after UTF-8 that `data` reads in, steps 4 to 8 of the module docstring taken
    in order (at step 6 the better of GB18030 and Big5), or None."""
    if japanese_reads(data, "euc_jp"):
        return "euc_jp"
    if korean_reads(data):
        return "cp949"
    chinese = chinese_encoding(data)
    if chinese is not None:
        return chinese
    if japanese_reads(data, "cp932"):
        return "cp932"
    return "windows-1252" if reads_as_western(data) else None


def _decode(data: bytes) -> str:
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            try:
                return str(memoryview(data)[len(bom):], encoding)  # not a copy of the bytes first
            except UnicodeDecodeError as exc:
                raise ConversionFailed(f"The text starts with a {encoding} byte order mark but is not "
                                       f"valid {encoding} (at byte {exc.start}).") from exc
    wide = bomless_decode(data)
    if wide is not None:
        return wide
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        damaged = _utf8_damage(data, exc)
        if damaged is not None:
            raise damaged from exc
    legacy = legacy_encoding(data)
    if legacy == "windows-1252":
        # A decoding table, as the encodings package's own cp1252 passes (typeshed lists only maps).
        return codecs.charmap_decode(data, "strict", _WINDOWS_1252)[0]  # type: ignore[arg-type]
    if legacy is not None:
        return data.decode(legacy)
    raise ConversionFailed("The text is not recognised as UTF-8, UTF-16, Chinese GB18030 or Big5, Japanese "
                           "Shift-JIS or EUC-JP, Korean EUC-KR, or Western European Windows-1252; save it as "
                           "UTF-8 and upload it again.")


def _cleaned_pieces(text: str) -> Iterator[str]:
    """`text` with newlines normalised and its controls replaced or dropped, _CHUNK_CHARS at a time.
    Done on the whole text at once, re.sub listed a piece per control: a 40 MB file of form feeds
    held 40 million references, 429 MB. A "\\r" that ends a piece is kept for the next one, where
    it may begin a "\\r\\n"; the other patterns are single characters."""
    carried = ""
    for start in range(0, len(text), _CHUNK_CHARS):
        piece = carried + text[start:start + _CHUNK_CHARS]
        carried = ""
        if piece.endswith("\r") and start + _CHUNK_CHARS < len(text):
            piece, carried = piece[:-1], "\r"
        piece = piece.replace("\r\n", "\n").replace("\r", "\n").replace("\ufeff", "")
        yield _CONTROL.sub("", _SEPARATING.sub(" ", piece))


def text_decode(data: bytes) -> str:
    """Bytes to text with newlines normalised, in the first encoding that fits (see the module
    docstring); ConversionFailed when none does."""
    text = _decode(data)
    pieces = list(_cleaned_pieces(text))
    del text  # the cleaned pieces and their join, not the decoded text too: twice the text at most
    return "".join(pieces)


def _paragraphs(text: str) -> Iterator[str]:
    """paragraphs(text), one at a time."""
    start = 0
    for blank in _BLANK_LINES.finditer(text):
        part = text[start:blank.start()].strip()
        if part:
            yield part
        start = blank.end()
    part = text[start:].strip()
    if part:
        yield part


def paragraphs(text: str) -> list[str]:
    """Blank-line separated paragraphs, trimmed, empty ones dropped."""
    return list(_paragraphs(text))


def parse(data: bytes, budget: TextBudget) -> ParsedDocument:
    text = text_decode(data)
    budget.spend(len(text))  # no more text than the file holds: counted once
    count = ParagraphCount()
    blocks = []
    for paragraph in _paragraphs(text):
        count.add()
        blocks.append(Block(text=paragraph))
    return ParsedDocument(file_type="txt", sections=(Section(headings=(), blocks=tuple(blocks)),) if blocks else ())


def check(data: bytes) -> bool:
    """Decodes (ConversionFailed when nothing fits); whether the text holds anything visible."""
    return has_visible_text(text_decode(data))
