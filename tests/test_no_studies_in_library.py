"""The library does not name the studies built on it (issue 42): no zoo member or table, no claim number,
no study folder under experiments/; the studies' own code lives in experiments/ and reads the library."""

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "phaseinterp"
#: (pattern, what it names); the deprecated `zoo_figure` keeps old notebooks running and warns
NAMES = ((r"\bzoo\b|zoo-|zoo's|zoo table", "the zoo study"), (r"\bclaims? \d", "a claim number"),
         (r"experiments/\w", "a study folder"), (r"(?-i:PAPER\.md)", "the paper's notes file"))
ALLOWED = {("plot/curves.py", "def zoo_figure"), ("plot/curves.py", "zoo_figure is deprecated"),
           ("plot/__init__.py", "zoo_figure")}


def offending_lines(package: Path = PACKAGE) -> list[str]:
    found = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        for no, line in enumerate(path.read_text().splitlines(), 1):
            for pattern, what in NAMES:
                if re.search(pattern, line, re.IGNORECASE) and not any(rel == f and s in line for f, s in ALLOWED):
                    found.append(f"{rel}:{no}: {what}: {line.strip()}")
    return found


def test_no_module_names_a_study_a_claim_or_a_study_folder():
    assert offending_lines() == []


def test_the_check_finds_a_study_name(tmp_path):
    (tmp_path / "x.py").write_text('"""see experiments/zoo and claim 2"""\n')
    assert [f.split(": ")[1] for f in offending_lines(tmp_path)] == ["the zoo study", "a claim number", "a study folder"]
