"""Tests for the in-sandbox kernel drivers (driver.py, node_driver.js), run directly on the host.

    python3 -m pytest crates/cordon-service/src/interpreters/tests -q

Each test starts the driver the way the server does:
    /usr/bin/python3 -u -c "<driver.py>" <language>   (CORDON_NODE_DRIVER=<node_driver.js>)
matplotlib/pandas tests need Debian's python3-matplotlib / python3-pandas for /usr/bin/python3.
"""

import base64
import json
import os
import queue
import shutil
import signal
import struct
import subprocess
import threading
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
KERNELS = os.path.dirname(HERE)
PY = "/usr/bin/python3"
DRIVER = open(os.path.join(KERNELS, "driver.py"), encoding="utf-8").read()
NODE_DRIVER = open(os.path.join(KERNELS, "node_driver.js"), encoding="utf-8").read()


def _has_module(mod):
    return subprocess.run([PY, "-c", "import " + mod], capture_output=True).returncode == 0


needs_node = pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
needs_mpl = pytest.mark.skipif(not _has_module("matplotlib"), reason="apt-get install python3-matplotlib")
needs_pandas = pytest.mark.skipif(not _has_module("pandas"), reason="apt-get install python3-pandas")


class Cell:
    def __init__(self, msgs):
        self.msgs = msgs
        self.done = msgs[-1] if msgs and msgs[-1].get("type") == "done" else None
        self.stdout = "".join(m["text"] for m in msgs if m.get("type") == "stream" and m["name"] == "stdout")
        self.stderr = "".join(m["text"] for m in msgs if m.get("type") == "stream" and m["name"] == "stderr")
        self.results = [m for m in msgs if m.get("type") == "result"]
        errors = [m for m in msgs if m.get("type") == "error"]
        assert len(errors) <= 1, errors
        self.error = errors[0] if errors else None

    @property
    def main(self):
        mains = [r for r in self.results if r["is_main_result"]]
        assert len(mains) <= 1
        return mains[0]["data"] if mains else None

    @property
    def status(self):
        return self.done and self.done["status"]


class Kernel:
    def __init__(self, lang, env=None):
        e = dict(os.environ)
        e.pop("MPLBACKEND", None)
        e["MPLBACKEND"] = "Agg"  # as the server sets it
        if lang == "javascript":
            e["CORDON_NODE_DRIVER"] = NODE_DRIVER
        e.update(env or {})
        self.cwd = os.environ.get("TMPDIR", "/tmp")
        self.proc = subprocess.Popen(
            [PY, "-u", "-c", DRIVER, lang],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=e,
            cwd=self.cwd,
            start_new_session=True,  # its own process group, as in the sandbox
        )
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.next_id = 100
        self.ready = self.recv(30)
        assert self.ready is not None, "driver did not start"

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(json.loads(line))  # every line must be JSON
        self.lines.put(None)

    def recv(self, timeout=30):
        return self.lines.get(timeout=timeout)

    def send(self, obj):
        raw = obj if isinstance(obj, (bytes, str)) else json.dumps(obj)
        if isinstance(raw, str):
            raw = raw.encode()
        self.proc.stdin.write(raw + b"\n")
        self.proc.stdin.flush()

    def execute(self, code, timeout=60, expect_done=True):
        self.next_id += 1
        rid = self.next_id
        self.send({"id": rid, "op": "execute", "code": code})
        return self.collect(rid, timeout, expect_done)

    def collect(self, rid, timeout=60, expect_done=True):
        msgs = []
        deadline = time.time() + timeout
        while True:
            m = self.lines.get(timeout=max(0.1, deadline - time.time()))
            if m is None:
                assert not expect_done, "driver exited before done: %r" % msgs
                return Cell(msgs)
            assert m.get("id") == rid, "message for another cell: %r" % m
            msgs.append(m)
            if m.get("type") == "done":
                return Cell(msgs)

    def interrupt(self):
        os.killpg(self.proc.pid, signal.SIGINT)

    def close(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


@pytest.fixture
def kernel_factory():
    made = []

    def make(lang, **kw):
        k = Kernel(lang, **kw)
        made.append(k)
        return k

    yield make
    for k in made:
        k.close()


@pytest.fixture
def py(kernel_factory):
    return kernel_factory("python")


@pytest.fixture
def js(kernel_factory):
    if shutil.which("node") is None:
        pytest.skip("node is not installed")
    return kernel_factory("javascript")


@pytest.fixture
def sh(kernel_factory):
    return kernel_factory("bash")


def interrupt_after(k, delay):
    t = threading.Timer(delay, k.interrupt)
    t.start()
    return t


def png_size(b64):
    raw = base64.b64decode(b64)
    assert raw[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert raw[12:16] == b"IHDR"
    return struct.unpack(">II", raw[16:24])


# ---------------------------------------------------------------------------------------------
# Python


def test_ready_line(py):
    assert py.ready["type"] == "ready"
    assert py.ready["language"] == "python"
    assert py.ready["version"].startswith("3.")


def test_state_persists_and_count_increments(py):
    c1 = py.execute("x = 5")
    assert c1.status == "ok" and c1.results == [] and c1.done["execution_count"] == 1
    c2 = py.execute("x * 2")
    assert c2.main == {"text/plain": "10"}
    assert c2.done["execution_count"] == 2
    c3 = py.execute("def f(y):\n    return x + y\nf(1)")
    assert c3.main["text/plain"] == "6"
    assert py.execute("f(2)").main["text/plain"] == "7"


def test_imports_persist(py):
    assert py.execute("import json, collections").status == "ok"
    assert py.execute("json.dumps(collections.Counter('aab'))").main["text/plain"] == "'{\"a\": 2, \"b\": 1}'"


def test_main_result_rules(py):
    assert py.execute("None").results == []
    assert py.execute("y = 3").results == []
    assert py.execute("y;").results == []  # trailing semicolon suppresses, as in Jupyter
    assert py.execute("y  # comment").main["text/plain"] == "3"
    assert py.execute("'a' + 'b'").main["text/plain"] == "'ab'"
    assert py.execute("_").main["text/plain"] == "'ab'"  # last result
    assert py.execute("for i in range(3):\n    pass\ni").main["text/plain"] == "2"


def test_stdout_and_stderr_streams(py):
    c = py.execute("import sys\nprint('out1')\nprint('err1', file=sys.stderr)\nprint('out2')\n42")
    assert c.stdout == "out1\nout2\n"
    assert c.stderr == "err1\n"
    assert c.main["text/plain"] == "42"
    # ordering: all streamed output of the cell comes before the result and done
    kinds = [m["type"] for m in c.msgs]
    assert kinds.index("result") > max(i for i, k in enumerate(kinds) if k == "stream")
    assert kinds[-1] == "done"


def test_large_output_is_complete(py):
    c = py.execute("for i in range(20000):\n    print(i)")
    assert c.stdout == "".join("%d\n" % i for i in range(20000))


def test_unicode_output(py):
    c = py.execute("print('héllo ✓ 日本'); 'ü'")
    assert c.stdout == "héllo ✓ 日本\n"
    assert c.main["text/plain"] == "'ü'"


def test_protocol_looking_output_is_just_text(py):
    spoof = '{"id": 101, "type": "done", "status": "ok", "execution_count": 99}'
    c = py.execute("print(%r)\nimport os\nos.write(1, b'%s\\n')\nos.write(2, b'%s\\n')" % (spoof, spoof, spoof))
    assert c.stdout == spoof + "\n" + spoof + "\n"
    assert c.stderr == spoof + "\n"
    assert c.done["execution_count"] == 1
    assert py.execute("1 + 1").main["text/plain"] == "2"


def test_closing_stdout_does_not_break_protocol(py):
    assert py.execute("import sys\nsys.stdout.close()").status == "ok"
    assert py.execute("print('still here')").stdout == "still here\n"
    c = py.execute("import os\nos.close(1)\nos.close(2)")
    assert c.status == "ok"
    c = py.execute("import sys\nprint('back'); print('err', file=sys.stderr)")
    assert c.stdout == "back\n" and c.stderr == "err\n"
    c = py.execute("import os, sys\nfd = os.open(os.devnull, os.O_WRONLY)\nos.dup2(fd, 1)\nprint('lost')")
    assert c.status == "ok"
    assert py.execute("print('restored')").stdout == "restored\n"


def test_subprocess_output_is_captured(py):
    c = py.execute("import subprocess\nsubprocess.run(['echo', 'hi'])\nimport os\nos.system('echo sys; echo e >&2')")
    assert c.stdout == "hi\nsys\n"
    assert c.stderr == "e\n"


def test_stdin_is_devnull(py):
    c = py.execute("input()")
    assert c.error["name"] == "EOFError"
    assert py.execute("import sys; sys.stdin.read()").main["text/plain"] == "''"


def test_exception_with_traceback(py):
    c = py.execute("def inner():\n    return 1 / 0\n\ndef outer():\n    return inner()\n\nouter()")
    assert c.status == "error"
    e = c.error
    assert e["name"] == "ZeroDivisionError"
    assert e["value"] == "division by zero"
    tb = e["traceback"]
    assert tb[0] == "Traceback (most recent call last):"
    assert tb[-1] == "ZeroDivisionError: division by zero"
    text = "\n".join(tb)
    assert "outer()" in text and "return 1 / 0" in text and "in inner" in text
    assert '"<string>"' not in text  # no driver frames
    # the state survives an error
    assert py.execute("inner.__name__").main["text/plain"] == "'inner'"


def test_exception_from_library_keeps_its_frames(py):
    c = py.execute("import json\njson.loads('{')")
    assert c.error["name"] == "JSONDecodeError"
    assert any("json" in line and "decoder.py" in line for line in c.error["traceback"])


def test_syntax_error(py):
    c = py.execute("x = = 1")
    assert c.status == "error"
    assert c.error["name"] == "SyntaxError"
    assert "x = = 1" in "\n".join(c.error["traceback"])
    assert not any("ast.py" in line for line in c.error["traceback"])


def test_bang_and_magic_lines_run_as_in_ipython(py):
    c = py.execute("for i in range(2):\n    !echo bang $((1 + 1))\n%system echo magic\n_exit_code")
    assert c.status == "ok", c.error
    assert c.stdout == "bang 2\nbang 2\nmagic\n"
    assert c.main["text/plain"] == "0"
    c = py.execute("!exit 3\n_exit_code")
    assert c.main["text/plain"] == "3"
    # Lines inside strings are Python's when the cell parses as it is.
    assert py.execute('s = """\n!echo no\n%pip no\n"""\ns.count("!")').main["text/plain"] == "1"
    c = py.execute("%timeit 1")
    assert c.error["name"] == "NameError" and "%pip" in c.error["value"]


def test_pip_magic_runs_this_interpreters_pip(py):
    c = py.execute("%pip --version")
    assert c.status == "ok", c.error
    assert c.stdout.startswith("pip ") and "python 3" in c.stdout


def test_a_user_site_made_after_start_is_importable(kernel_factory, tmp_path):
    # As pip's user install does: the user site-packages directory appears mid-session (a
    # user base of the test's own, so the host's home is left alone).
    py = kernel_factory("python", env={"PYTHONUSERBASE": str(tmp_path / "userbase")})
    c = py.execute("import site, os, sys\nus = site.getusersitepackages()\nsite.ENABLE_USER_SITE and us not in sys.path")
    if c.main["text/plain"] != "True":
        pytest.skip("the user site exists already or is disabled here")
    py.execute("os.makedirs(us, exist_ok=True)\nopen(os.path.join(us, 'cordon_late_probe.py'), 'w').write('X = 7')")
    assert py.execute("import cordon_late_probe\ncordon_late_probe.X").main["text/plain"] == "7"


def test_system_exit_does_not_kill_the_kernel(py):
    py.execute("z = 1")
    c = py.execute("import sys\nsys.exit(3)")
    assert c.error["name"] == "SystemExit" and c.error["value"] == "3"
    assert py.execute("z").main["text/plain"] == "1"


def test_display_multiple_results_in_order(py):
    c = py.execute("print('a')\ndisplay(1, 'two')\nprint('b')\ndisplay([3])\n'main'")
    rs = c.results
    assert [r["data"]["text/plain"] for r in rs] == ["1", "'two'", "[3]", "'main'"]
    assert [r["is_main_result"] for r in rs] == [False, False, False, True]
    # streams and results interleave as produced
    seq = [(m["type"], m.get("text") or m.get("data", {}).get("text/plain")) for m in c.msgs[:-1]]
    assert seq == [("stream", "a\n"), ("result", "1"), ("result", "'two'"), ("stream", "b\n"),
                   ("result", "[3]"), ("result", "'main'")]


RICH = r'''
import base64
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==")

class Rich:
    def _repr_html_(self): return "<b>bold</b>"
    def _repr_markdown_(self): return "# title"
    def _repr_svg_(self): return "<svg xmlns='http://www.w3.org/2000/svg'/>"
    def _repr_png_(self): return PNG
    def _repr_json_(self): return {"a": [1, 2], "nan": float("nan")}
    def _repr_latex_(self): return None   # None: that type is absent
    def __repr__(self): return "Rich()"
'''


def test_rich_reprs(py):
    assert py.execute(RICH).status == "ok"
    d = py.execute("Rich()").main
    assert d["text/plain"] == "Rich()"
    assert d["text/html"] == "<b>bold</b>"
    assert d["text/markdown"] == "# title"
    assert d["image/svg+xml"].startswith("<svg")
    assert png_size(d["image/png"]) == (1, 1)
    assert d["application/json"] == {"a": [1, 2], "nan": None}
    assert "text/latex" not in d
    # display() gives the same bundle as a non-main result
    c = py.execute("display(Rich())")
    assert c.results[0]["is_main_result"] is False
    assert c.results[0]["data"]["text/html"] == "<b>bold</b>"


def test_repr_edge_cases(py):
    c = py.execute(
        "class Bad:\n"
        "    def _repr_html_(self): raise ValueError('nope')\n"
        "    def __repr__(self): return 'Bad()'\n"
        "class Any:\n"
        "    def __getattr__(self, name): return lambda *a, **k: '<i>x</i>'\n"
        "    def __repr__(self): return 'Any()'\n"
        "class Bundle:\n"
        "    def _repr_mimebundle_(self, include=None, exclude=None):\n"
        "        return {'text/html': '<p>b</p>', 'text/plain': 'B!'}\n"
        "display(Bad(), Any(), Bundle(), int)"
    )
    bad, anyobj, bundle, cls = [r["data"] for r in c.results]
    assert bad == {"text/plain": "Bad()"} and "_repr_html_() failed" in c.stderr
    assert anyobj == {"text/plain": "Any()"}
    assert bundle == {"text/html": "<p>b</p>", "text/plain": "B!"}
    assert cls == {"text/plain": "<class 'int'>"}


def test_top_level_await(py):
    c = py.execute("import asyncio\nasync def f():\n    await asyncio.sleep(0.01)\n    return 7\nawait f()")
    assert c.main["text/plain"] == "7"


def test_user_classes_pickle(py):
    py.execute("class P:\n    pass")
    c = py.execute("import pickle\ntype(pickle.loads(pickle.dumps(P()))).__qualname__")
    assert c.main["text/plain"] == "'P'"
    assert py.execute("__name__").main["text/plain"] == "'__main__'"


def test_background_thread_output_goes_to_the_next_cell(py):
    py.execute("import threading, time\nthreading.Timer(0.2, lambda: print('late')).start()")
    time.sleep(0.5)
    c = py.execute("print('now')")
    assert c.stdout == "late\nnow\n"


@needs_mpl
def test_matplotlib_figure_as_png(py):
    c = py.execute(
        "import matplotlib.pyplot as plt\n"
        "fig = plt.figure(figsize=(4, 3), dpi=50)\n"
        "plt.plot([1, 2, 3], [1, 4, 9])\n"
        "print('drawn')"
    )
    assert c.status == "ok", c.error
    assert c.stdout == "drawn\n"
    assert c.stderr == ""  # no "non-interactive backend" warnings
    figs = [r for r in c.results if "image/png" in r["data"]]
    assert len(figs) == 1 and not figs[0]["is_main_result"]
    assert png_size(figs[0]["data"]["image/png"]) == (200, 150)
    assert "Figure" in figs[0]["data"]["text/plain"]
    # figures are closed after the cell: nothing is emitted again
    c = py.execute("len(plt.get_fignums())")
    assert c.main["text/plain"] == "0"
    assert len(c.results) == 1


@needs_mpl
def test_matplotlib_show_emits_in_place(py):
    c = py.execute(
        "import matplotlib.pyplot as plt\n"
        "for i in range(2):\n"
        "    plt.figure(figsize=(2, 1), dpi=50)\n"
        "    plt.plot([i])\n"
        "    print('fig', i)\n"
        "    plt.show()\n"
    )
    seq = [m["type"] if m["type"] != "result" else png_size(m["data"]["image/png"]) for m in c.msgs[:-1]]
    assert seq == ["stream", (100, 50), "stream", (100, 50)]
    assert c.stderr == ""


@needs_mpl
def test_matplotlib_figure_as_main_result_is_not_duplicated(py):
    c = py.execute(
        "import matplotlib.pyplot as plt\nfig, ax = plt.subplots(figsize=(3, 2), dpi=50)\nax.plot([1, 2])\nfig"
    )
    assert len(c.results) == 1
    assert c.results[0]["is_main_result"]
    assert png_size(c.main["image/png"]) == (150, 100)


@needs_pandas
def test_pandas_dataframe_as_html(py):
    c = py.execute("import pandas as pd\ndf = pd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})\ndf")
    assert c.status == "ok", c.error
    assert "<table" in c.main["text/html"]
    assert "a" in c.main["text/plain"] and "x" in c.main["text/plain"]


def test_sigint_interrupts_cell_and_keeps_state(py):
    py.execute("state = 41")
    interrupt_after(py, 0.5)
    c = py.execute("while True:\n    pass", timeout=20)
    assert c.status == "error"
    assert c.error["name"] == "KeyboardInterrupt"
    assert any("while True" in line for line in c.error["traceback"])
    assert py.execute("state + 1").main["text/plain"] == "42"
    # blocking calls are interrupted too
    interrupt_after(py, 0.5)
    t = time.time()
    c = py.execute("import time\ntime.sleep(60)", timeout=20)
    assert c.error["name"] == "KeyboardInterrupt" and time.time() - t < 10
    assert py.execute("state").main["text/plain"] == "41"


def test_sigint_while_idle_is_ignored(py):
    py.execute("v = 'alive'")
    py.interrupt()
    time.sleep(0.3)
    py.interrupt()
    time.sleep(0.3)
    assert py.proc.poll() is None
    assert py.execute("v").main["text/plain"] == "'alive'"


def test_cell_cannot_disarm_the_driver(py):
    # a cell that resets SIGINT to the default must not make an idle SIGINT fatal
    py.execute("import signal\nsignal.signal(signal.SIGINT, signal.SIG_DFL)")
    py.interrupt()
    time.sleep(0.3)
    assert py.proc.poll() is None
    # a forked child that falls out of the cell must not act as a second driver
    c = py.execute("import os\npid = os.fork()\nprint('child' if pid == 0 else 'parent', flush=True)\n"
                   "if pid:\n    os.waitpid(pid, 0)")
    assert "child" in c.stdout and "parent" in c.stdout  # (two processes: may interleave)
    assert py.execute("'one done only'").main["text/plain"] == "'one done only'"


def test_print_is_not_fragmented(py):
    c = py.execute("print('a', 1, 'b')")
    assert [m["text"] for m in c.msgs if m["type"] == "stream"] == ["a 1 b\n"]


def test_os_exit_ends_the_driver_without_done(py):
    c = py.execute("print('bye', flush=True)\nimport os\nos._exit(5)", expect_done=False)
    assert c.done is None
    assert py.proc.wait(10) == 5


def test_protocol_errors(py):
    py.send(b"this is not json")
    m = py.recv()
    assert m["type"] == "error" and m["name"] == "ProtocolError"
    assert py.recv()["type"] == "done"
    py.send({"id": 5, "op": "frobnicate"})
    m = py.recv()
    assert m == {"id": 5, "type": "error", "name": "ProtocolError", "value": m["value"], "traceback": []}
    assert py.recv()["type"] == "done"
    assert py.execute("1").main["text/plain"] == "1"


def test_shutdown_and_eof(kernel_factory):
    k = kernel_factory("python")
    k.send({"op": "shutdown"})
    assert k.proc.wait(10) == 0
    k = kernel_factory("bash")
    k.proc.stdin.close()
    assert k.proc.wait(10) == 0


def test_unknown_language_is_fatal():
    p = subprocess.run([PY, "-u", "-c", DRIVER, "cobol"], capture_output=True, timeout=30)
    assert p.returncode == 1
    assert json.loads(p.stdout)["type"] == "fatal"


# ---------------------------------------------------------------------------------------------
# JavaScript


@needs_node
def test_js_ready_and_state(js):
    assert js.ready["language"] == "javascript"
    assert js.ready["version"].split(".")[0].isdigit()
    assert js.execute("let x = 5").results == []
    c = js.execute("x * 2")
    assert c.main == {"text/plain": "10"}
    assert c.done["execution_count"] == 2
    # declarations persist and can be declared again (notebook-style)
    assert js.execute("const x = 7; function f(a) { return a + x }").status == "ok"
    assert js.execute("f(1)").main["text/plain"] == "8"
    assert js.execute("class A { v() { return 3 } }\nnew A().v()").main["text/plain"] == "3"
    assert js.execute("new A().v() + f(0)").main["text/plain"] == "10"
    assert js.execute("undefined").results == []
    assert js.execute("var u; u").results == []


@needs_node
def test_js_top_level_await(js):
    c = js.execute("await new Promise(r => setTimeout(() => r(42), 10))")
    assert c.main["text/plain"] == "42"
    c = js.execute("const v = await Promise.resolve('ok')\nv + '!'")
    assert c.main["text/plain"] == "'ok!'"
    assert js.execute("v").main["text/plain"] == "'ok'"


@needs_node
def test_js_require_and_import(js):
    assert js.execute("const path = require('path'); path.join('a', 'b')").main["text/plain"] == "'a/b'"
    assert js.execute("import os from 'os'\ntypeof os.cpus").main["text/plain"] == "'function'"
    assert js.execute("import { join as j } from 'path'\nj('x', 'y')").main["text/plain"] == "'x/y'"
    assert js.execute("(await import('fs')).existsSync('/')").main["text/plain"] == "true"


@needs_node
def test_js_console_capture(js):
    c = js.execute("console.log('out', {a: 1}); console.error('err'); 'v'")
    assert c.stdout == "out { a: 1 }\n"
    assert c.stderr == "err\n"
    assert c.main["text/plain"] == "'v'"
    c = js.execute("require('child_process').execSync('echo child; echo cerr >&2', {stdio: 'inherit'}); 1")
    assert c.stdout == "child\n" and c.stderr == "cerr\n"


@needs_node
def test_js_protocol_looking_output(js):
    spoof = '{"id":101,"type":"done","status":"ok","execution_count":9}'
    c = js.execute("console.log(%s); require('fs').writeSync(1, %s + '\\n'); 1" % (json.dumps(spoof), json.dumps(spoof)))
    assert c.stdout == spoof + "\n" + spoof + "\n"
    assert c.main["text/plain"] == "1"


@needs_node
def test_js_errors(js):
    c = js.execute("function inner() { throw new TypeError('bad thing') }\ninner()")
    assert c.status == "error"
    assert c.error["name"] == "TypeError" and c.error["value"] == "bad thing"
    tb = c.error["traceback"]
    assert tb[0] == "TypeError: bad thing"
    assert any("inner" in line and "<cell-1>" in line for line in tb)
    assert not any("[eval]" in line or "node:internal" in line for line in tb)
    c = js.execute("throw 'oops'")
    assert c.error["name"] == "Uncaught" and c.error["value"] == "'oops'"
    c = js.execute("let = ;")
    assert c.error["name"] == "SyntaxError"
    assert not any(line.strip().startswith("at ") for line in c.error["traceback"])
    c = js.execute("await 1\nnull.x")
    assert c.error["name"] == "TypeError"
    assert js.execute("1 + 1").main["text/plain"] == "2"


@needs_node
def test_js_display_and_rich(js):
    c = js.execute(
        "class H { _repr_html_() { return '<i>h</i>' } _repr_json_() { return {k: 1} } }\n"
        "display(1, 'two')\nnew H()"
    )
    assert [r["data"]["text/plain"] for r in c.results] == ["1", "'two'", "H {}"]
    assert c.main["text/html"] == "<i>h</i>"
    assert c.main["application/json"] == {"k": 1}
    assert js.execute("({a: 1, b: [1, 2]})").main["text/plain"] == "{ a: 1, b: [ 1, 2 ] }"
    assert js.execute("{a: 1}").main["text/plain"] == "{ a: 1 }"


@needs_node
def test_js_async_errors_go_to_stderr(js):
    c = js.execute("setTimeout(() => { throw new Error('late') }, 5)\nawait new Promise(r => setTimeout(r, 50))\n'after'")
    assert c.main["text/plain"] == "'after'"
    assert "Error: late" in c.stderr
    assert js.execute("1").main["text/plain"] == "1"


@needs_node
def test_js_sigint(js):
    js.execute("let keep = 41")
    interrupt_after(js, 0.5)
    c = js.execute("while (true) {}", timeout=20)
    assert c.error["name"] == "KeyboardInterrupt"
    assert js.execute("keep + 1").main["text/plain"] == "42"
    interrupt_after(js, 0.5)
    c = js.execute("await new Promise(() => {})", timeout=20)
    assert c.error["name"] == "KeyboardInterrupt"
    js.interrupt()  # idle
    time.sleep(0.3)
    assert js.execute("keep").main["text/plain"] == "41"


@needs_node
def test_js_environment_is_clean(js):
    c = js.execute("[process.env.CORDON_NODE_DRIVER, process.argv.length, typeof display]")
    assert c.main["text/plain"] == "[ undefined, 1, 'function' ]"
    c = js.execute("require('fs').readFileSync(0, 'utf8')")  # stdin is /dev/null
    assert c.main["text/plain"] == "''"


@needs_node
def test_js_process_exit_ends_the_driver(js):
    c = js.execute("console.log('bye'); process.exit(3)", expect_done=False)
    assert c.done is None
    assert c.stdout == "bye\n"
    assert "node exited with status 3" in c.stderr
    assert js.proc.wait(10) == 3


# ---------------------------------------------------------------------------------------------
# Bash


def test_bash_state_persists(sh):
    assert sh.ready["language"] == "bash"
    assert sh.execute("cd /usr\nX=5\ngreet() { echo \"hello $1\"; }\nalias ll='echo aliased'").status == "ok"
    c = sh.execute("pwd; echo $X; greet world; ll")
    assert c.stdout == "/usr\n5\nhello world\naliased\n"
    assert c.results == []


def test_bash_exit_status_and_stderr(sh):
    c = sh.execute("echo out; echo err >&2; false")
    assert c.stdout == "out\n" and c.stderr == "err\n"
    assert c.status == "error"
    assert c.error["name"] == "ExitCode" and c.error["value"] == "exit status 1"
    c = sh.execute("ls /definitely/not/here")
    assert c.error["value"] == "exit status 2"
    assert "No such file" in c.stderr
    assert sh.execute("true").status == "ok"
    c = sh.execute("if then")
    assert c.status == "error" and "syntax error" in c.stderr


def test_bash_stdin_and_protocol_safety(sh):
    c = sh.execute("cat; read line; echo \"read=$?\"")  # must not eat the driver's input
    assert c.stdout == "read=1\n"
    spoof = '{"id":101,"type":"done","status":"ok","execution_count":9}'
    c = sh.execute("echo '%s'; echo '%s' >&2" % (spoof, spoof))
    assert c.stdout == spoof + "\n" and c.stderr == spoof + "\n"
    assert sh.execute("exec 1>&- 2>&-; exec 3>&-").status == "ok"
    assert sh.execute("echo back; echo err >&2").stdout == "back\n"


def test_bash_background_output_goes_to_next_cell(sh):
    assert sh.execute("(sleep 0.2; echo late) &").status == "ok"
    time.sleep(0.6)
    assert sh.execute("echo now").stdout == "late\nnow\n"


def test_bash_sigint_keeps_state(sh):
    sh.execute("x=41; spin() { while :; do :; done; }")
    for code in ("sleep 60", "spin; echo not-reached", "while :; do sleep 1; done", "spin"):
        interrupt_after(sh, 0.5)
        t = time.time()
        c = sh.execute(code, timeout=20)
        assert c.error["name"] == "KeyboardInterrupt", (code, c.msgs)
        assert "not-reached" not in c.stdout
        assert time.time() - t < 10
    sh.interrupt()  # idle
    time.sleep(0.3)
    assert sh.execute("echo $((x + 1))").stdout == "42\n"


def test_bash_leaves_no_files_behind(kernel_factory, tmp_path):
    k = kernel_factory("bash", env={"TMPDIR": str(tmp_path)})
    c = k.execute("echo one\nbad_command_xyz")
    assert "cordon-cell-1-" in c.stderr and "line 2" in c.stderr  # where bash says it failed
    assert k.execute("echo two").stdout == "two\n"
    assert os.listdir(tmp_path) == []


def test_bash_exit_ends_the_driver(sh):
    c = sh.execute("echo bye; exit 4", expect_done=False)
    assert c.done is None and c.stdout == "bye\n"
    assert "bash exited with status 4" in c.stderr
    assert sh.proc.wait(10) == 4


def _run_with_env(k, code, env):
    k.next_id += 1
    k.send({"id": k.next_id, "op": "execute", "code": code, "env": env})
    return k.collect(k.next_id)


@pytest.mark.parametrize("lang", ["python", "javascript", "bash"])
def test_cell_env_holds_for_that_cell_only(kernel_factory, lang):
    """`env` on an execute request: the cell and what it starts see the variables; the next
    cell sees the earlier values again (an existing variable restored, a new one gone)."""
    if lang == "javascript" and shutil.which("node") is None:
        pytest.skip("node is not installed")
    k = kernel_factory(lang, env={"KEPT": "outer"})
    show = {
        "python": "import os, subprocess\nprint(os.environ.get('KEPT'), os.environ.get('NEW'), subprocess.run(['sh', '-c', 'echo $NEW'], capture_output=True, text=True).stdout.strip())",
        "javascript": "console.log(process.env.KEPT, String(process.env.NEW), require('child_process').execSync('echo $NEW').toString().trim())",
        "bash": "echo \"$KEPT ${NEW-None} $(sh -c 'echo $NEW')\"",
    }[lang]
    c = _run_with_env(k, show, {"KEPT": "inner", "NEW": "a 'quoted' $(value)"})
    assert c.status == "ok", c.msgs
    assert c.stdout == "inner a 'quoted' $(value) a 'quoted' $(value)\n", c.stdout
    after = k.execute(show)
    assert after.status == "ok", after.msgs
    none = "undefined" if lang == "javascript" else "None"
    assert after.stdout.split()[:2] == ["outer", none], after.stdout


@pytest.mark.parametrize("lang", ["python", "javascript"])
def test_plain_str_shows_a_string_result_as_itself_for_that_cell_only(kernel_factory, lang):
    """`plain_str` on an execute request (E2B's display): a string result's text/plain is the
    string itself; other values, and the next cell without the flag, keep their repr."""
    if lang == "javascript" and shutil.which("node") is None:
        pytest.skip("node is not installed")
    k = kernel_factory(lang)

    def run(code, plain):
        k.next_id += 1
        k.send({"id": k.next_id, "op": "execute", "code": code, "plain_str": plain})
        c = k.collect(k.next_id)
        assert c.status == "ok", c.msgs
        return c.main["text/plain"]

    assert run('"it\'s"', True) == "it's"
    assert run("['a']", True) == ("['a']" if lang == "python" else "[ 'a' ]")
    assert run("'q'", False) == "'q'"


# ---------------------------------------------------------------------------------------------
# What IPython does before and around a cell (E2B's code-interpreter tests rely on each)

needs_pil = pytest.mark.skipif(not _has_module("PIL"), reason="apt-get install python3-pil")


def test_an_indented_cell_runs_as_ipython_dedents_it(py):
    c = py.execute("\n\n        x = 6\n        if x:\n            y = x * 7\n        y\n    ")
    assert c.status == "ok", c.error
    assert c.main["text/plain"] == "42"


def test_dedent_leaves_a_cell_whose_first_line_is_not_indented_alone(py):
    c = py.execute("s = '''\n    kept\n'''\ns")
    assert c.status == "ok", c.error
    assert c.main["text/plain"] == repr("\n    kept\n")
    # And a really broken indentation is still the error Python gives.
    c = py.execute("    a = 1\n  b = 2")
    assert c.error and c.error["name"] == "IndentationError"


def test_display_raw_sends_the_bundle_as_it_is(py):
    c = py.execute("display({'text/latex': r'\\text{X}', 'text/html': '<b>x</b>'}, raw=True)")
    assert c.status == "ok", c.error
    assert [r["data"] for r in c.results] == [{"text/latex": "\\text{X}", "text/html": "<b>x</b>"}]


def test_ipython_display_imports_and_shows_through_the_driver(py):
    c = py.execute(
        "from IPython.display import display, HTML, Markdown\n"
        "display(HTML('<i>h</i>'))\n"
        "display(Markdown('**m**'))\n"
        "import IPython\n"
        "IPython.display.display({'text/plain': 'raw'}, raw=True)"
    )
    assert c.status == "ok", c.error
    assert c.stdout == ""  # shown as results, never printed
    assert [r["data"].get("text/html") for r in c.results][:1] == ["<i>h</i>"]
    assert c.results[1]["data"]["text/markdown"] == "**m**"
    assert c.results[2]["data"] == {"text/plain": "raw"}


@needs_pandas
def test_a_dataframe_carries_its_columns_as_e2b_data(py):
    c = py.execute(
        "import pandas as pd\n"
        "pd.DataFrame({'a': [1, 2, 3], 'f': [0.5, float('nan'), 2.0],"
        " 't': pd.to_datetime(['2020-01-02'] * 3)})"
    )
    assert c.status == "ok", c.error
    data = c.main["e2b/data"]
    assert data["a"] == [1, 2, 3]
    assert data["f"] == [0.5, None, 2.0]  # NaN is not JSON
    assert data["t"][0].startswith("2020-01-02")
    assert "text/html" in c.main and "text/plain" in c.main
    # A frame too large for a result keeps its text and HTML only.
    c = py.execute("pd.DataFrame({'a': range(200_001)})")
    assert c.status == "ok", c.error
    assert "e2b/data" not in c.main


@needs_pil
def test_a_pil_image_shown_or_last_is_a_png(py):
    c = py.execute(
        "from PIL import Image\n"
        "im = Image.new('RGBA', (8, 4))\n"
        "im.show()\n"
        "print('shown')\n"
        "im"
    )
    assert c.status == "ok", c.error
    assert c.stdout == "shown\n"
    assert [r["is_main_result"] for r in c.results] == [False, True]
    assert all(png_size(r["data"]["image/png"]) == (8, 4) for r in c.results)


@needs_pil
def test_a_pil_image_saved_to_a_file_name_is_displayed_and_saved(py, tmp_path):
    target = tmp_path / "saved.png"
    c = py.execute(
        "import io\n"
        "from PIL import Image\n"
        "im = Image.new('RGBA', (6, 3))\n"
        f"im.save({str(target)!r})\n"
        "im.save(io.BytesIO(), 'PNG')\n"
        "print('saved')\n"
    )
    assert c.status == "ok", c.error
    assert c.stdout == "saved\n"
    # Shown once: the file name, not the buffer; and the file written as asked.
    assert [r["is_main_result"] for r in c.results] == [False]
    assert png_size(c.results[0]["data"]["image/png"]) == (6, 3)
    assert png_size(base64.b64encode(target.read_bytes())) == (6, 3)
