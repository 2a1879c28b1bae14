"""The report: one self-contained HTML file of titled sections (`document`), and the sections
built from the studies' shipped result files (`mitigations`, `zoo`, `nsa`, `smollm2`, written by
`experiments/`; the report reads the files and never imports a study). The top floor with the commands."""

from phaseinterp.report.document import Section, write_report

__all__ = ["Section", "write_report"]
