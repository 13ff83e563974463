"""The repository stands on its own: nothing in it reads or cites a path outside it, and every
citation of a document section (`docs/contract.md#6-openrtb-path`, "contract, section 6", a
Markdown link with an anchor) names a heading that exists in the repository."""

from __future__ import annotations

import functools
import re
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
THIS = Path(__file__).resolve()
CONTRACT = ROOT / "docs" / "contract.md"

# Written in pieces, so that this file does not cite what it forbids.
_SHARED = "sha" + "red"
#: References to material beside or above the checkout: the folder of standards and product
#: documents a checkout does not have, and absolute paths of one machine.
OUTSIDE = [
    re.compile(r"\.\./" + _SHARED + r"\b"),
    re.compile(r"\b" + _SHARED + r"/(?:spec|reference|style|performance)"),
    re.compile(r"\b" + _SHARED + r"/[\w.-]+\.(?:md|xsd|json)\b"),
    re.compile(r"(?<![\w.])/" + "work" + r"/"),
]
#: `file.md#anchor`, alone or as the target of a Markdown link.
ANCHORED = re.compile(r"(?P<path>[\w./-]+\.md)#(?P<anchor>[\w-]+)")
SAME_FILE = re.compile(r"\]\(#(?P<anchor>[\w-]+)\)")
#: "contract, section 6", "contract section 6a", "the contract, [section 6]".
CONTRACT_SECTION = re.compile(r"\b[Cc]ontract,? \[?[Ss]ection (?P<number>\d+[a-z]?)\b")
#: Forms that point nowhere in the repository: docs/decisions.md has no numbered sections.
UNRESOLVABLE = re.compile(r"\b[Dd]ecisions(?:,? section)? \d|§")
#: "section N" with a one-level number: the contract's, which must say so. Dotted numbers
#: ("RFC 8259 section 8.1", the OpenRTB guide's 7.9.6.1) are the standards' own.
BARE_SECTION = re.compile(r"\b[Ss]ection \[?(?P<number>\d+[a-z]?)\b(?![.\d])")
OWNERS = re.compile(r"(?:[Cc]ontract,? \[?|RFC \d+ |OpenRTB[\w. ]* |AdCOM[\w. ]* |VAST[\w. ]* )$")


def tracked_files() -> list[Path]:
    """The files a clone holds (tracked, plus new ones not ignored), or every file outside the
    tool folders when the tree is not a git checkout."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout.decode()
        names = [name for name in listed.split("\0") if name]
    except (OSError, subprocess.CalledProcessError):
        skip = {".git", ".venv", ".run", "__pycache__", ".mypy_cache", ".ruff_cache"}
        names = [
            str(p.relative_to(ROOT))
            for p in ROOT.rglob("*")
            if p.is_file() and not skip & set(p.relative_to(ROOT).parts)
        ]
    return [ROOT / name for name in sorted(names) if (ROOT / name).is_file()]


def text_files() -> Iterator[tuple[Path, str]]:
    for path in tracked_files():
        if path == THIS:
            continue
        raw = path.read_bytes()
        if b"\0" in raw:
            continue
        try:
            yield path, raw.decode()
        except UnicodeDecodeError:
            continue


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"<[^>]+>", "", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@functools.cache
def file_anchors(path: Path) -> frozenset[str]:
    return frozenset(anchors(path.read_text())) if path.is_file() else frozenset()


def anchors(markdown: str) -> set[str]:
    """Every anchor of a Markdown document: its headings (outside code blocks, repeated ones
    numbered as GitHub numbers them) and explicit `<a name|id="...">`."""
    found: set[str] = set(re.findall(r"<a (?:name|id)=\"([^\"]+)\"", markdown))
    seen: Counter[str] = Counter()
    fenced = False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        heading = re.match(r"#{1,6} (.+)", line)
        if heading and not fenced:
            base = slug(heading.group(1))
            found.add(f"{base}-{seen[base]}" if seen[base] else base)
            seen[base] += 1
    return found


def outside_references(text: str) -> list[str]:
    return [
        f"line {text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
        for pattern in OUTSIDE
        for m in pattern.finditer(text)
    ]


def broken_citations(path: Path, text: str) -> list[str]:
    """What in `text` (the file at `path`) cites a section that does not exist in the tree."""
    problems = []
    contract = file_anchors(CONTRACT)

    def where(m: re.Match[str]) -> str:
        return f"line {text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"

    for m in ANCHORED.finditer(text):
        token = text[: m.start()].rsplit(maxsplit=1)[-1] if text[: m.start()].strip() else ""
        if "://" in token + m.group("path"):
            continue  # a web address, not a file of this repository
        name = m.group("path")
        candidates = [path.parent / name, ROOT / name, ROOT / "docs" / name]
        target = next((c.resolve() for c in candidates if c.is_file()), None)
        if target is None or ROOT not in target.parents:
            problems.append(f"{where(m)} (no such file in the repository)")
        elif m.group("anchor") not in file_anchors(target):
            problems.append(f"{where(m)} (no such heading in {target.relative_to(ROOT)})")
    if path.suffix == ".md":
        own = anchors(text)
        problems += [
            f"{where(m)} (no such heading)"
            for m in SAME_FILE.finditer(text)
            if m.group("anchor") not in own
        ]
    for m in CONTRACT_SECTION.finditer(text):
        number = m.group("number")
        if not any(a == number or a.startswith(f"{number}-") for a in contract):
            problems.append(f"{where(m)} (docs/contract.md has no section {number})")
    problems += [
        f"{where(m)} (cite docs/contract.md#<section>)" for m in UNRESOLVABLE.finditer(text)
    ]
    for m in BARE_SECTION.finditer(text):
        before = text[max(0, m.start() - 40) : m.start()]
        if not OWNERS.search(before):
            problems.append(f"{where(m)} (whose section? cite docs/contract.md#<section>)")
    return problems


def test_the_tree_is_listed() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in tracked_files()}
    assert {"README.md", "docs/contract.md", "tests/support/paths.py"} <= names


def test_nothing_reads_or_cites_a_path_outside_the_repository() -> None:
    found = {
        str(path.relative_to(ROOT)): refs
        for path, text in text_files()
        if (refs := outside_references(text))
    }
    assert found == {}


def test_every_section_citation_resolves_inside_the_repository() -> None:
    found = {
        str(path.relative_to(ROOT)): problems
        for path, text in text_files()
        if (problems := broken_citations(path, text))
    }
    assert found == {}


def test_the_contract_has_every_section_the_code_cites() -> None:
    # The sections 0-8 and 6a, at the anchors the code and the served guides link to.
    expected = {"0-reading-the-contract", "1-money", "2-inventory", "3-matching-and-price"}
    expected |= {"4-offers-reservations-and-outcomes", "5-playout-confirmation"}
    expected |= {"6-openrtb-path", "6a-vast-documents", "7-durability", "8-operations"}
    assert expected <= anchors(CONTRACT.read_text())


@pytest.mark.parametrize(
    "planted",
    [
        "see ../" + _SHARED + "/reference/vast",
        "(" + _SHARED + "/spec/decisions.md)",
        "Path('/" + "work/main/docs')",
    ],
)
def test_a_planted_outside_reference_is_found(planted: str) -> None:
    assert outside_references(f"fine\n{planted}\n") != []


@pytest.mark.parametrize(
    "planted",
    [
        "docs/contract.md#9-nowhere",
        "[gone](contract.md#6-openrtb)",
        "docs/no-such-guide.md#1-money",
        "the contract, section 9, says",
        "as decisions section 6 has it",
        "decisions 6a",
        "§ 6",
        "read section 6 the literal way",
    ],
)
def test_a_planted_broken_citation_is_found(planted: str) -> None:
    assert broken_citations(ROOT / "docs" / "decisions.md", f"fine\n{planted}\n") != []


@pytest.mark.parametrize(
    "fine",
    [
        "docs/contract.md#6-openrtb-path",
        "[contract, section 6](contract.md#6-openrtb-path)",
        "the contract, section 6a, says",
        "(RFC 8259 section 8.1)",
        "https://github.com/o/r/blob/main/README.md#license",
        "[Validation order](api-openrtb.md#validation-order)",
    ],
)
def test_a_citation_that_resolves_passes(fine: str) -> None:
    assert broken_citations(ROOT / "docs" / "decisions.md", fine) == []
