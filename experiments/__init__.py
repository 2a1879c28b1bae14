"""The studies behind the shipped results (see experiments/README.md); run from the repository root
as `python -m experiments.STUDY.SCRIPT`. Not part of the installed package."""
