"""The report: one self-contained HTML file of titled sections (`document`), and the sections
built from shipped results (`mitigations`, `zoo`, `nsa`). The top floor with the commands."""

from phaseinterp.report.document import Section, write_report

__all__ = ["Section", "write_report"]
