"""Names the screenshots the browser tests saved at the end of the run (also under pytest-xdist,
where a test's own output is not shown)."""

_SAVED = []


def pytest_runtest_logreport(report):
    if report.when == "call":
        _SAVED.extend(value for key, value in report.user_properties if key == "screenshot")


def pytest_terminal_summary(terminalreporter):
    for path in _SAVED:
        terminalreporter.write_line(f"browser test screenshot: {path}")
