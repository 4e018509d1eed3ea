"""The reports of every command that reports (verify, score): one renderer per format over one `Report`
(model.py: the results, the runs, and the command's `View`); console.py the stdout text, json_report.py,
csv_report.py, junit_report.py and html_report.py (with cards.py and maps.py) the files, files.py writes them
(atomically) and holds the one table of formats; analysis.py the comparisons of runs (paired tests, repeated
runs). A command differs only by its View and by what it has data for."""
