"""The code interpreter through `e2b_code_interpreter.Sandbox` as published."""

from __future__ import annotations

import base64

import pytest
from e2b.exceptions import NotFoundException


def test_run_code_results_logs_state(ci):
    ex = ci.run_code("x = 41\nprint('hello')\nx + 1")
    assert ex.error is None
    assert ex.logs.stdout == ["hello\n"]
    assert ex.text == "42"
    assert ex.results[0].is_main_result
    assert ex.execution_count >= 1
    # State persists between cells, and the kernel starts in the user's home.
    assert ci.run_code("x * 2").text == "82"
    assert ci.run_code("import os; os.path.samefile(os.getcwd(), '/home/user')").text == "True"


def test_run_code_error(ci):
    ex = ci.run_code("1 / 0")
    assert ex.error is not None
    assert ex.error.name == "ZeroDivisionError"
    assert "division by zero" in ex.error.value
    assert "ZeroDivisionError" in ex.error.traceback


def test_streams_callbacks(ci):
    out, err = [], []
    ci.run_code(
        "import sys\nprint('a')\nprint('b', file=sys.stderr)",
        on_stdout=lambda m: out.append(m.line),
        on_stderr=lambda m: err.append(m.line),
    )
    assert "".join(out) == "a\n" and "".join(err) == "b\n"


def test_png_chart(ci):
    ex = ci.run_code(
        "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()"
    )
    assert ex.error is None, ex.error
    pngs = [r.png for r in ex.results if r.png]
    assert pngs, ex.results
    assert base64.b64decode(pngs[0])[:8] == b"\x89PNG\r\n\x1a\n"


def test_contexts_create_list_restart_remove(ci):
    ctx = ci.create_code_context()
    assert ctx.language == "python" and ctx.cwd == "/home/user"
    ci.run_code("y = 'kept'", context=ctx)
    assert ci.run_code("y", context=ctx).text == "'kept'"
    # Another context does not share it.
    assert ci.run_code("'y' in globals()").text == "False"
    assert ctx.id in [c.id for c in ci.list_code_contexts()]
    ci.restart_code_context(ctx)
    assert ci.run_code("'y' in globals()", context=ctx).text == "False"
    ci.remove_code_context(ctx)
    assert ctx.id not in [c.id for c in ci.list_code_contexts()]
    with pytest.raises(NotFoundException):
        ci.restart_code_context(ctx.id)


def test_other_languages(ci):
    ex = ci.run_code("echo $((6 * 7))", language="bash")
    assert ex.logs.stdout == ["42\n"], ex
    js = ci.create_code_context(language="javascript")
    ex = ci.run_code("let z = 20; z + 22", context=js)
    assert ex.text == "42", ex
