"""The report: one self-contained HTML file of titled sections (`document`). `phaseinterp reproduce`
builds the library's sections; a study renders its own result files into sections of its own
(`experiments/*/section.py` in the repository) and passes them to `commands.reproduce.run`."""

from phaseinterp.report.document import Section, write_report

__all__ = ["Section", "write_report"]
