"""cordon on Ray: a cordon node on every Ray node behind a stateless router (``cordon cluster
up``), and :class:`SandboxPool` for batches of programs spread over the cluster.

Needs the ``ray`` extra: ``pip install 'cordon-sdk[ray]'``.
"""

from .pool import SandboxPool

__all__ = ["SandboxPool"]
