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
