"""Synthetic samples generated in code, never patient data: PDFs (pdfs.py) and the shipped report
template with made-up data for it (monthly_report.py), for the demo, the warm-up, tests and benchmarks."""
