"""The paper's claims and the findings beyond it, judged from the shipped result files."""
