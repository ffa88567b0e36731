"""Python client for ``cordon serve``: persistent Linux sandboxes for code that AI agents write.

    from cordon_sdk import Sandbox

    with Sandbox.create(memory="256M", ttl="10m") as sb:
        sb.files.write("/workspace/hello.py", "print('hi')")
        out = sb.commands.run(["python3", "/workspace/hello.py"])
        print(out.exit_code, out.stdout)
        cell = sb.code.run("x = 6\\nx * 7")
        print(cell.text)                      # 42

:class:`AsyncSandbox` is the same client with coroutines.
"""

# Each module lists its public names once, in its own ``__all__``; the package re-exports them.
from . import async_sandbox, errors, models, sandbox
from ._core import DEFAULT_TIMEOUT, DEFAULT_URL, __version__
from .async_sandbox import *  # noqa: F403
from .errors import *  # noqa: F403
from .models import *  # noqa: F403
from .sandbox import *  # noqa: F403

__all__ = ["__version__", "DEFAULT_URL", "DEFAULT_TIMEOUT"]
__all__ += sandbox.__all__
__all__ += async_sandbox.__all__
__all__ += models.__all__
__all__ += errors.__all__
