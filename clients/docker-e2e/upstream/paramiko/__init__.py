"""A stand-in for paramiko: docker-py's tests/helpers.py imports it for its ssh tests only,
which this run does not include."""


class SSHClient:
    pass


class WarningPolicy:
    pass


class Channel:
    """tests/helpers.py's detach check asks whether a socket is one (here never)."""
