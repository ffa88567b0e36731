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
    assert ci.run_code("y", context=ctx).text == "kept"
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


def test_run_code_envs_hold_for_one_cell(ci, server):
    """`run_code(envs=…)`: the variables exist for that cell (and what it starts) only, in every
    language, and their values never reach the server's log or audit trail."""
    secret = "cell-secret-7d2e9a"
    home = ci.run_code("import os; os.environ['HOME']").text
    ex = ci.run_code(
        "import os, subprocess\n"
        "print(os.environ['CELL_VAR'], subprocess.run(['sh', '-c', 'echo $CELL_VAR'], capture_output=True, text=True).stdout.strip())\n"
        "os.environ.get('HOME')",
        envs={"CELL_VAR": secret, "HOME": "/elsewhere"},
    )
    assert ex.error is None, ex.error
    assert ex.logs.stdout == [f"{secret} {secret}\n"]
    assert ex.text == "/elsewhere"
    # The next cell of the same context sees neither, and HOME is back.
    ex = ci.run_code("import os; (os.environ.get('CELL_VAR'), os.environ.get('HOME'))")
    assert ex.text == f"(None, {home!r})", ex.text

    js = ci.create_code_context(language="js")
    ex = ci.run_code("process.env.CELL_VAR + '|' + require('child_process').execSync('echo $CELL_VAR').toString().trim()", context=js, envs={"CELL_VAR": "js-val"})
    assert ex.error is None, ex.error
    assert ex.text == "js-val|js-val"
    assert ci.run_code("String(process.env.CELL_VAR)", context=js).text == "undefined"

    sh = ci.create_code_context(language="bash")
    ci.run_code("CELL_VAR=before", context=sh)
    ex = ci.run_code("echo \"$CELL_VAR\"; bash -c 'echo \"child:$CELL_VAR\"'", context=sh, envs={"CELL_VAR": "it's $(not run)"})
    assert ex.error is None, ex.error
    assert "".join(ex.logs.stdout) == "it's $(not run)\nchild:it's $(not run)\n"
    ex = ci.run_code("echo \"$CELL_VAR\"", context=sh)
    assert "".join(ex.logs.stdout) == "before\n"

    # A name that is not a variable name is the request's fault, with the SDK's error.
    with pytest.raises(Exception) as e:
        ci.run_code("1", envs={"A=B": "x"})
    assert "not a variable name" in str(e.value)
    # The value went nowhere on the host side.
    assert secret not in server.log.read_text(errors="replace")
    for f in server.data_dir.rglob("*"):
        if f.is_file():
            assert secret.encode() not in f.read_bytes(), f


def test_the_readmes_data_analysis_example_runs_end_to_end():
    """The README's example as written: a CSV uploaded, pandas and matplotlib in a cell of the
    default (code-interpreter-v1) sandbox, the total as the cell's text, the chart as a PNG."""
    from e2b_code_interpreter import Sandbox

    with Sandbox.create() as sbx:
        sbx.files.write("/home/user/sales.csv", "month,sales\nJan,10\nFeb,14\nMar,9\n")
        run = sbx.run_code("""
import pandas as pd
import matplotlib.pyplot as plt
df = pd.read_csv("/home/user/sales.csv")
df.plot(x="month", y="sales", kind="bar")
plt.show()
int(df["sales"].sum())
""")
        assert run.error is None, run.error
        assert run.text == "33"
        chart = next(r for r in run.results if r.png)
        png = base64.b64decode(chart.png)
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 1000
