"""pytest plugin for docker-py's own integration tests run against cordon (see run.sh): each
test gets 30 s (a feature cordon does not serve must fail, not hang the run), and
distutils' deprecation warning — which docker-py 5.0.3's suite turns into an error under
Python 3.11 — is ignored."""

import signal
import warnings

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    def too_long(*_):
        raise TimeoutError("the test took over 30 s")

    old = signal.signal(signal.SIGALRM, too_long)
    signal.alarm(30)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


_results: dict = {}


def pytest_runtest_logreport(report):
    """Each test's outcome (a failure in any phase fails it; an xfail counts as skipped),
    written at the end to $UPSTREAM_RESULTS for run.sh's known-failures ratchet."""
    if report.failed:
        _results[report.nodeid] = "failed"
    elif report.when == "call" or (report.skipped and report.nodeid not in _results):
        _results.setdefault(report.nodeid, "skipped" if report.skipped else "passed")
        if report.when == "call" and _results[report.nodeid] != "failed":
            _results[report.nodeid] = "skipped" if report.skipped else "passed"


def pytest_sessionfinish(session):
    import json
    import os

    path = os.environ.get("UPSTREAM_RESULTS")
    if path:
        with open(path, "w") as f:
            json.dump(_results, f, indent=1, sort_keys=True)
