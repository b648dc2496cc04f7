"""Name each slow test step as it ends, so that a run cut off by a time limit still says
where its time went (``--durations`` prints only at the end)."""

import pytest

SLOW_STEP_S = 60.0


class SlowSteps:
    """A plugin for the process that prints the run: with xdist, the controller (the
    workers' reports reach it)."""

    def __init__(self, config: pytest.Config, slow_s: float = SLOW_STEP_S) -> None:
        self.config, self.slow_s = config, slow_s

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.duration < self.slow_s:
            return
        terminal = self.config.pluginmanager.get_plugin("terminalreporter")
        if terminal is not None:
            terminal.ensure_newline()  # not after a row of progress dots
            terminal.write_line(f"[slow step] {report.duration:.0f}s {report.when} {report.nodeid}")


def register(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # not inside an xdist worker
        config.pluginmanager.register(SlowSteps(config), "dsv4-slow-steps")
