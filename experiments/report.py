"""The studies' full report: `phaseinterp reproduce`'s sections, then each study's section rendered
from its shipped result files (mitigations, the zoo table, SmolLM2, NSA).

    python -m experiments.report [--quick] [--out out/report] [--png]

Run from the repository root of a checkout (the result files are under assets/results/).
"""

from __future__ import annotations

import argparse
import sys

from experiments.mitigations.section import mitigation_section
from experiments.nsa.section import nsa_section
from experiments.smollm2.section import smollm2_section
from experiments.zoo.section import zoo_section
from phaseinterp.commands import reproduce

SECTIONS = (("mitigations", mitigation_section), ("zoo", zoo_section), ("smollm2", smollm2_section),
            ("nsa", nsa_section))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.report")
    reproduce.register(parser.add_subparsers(dest="verb"))
    args = parser.parse_args(["reproduce", *(sys.argv[1:] if argv is None else argv)])
    return reproduce.run(args, extra=SECTIONS)


if __name__ == "__main__":
    sys.exit(main())
