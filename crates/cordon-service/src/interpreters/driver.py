"""cordon kernel driver: keeps one interpreter's state between cells (runs inside the sandbox).

Start:   python3 -u -c "<this file>" python|javascript|bash
         For javascript the server also sets CORDON_NODE_DRIVER=<contents of node_driver.js>;
         the driver reads that variable and deletes it from its environment at once, so user
         code never sees it (CORDON_NODE_DRIVER_FILE=<path> is accepted instead, for development).
         Self-contained, standard library only; needs python3 >= 3.8, bash, and for javascript
         node >= 20.12 (node_driver.js uses node's bundled acorn via --expose-internals).

Protocol: JSON, one object per line, on the driver's ORIGINAL stdin/stdout. Those are moved
to private close-on-exec descriptors at start-up; fd 0 then reads /dev/null and fds 1 and 2
are pipes that the driver reads itself, so nothing user code prints (even protocol-looking
text), closes (sys.stdout.close(), os.close(1)) or redirects can reach or corrupt the
protocol, and output of subprocesses is captured too.

  in:   {"id": 7, "op": "execute", "code": "...", "env"?: {"NAME": "value"}, "plain_str"?: true}
        {"op": "shutdown"}   (EOF = shutdown)
        `plain_str`: a string result's text/plain is the string itself, not its repr (E2B's
        display of strings; Jupyter's, the default, quotes them).
        `env` holds for that cell only: python sets os.environ around the cell, node
        process.env, bash runs the cell as `NAME=value source <cell>` (exported to the cell and
        what it starts, the earlier values back afterwards).
  out:  {"type": "ready", "language": "python", "version": "3.11.2", "pid": 12}   (first line)
        {"id": 7, "type": "stream", "name": "stdout"|"stderr", "text": "..."}      (in order)
        {"id": 7, "type": "result", "is_main_result": true|false,
         "data": {"text/plain": "...", "text/html": "...", "image/png": "<base64>", ...}}
        {"id": 7, "type": "error", "name": "ZeroDivisionError", "value": "division by zero",
         "traceback": ["Traceback (most recent call last):", "  File ...", ...]}  (one line each)
        {"id": 7, "type": "done", "status": "ok"|"error", "execution_count": 3}  (always last)

  Cells run one at a time; send the next request after "done". Output written between cells
  (background threads or processes) is held and sent with the next cell's id. A line that is
  not valid JSON, or an unknown op, gets an "error" (name "ProtocolError") and "done".
  If the node or bash process dies during a cell (process.exit(), `exit`, `set -e`, a crash),
  the driver forwards the output, writes a note on stderr and exits without "done" -- exactly
  as if the driver itself had died -- so the caller restarts the context.
  Start-up failure: {"type": "fatal", "message": "..."} and exit status 1.

Languages.
  python:     one persistent globals dict (sys.modules["__main__"], __name__ == "__main__").
              As IPython does, a cell loses its leading blank lines and, when its first line
              is indented, that indentation on every line (code pasted from a block or written
              inside a triple-quoted string runs).
              The value of a trailing expression is the main result (not when it is None or
              the line ends with ';'); it is also kept in `_`. Top-level `await` works.
              Bundles: _repr_mimebundle_, _repr_html_/markdown/svg/png/jpeg/json/latex_, plus
              text/plain (repr); a pandas DataFrame adds "e2b/data" (column -> values, up to
              100,000 cells), as E2B's interpreter does. display(*objs) (a builtin; raw=True
              takes MIME bundles as they are) emits non-main results; `from IPython.display
              import display, HTML, Markdown, Image…` works, with a small stand-in when IPython
              is not installed. PIL's Image.show(), and Image.save() to a file name, display the
              image (as E2B's interpreter does). matplotlib
              (MPLBACKEND=Agg) is switched to a small inline backend: plt.show() and the end of
              each cell emit every open figure as image/png, then close them all.
              A cell that is not Python as written may use IPython's line forms: `!cmd` (a
              shell command; its status in `_exit_code`), `%pip ARGS` (this interpreter's own
              pip) and `%system cmd`. Before each cell, and after those, a user site-packages
              directory made since start-up (pip's user install) is put on sys.path, so what
              was just installed imports in the running interpreter.
  javascript: see node_driver.js (one persistent context, top-level await, display()).
  bash:       one `bash --noprofile --norc`; each cell is `source`d from a file, stdin
              /dev/null; a non-zero status gives error "ExitCode" ("exit status N"). The shell
              keeps fds 197-199 for itself.

Interrupts: send SIGINT to the driver's process group (node and bash stay in that group).
  python:     KeyboardInterrupt is raised in the cell -> error "KeyboardInterrupt"; globals kept.
  javascript: synchronous code is stopped (vm breakOnSigint), a pending top-level await is
              abandoned -> error "KeyboardInterrupt"; the context is kept. (Code that resumes
              after an await and then loops forever cannot be stopped: kill the group.)
  bash:       the running command is stopped and the cell returns, also from inside shell
              functions -> error "KeyboardInterrupt"; variables, functions and cwd are kept.
  SIGINT while idle is ignored.
"""

import ast
import base64
import builtins
import codecs
import fcntl
import io
import json
import linecache
import os
import select
import shlex
import signal
import subprocess
import sys
import tempfile
import termios
import threading
import time
import traceback
from importlib.machinery import ModuleSpec  # here: an import inside the finder would recurse
import types

_G = globals()  # frames with these globals are the driver's own (hidden from tracebacks)
_CO_COROUTINE = 0x80
_PRIVATE_FD_MIN = 64


class _State:
    lang = None
    busy = False  # a cell is running
    interrupted = False  # SIGINT seen while busy
    pending = False  # SIGINT arrived while the driver itself (not user code) was running
    plain_str = False  # this cell shows a string result as itself (E2B), not its repr


S = _State()


def _on_sigint(signum, frame):
    if not S.busy:
        return  # idle: ignore
    S.interrupted = True
    if S.lang == "python" and frame is not None and frame.f_globals is not _G:
        raise KeyboardInterrupt
    S.pending = True


def _check_pending():
    """Raise a SIGINT that arrived while driver code ran on behalf of user code."""
    if S.busy and S.pending and S.lang == "python":
        S.pending = False
        raise KeyboardInterrupt


# ---------------------------------------------------------------------------------------------
# Protocol output


def _clean_json(v):
    """Replaces values JSON cannot carry (NaN, infinities) and non-string keys."""
    if isinstance(v, float):
        return v if v == v and v not in (float("inf"), float("-inf")) else None
    if isinstance(v, dict):
        return {str(k): _clean_json(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean_json(x) for x in v]
    return v


class Out:
    def __init__(self, fd):
        self.fd = fd
        self.lock = threading.Lock()

    def send(self, obj):
        try:
            s = json.dumps(obj, ensure_ascii=False, allow_nan=False, default=str)
        except ValueError:
            s = json.dumps(_clean_json(obj), ensure_ascii=False, allow_nan=False, default=str)
        data = (s + "\n").encode("utf-8", "replace")  # lone surrogates become '?'
        with self.lock:
            view = memoryview(data)
            try:
                while view:
                    n = os.write(self.fd, view)
                    view = view[n:]
            except OSError:  # the caller went away
                os._exit(0)


class Pump:
    """Reads the pipes behind fds 1 and 2 and turns them into stream messages.

    sync() returns once everything written to the pipes before the call has been sent, which
    keeps output ordered with results and complete before "done"."""

    def __init__(self, out, fds):
        self.out = out
        self.names = dict(fds)
        self.dec = {}
        for fd in self.names:
            os.set_blocking(fd, False)
            self.dec[fd] = codecs.getincrementaldecoder("utf-8")("replace")
        self.ctl_r, self.ctl_w = os.pipe()
        self.lock = threading.Lock()  # guards cell / held
        self.cond = threading.Condition()
        self.req = 0
        self.ack = 0
        self.cell = None
        self.held = []
        self.held_size = 0
        self.dropped = 0
        threading.Thread(target=self._run, name="cordon-output", daemon=True).start()

    def _run(self):
        try:
            # SIGINT must reach the main thread, which may be blocked in user code.
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        except (AttributeError, OSError):
            pass
        poller = select.poll()
        for fd in list(self.names) + [self.ctl_r]:
            poller.register(fd, select.POLLIN)
        while True:
            try:
                events = poller.poll()
            except InterruptedError:
                continue
            for fd, ev in events:
                if fd == self.ctl_r:
                    os.read(self.ctl_r, 4096)
                    with self.cond:
                        target = self.req
                    for f in self.names:
                        self._drain(f)
                    with self.cond:
                        self.ack = max(self.ack, target)
                        self.cond.notify_all()
                else:
                    time.sleep(0.001)  # let a burst of small writes arrive: fewer messages
                    try:
                        data = os.read(fd, 65536)
                    except (BlockingIOError, InterruptedError):
                        continue
                    if data:
                        self._emit(fd, data)
                    elif ev & (select.POLLHUP | select.POLLERR):
                        poller.unregister(fd)

    def _drain(self, fd):
        # Read exactly what is in the pipe now: bounded even if a writer never stops.
        buf = bytearray(4)
        try:
            fcntl.ioctl(fd, termios.FIONREAD, buf)
        except OSError:
            return
        n = int.from_bytes(buf, sys.byteorder, signed=True)
        while n > 0:
            try:
                data = os.read(fd, min(n, 1 << 20))
            except (BlockingIOError, InterruptedError):
                return
            if not data:
                return
            n -= len(data)
            self._emit(fd, data)

    def _emit(self, fd, data):
        text = self.dec[fd].decode(data)
        if not text:
            return
        name = self.names[fd]
        with self.lock:
            if self.cell is not None:
                self.out.send({"id": self.cell, "type": "stream", "name": name, "text": text})
            elif self.held_size < (1 << 20):
                self.held.append((name, text))
                self.held_size += len(text)
            else:
                self.dropped += len(text)

    def sync(self, timeout=30.0):
        for s in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            try:
                s.flush()
            except Exception:
                pass
        with self.cond:
            self.req += 1
            mine = self.req
        try:
            os.write(self.ctl_w, b"s")
        except OSError:
            return
        with self.cond:
            self.cond.wait_for(lambda: self.ack >= mine, timeout)

    def begin(self, cell):
        self.sync(5.0)  # whatever came in while idle is held, not lost
        with self.lock:
            self.cell = cell
            held, self.held, self.held_size = self.held, [], 0
            for name, text in held:
                self.out.send({"id": cell, "type": "stream", "name": name, "text": text})
            if self.dropped:
                note = "[cordon: %d characters of output written between cells were dropped]\n"
                self.out.send(
                    {"id": cell, "type": "stream", "name": "stderr", "text": note % self.dropped}
                )
                self.dropped = 0

    def end(self):
        self.sync()
        with self.lock:
            self.cell = None


class Stdio:
    """Private copies of the write ends behind fds 1 and 2, to undo what a cell did to them."""

    def __init__(self, out_w, err_w):
        self.priv = {1: out_w, 2: err_w}
        self.ident = {fd: self._ident(w) for fd, w in self.priv.items()}

    @staticmethod
    def _ident(fd):
        st = os.fstat(fd)
        return (st.st_dev, st.st_ino)

    def restore(self):
        for fd, priv in self.priv.items():
            try:
                ok = self._ident(fd) == self.ident[fd]
            except OSError:
                ok = False
            if not ok:
                os.dup2(priv, fd)
        for name, fd in (("stdout", 1), ("stderr", 2)):
            for attr in (name, "__%s__" % name):
                s = getattr(sys, attr, None)
                if s is None or getattr(s, "closed", True):
                    setattr(sys, attr, self._stream(fd))

    @staticmethod
    def _stream(fd):
        raw = io.FileIO(fd, "w", closefd=False)
        return io.TextIOWrapper(raw, encoding="utf-8", errors="backslashreplace",
                                line_buffering=True, write_through=True)


# ---------------------------------------------------------------------------------------------
# Rich results (Python)

_MIME_METHODS = (
    ("_repr_html_", "text/html"),
    ("_repr_markdown_", "text/markdown"),
    ("_repr_svg_", "image/svg+xml"),
    ("_repr_png_", "image/png"),
    ("_repr_jpeg_", "image/jpeg"),
    ("_repr_json_", "application/json"),
    ("_repr_latex_", "text/latex"),
    ("_repr_javascript_", "application/javascript"),
)
_BINARY = ("image/png", "image/jpeg", "image/gif", "application/pdf")


def _warn(msg):
    try:
        sys.stderr.write("[cordon] %s\n" % msg)
    except Exception:
        pass


def _coerce(mime, v):
    if isinstance(v, tuple) and len(v) == 2 and isinstance(v[1], dict):
        v = v[0]  # (data, metadata)
    if v is None:
        return None
    if mime in _BINARY:
        if isinstance(v, (bytes, bytearray, memoryview)):
            return base64.b64encode(bytes(v)).decode("ascii")
        return v if isinstance(v, str) else None  # already base64
    if mime == "application/json" or mime.endswith("+json"):
        if isinstance(v, (str, bytes)):
            try:
                return json.loads(v)
            except ValueError:
                return None
        try:
            json.dumps(v, allow_nan=False)
            return v
        except (TypeError, ValueError):
            try:
                return json.loads(json.dumps(_clean_json(v), allow_nan=False))
            except (TypeError, ValueError):
                return None
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return v if isinstance(v, str) else None


def _method(obj, name):
    if isinstance(obj, type):
        return None  # a class, not an instance: its _repr_*_ are unbound
    try:
        f = getattr(obj, name, None)
    except Exception:
        return None
    return f if callable(f) else None


def _safe_repr(obj):
    try:
        return repr(obj)
    except Exception as e:
        return "<repr of %s object failed: %s: %s>" % (type(obj).__name__, type(e).__name__, e)


def _figure_png(fig):
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _is_figure(obj):
    mod = sys.modules.get("matplotlib.figure")
    return mod is not None and isinstance(obj, getattr(mod, "Figure", ()))


# A DataFrame's columns go out as data (E2B's "e2b/data": column -> list of values) up to this
# many cells; a larger one has its text and HTML only, as a result has a bounded size.
_DATAFRAME_CELLS = 100_000


def _dataframe_data(df):
    """column name -> its values, JSON-safe (numpy scalars, NaN -> null, dates as ISO text)."""
    out = {}
    for i, col in enumerate(df.columns):
        column = df.iloc[:, i].to_json(orient="values", date_format="iso", default_handler=str)
        out[str(col)] = json.loads(column)
    return out


def _is_dataframe(obj):
    """A pandas DataFrame (pandas is not imported for the check: only if the cell did)."""
    pd = sys.modules.get("pandas")
    return pd is not None and isinstance(obj, getattr(pd, "DataFrame", ()))


def bundle(obj):
    """MIME bundle of an object: its _repr_*_ methods, always plus text/plain."""
    data = {}
    try:
        # Objects that claim every attribute (proxies, mocks) get only text/plain.
        claims_all = getattr(obj, "_cordon_canary_method_should_not_exist_", None) is not None
    except Exception:
        claims_all = True
    if not claims_all:
        f = _method(obj, "_repr_mimebundle_")
        if f is not None:
            try:
                r = f(include=None, exclude=None)
                if isinstance(r, tuple):
                    r = r[0]
                if isinstance(r, dict):
                    for mime, v in r.items():
                        v = _coerce(str(mime), v)
                        if v is not None:
                            data[str(mime)] = v
            except Exception as e:
                _warn("%s._repr_mimebundle_() failed: %s: %s" % (type(obj).__name__, type(e).__name__, e))
        for meth, mime in _MIME_METHODS:
            if mime in data:
                continue
            f = _method(obj, meth)
            if f is None:
                continue
            try:
                v = _coerce(mime, f())
            except Exception as e:
                _warn("%s.%s() failed: %s: %s" % (type(obj).__name__, meth, type(e).__name__, e))
                continue
            if v is not None:
                data[mime] = v
        if _is_dataframe(obj):
            try:
                if obj.size <= _DATAFRAME_CELLS:
                    data["e2b/data"] = _dataframe_data(obj)
            except Exception as e:
                _warn("a DataFrame's data failed: %s: %s" % (type(e).__name__, e))
        if "image/png" not in data and _is_figure(obj):
            try:
                data["image/png"] = _figure_png(obj)
            except Exception as e:
                _warn("rendering the figure failed: %s: %s" % (type(e).__name__, e))
    if not isinstance(data.get("text/plain"), str):
        data["text/plain"] = obj if S.plain_str and type(obj) is str else _safe_repr(obj)
    return data


# ---------------------------------------------------------------------------------------------
# matplotlib: an inline backend (Agg canvas; show() and the end of a cell emit the figures)

_MPL_BACKEND = "_cordon_mpl_inline"


class _ImportHooks:
    """Meta-path finder. Provides the inline backend module; once matplotlib is imported with
    MPLBACKEND=Agg (our default), points its backend at the inline backend; once PIL.Image is
    imported, makes Image.show() display the image (there is no screen: IPython's kernel does
    the same); and when no real IPython is installed, provides a small `IPython.display`
    (display, HTML, Markdown, Image…) so notebook code that imports it runs."""

    SHIMS = ("IPython", "IPython.display")

    def __init__(self):
        self.busy = False

    def _others(self, name, path, target):
        self.busy = True
        try:
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    return spec
            return None
        finally:
            self.busy = False

    def find_spec(self, name, path=None, target=None):
        if name == _MPL_BACKEND:
            return ModuleSpec(name, self)
        if self.busy or name not in _PATCHES:
            return None
        spec = self._others(name, path, target)
        if spec is None and name in self.SHIMS:
            return ModuleSpec(name, _IPythonShim(), is_package=(name == "IPython"))
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        orig = loader.exec_module
        patch = _PATCHES[name]

        def exec_module(module):
            orig(module)
            try:
                patch(module)
            except Exception:
                pass

        try:
            loader.exec_module = exec_module
        except Exception:
            pass
        return spec

    # loader protocol for the backend module
    def create_module(self, spec):
        return None

    def exec_module(self, module):
        from matplotlib.backend_bases import FigureManagerBase
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        module.FigureCanvas = FigureCanvasAgg
        module.FigureManager = FigureManagerBase
        module.show = _mpl_show


def _patch_matplotlib(module):
    if os.environ.get("MPLBACKEND", "").lower() == "agg":
        module.rcParams["backend"] = "module://" + _MPL_BACKEND


def _patch_pil_image(module):
    def in_cell():
        return KERNEL is not None and getattr(KERNEL, "cell", None) is not None

    def show(self, title=None, **kwargs):
        if in_cell():
            KERNEL.display(self)

    saved = module.Image.save

    def save(self, fp, format=None, **params):
        # E2B's interpreter shows an image saved under a file name (not one written to an
        # open file or buffer): code written for it expects the saved image among the results.
        if isinstance(fp, str) and in_cell():
            KERNEL.display(self)
        return saved(self, fp, format, **params)

    module.Image.show = show
    module.Image.save = save


def _patch_ipython(module):
    # A real IPython without its shell prints display()'s objects: ours shows them instead.
    module.display = _shim_display


_PATCHES = {
    "matplotlib": _patch_matplotlib,
    "PIL.Image": _patch_pil_image,
    "IPython": _patch_ipython,
    "IPython.display": _patch_ipython,
}


class _IPythonShim:
    """Loader of the stand-in `IPython` and `IPython.display` (only when IPython is not
    installed): display() is the driver's; the classes carry their data as _repr_*_ methods."""

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        if module.__name__ == "IPython":
            module.__path__ = []
            module.display = _shim_display
            module.get_ipython = lambda: None
            return
        module.display = _shim_display

        class _Data:
            mime = "text/plain"

            def __init__(self, data=None, url=None, filename=None, **kwargs):
                if data is None and filename is not None:
                    with open(filename, "rb" if self.mime in _BINARY else "r") as f:
                        data = f.read()
                self.data = data if data is not None else url

            def _repr_mimebundle_(self, include=None, exclude=None):
                return {self.mime: self.data}

            def __repr__(self):
                return "<IPython.core.display.%s object>" % type(self).__name__

        def kind(name, mime):
            return type(name, (_Data,), {"mime": mime})

        module.HTML = kind("HTML", "text/html")
        module.Markdown = kind("Markdown", "text/markdown")
        module.Latex = kind("Latex", "text/latex")
        module.Math = kind("Math", "text/latex")
        module.SVG = kind("SVG", "image/svg+xml")
        module.JSON = kind("JSON", "application/json")
        module.Javascript = kind("Javascript", "application/javascript")

        class Image(_Data):
            def __init__(self, data=None, url=None, filename=None, format=None, **kwargs):
                fmt = (format or (filename or url or "").rsplit(".", 1)[-1] or "png").lower()
                self.mime = "image/jpeg" if fmt in ("jpg", "jpeg") else "image/png"
                _Data.__init__(self, data, url, filename)

        module.Image = Image


def _shim_display(*objs, **kwargs):
    return builtins.display(*objs, **kwargs)


def _mpl_show(*args, **kwargs):
    if S.busy and KERNEL is not None and hasattr(KERNEL, "flush_figures"):
        KERNEL.flush_figures()


# ---------------------------------------------------------------------------------------------
# Kernels


def _refresh_user_site():
    """Makes packages installed since the interpreter started importable now: pip's user
    install (~/.local, where `pip install` lands in a sandbox) creates the user site-packages
    directory, which site.py only adds to sys.path if it existed at start-up."""
    import importlib
    import site

    try:
        user_site = site.getusersitepackages()
        if site.ENABLE_USER_SITE and os.path.isdir(user_site) and user_site not in sys.path:
            site.addsitedir(user_site)
    except Exception:
        pass
    importlib.invalidate_caches()


def _shell(cmd):
    """`!cmd` in a cell: the command through /bin/sh, its output the cell's (fds 1 and 2 are
    the driver's pipes); its exit status in `_exit_code`, as IPython keeps it."""
    sys.stdout.flush()
    sys.stderr.flush()
    code = subprocess.call(cmd, shell=True, stdin=subprocess.DEVNULL)
    KERNEL.ns["_exit_code"] = code
    _refresh_user_site()


def _magic(name, args):
    """`%name args` in a cell. Only %pip (pip of this very interpreter, as IPython's) and
    %system are known; anything else is an error that says so."""
    if name == "pip":
        sys.stdout.flush()
        sys.stderr.flush()
        code = subprocess.call([sys.executable, "-m", "pip"] + shlex.split(args), stdin=subprocess.DEVNULL)
        KERNEL.ns["_exit_code"] = code
        _refresh_user_site()
        return None
    if name in ("system", "sx"):
        return _shell(args)
    raise NameError("%%%s: not a magic this interpreter knows (it knows %%pip, %%system and !command)" % name)


def _magic_lines(code):
    """IPython's line forms, for cells that are not Python as written: a line `!cmd` runs a
    shell command, `%name args` a line magic. Lines inside strings are left alone because the
    rewrite is tried only when the cell does not parse, and only on whole lines."""
    out = []
    changed = False
    for line in code.split("\n"):
        body = line.lstrip()
        indent = line[: len(line) - len(body)]
        if body.startswith("!"):
            out.append("%s__cordon_shell__(%r)" % (indent, body[1:]))
            changed = True
        elif body.startswith("%") and not body.startswith("%%") and len(body) > 1 and body[1].isalpha():
            name, _, args = body[1:].partition(" ")
            out.append("%s__cordon_magic__(%r, %r)" % (indent, name, args.strip()))
            changed = True
        else:
            out.append(line)
    return "\n".join(out) if changed else None


def _dedent_cell(code):
    """IPython's clean-up of a cell before it is parsed: leading blank lines dropped, and when
    the first line is indented, that indentation removed from every line that starts with it
    (a cell pasted from an indented block, or written inside a triple-quoted string)."""
    lines = code.split("\n")
    while lines and not lines[0].strip():
        lines.pop(0)
    if not lines:
        return ""
    first = lines[0]
    indent = first[: len(first) - len(first.lstrip(" \t"))]
    if indent:
        lines = [line[len(indent):] if line.startswith(indent) else line for line in lines]
    return "\n".join(lines)


def _source_lines(code):
    parts = code.split("\n")
    return [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def _strip_tb(tb):
    """The traceback without the driver's own frames."""
    keep = []
    while tb is not None:
        if tb.tb_frame.f_globals is not _G:
            keep.append(tb)
        tb = tb.tb_next
    # Library frames the driver called before reaching the cell (asyncio, ast.parse) go too.
    for i, t in enumerate(keep):
        if t.tb_frame.f_code.co_filename.startswith("<cell-"):
            keep = keep[i:]
            break
    else:
        if keep and keep[0].tb_frame.f_code.co_filename == ast.__file__:
            keep = []  # a SyntaxError in the cell: no frames, as in Python's own REPL
    new = None
    for t in reversed(keep):
        new = types.TracebackType(new, t.tb_frame, t.tb_lasti, t.tb_lineno)
    return new


def _error_msg(rid, e):
    try:
        value = str(e)
    except Exception:
        value = "<str() failed>"
    try:
        lines = traceback.format_exception(type(e), e, _strip_tb(e.__traceback__))
        tb = "".join(lines).rstrip("\n").split("\n")
    except Exception:
        tb = ["%s: %s" % (type(e).__name__, value)]
    return {"id": rid, "type": "error", "name": type(e).__name__, "value": value, "traceback": tb}


class PythonKernel:
    def __init__(self, out, pump, stdio):
        self.out = out
        self.pump = pump
        self.stdio = stdio
        self.cell = None  # id of the running cell
        self.shown = set()  # ids of figures already emitted in this cell
        self.loop = None
        self.pid = os.getpid()
        self.driver_module = sys.modules.get("__main__")  # keeps the driver's globals alive
        main = types.ModuleType("__main__")
        main.__dict__["__builtins__"] = builtins
        sys.modules["__main__"] = main  # so pickle and friends find user classes
        self.ns = main.__dict__
        builtins.display = self.display
        builtins.__cordon_shell__ = _shell
        builtins.__cordon_magic__ = _magic
        sys.argv = [""]
        sys.meta_path.insert(0, _ImportHooks())
        os.environ.setdefault("MPLBACKEND", "Agg")

    def version(self):
        return sys.version.split()[0]

    # -- results
    def emit_result(self, obj, main):
        data = bundle(obj)
        self.pump.sync()
        self.out.send({"id": self.cell, "type": "result", "is_main_result": main, "data": data})

    def display(self, *objs, raw=False, **kwargs):
        """display(obj, ...): show objects as rich results (like IPython's display); with
        raw=True each object is already a MIME bundle ({"text/html": ...}), sent as it is."""
        if self.cell is None:
            return
        for obj in objs:
            if raw and isinstance(obj, dict):
                data = {}
                for mime, v in obj.items():
                    v = _coerce(str(mime), v)
                    if v is not None:
                        data[str(mime)] = v
                self.pump.sync()
                self.out.send({"id": self.cell, "type": "result", "is_main_result": False, "data": data})
                continue
            if _is_figure(obj):
                self.shown.add(id(obj))
            self.emit_result(obj, False)
        _check_pending()

    def flush_figures(self):
        plt = sys.modules.get("matplotlib.pyplot")
        if plt is None or self.cell is None:
            return
        try:
            from matplotlib._pylab_helpers import Gcf

            figs = [m.canvas.figure for m in Gcf.get_all_fig_managers()]
        except Exception:
            figs = [plt.figure(n) for n in plt.get_fignums()]
        try:
            for fig in figs:
                if id(fig) in self.shown:
                    continue
                try:
                    data = {"image/png": _figure_png(fig), "text/plain": _safe_repr(fig)}
                except Exception as e:
                    _warn("rendering a figure failed: %s: %s" % (type(e).__name__, e))
                    continue
                self.pump.sync()
                self.out.send({"id": self.cell, "type": "result", "is_main_result": False, "data": data})
                _check_pending()
        finally:
            try:
                plt.close("all")
            except Exception:
                pass

    # -- running
    def _run_coro(self, coro):
        import asyncio

        if self.loop is None or self.loop.is_closed():
            self.loop = asyncio.new_event_loop()
        return self.loop.run_until_complete(coro)

    def _run(self, code, fname):
        _refresh_user_site()
        try:
            tree = ast.parse(code, fname, "exec")
        except SyntaxError:
            rewritten = _magic_lines(code)
            if rewritten is None:
                raise
            code = rewritten
            tree = ast.parse(code, fname, "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            node = tree.body[-1]
            lines = _source_lines(code)
            tail = ""
            if node.end_lineno <= len(lines):
                first = lines[node.end_lineno - 1].encode("utf-8", "surrogatepass")
                tail = first[node.end_col_offset:].decode("utf-8", "replace")  # offsets are bytes
                tail += "".join(lines[node.end_lineno:])
            if not tail.lstrip().startswith(";"):  # `expr;` suppresses the result, as in Jupyter
                last = tree.body.pop()
        flags = getattr(ast, "PyCF_ALLOW_TOP_LEVEL_AWAIT", 0)
        body = compile(tree, fname, "exec", flags=flags, dont_inherit=True)
        expr = None
        if last is not None:
            expr = compile(ast.Expression(last.value), fname, "eval", flags=flags, dont_inherit=True)
        _check_pending()
        r = eval(body, self.ns)
        if body.co_flags & _CO_COROUTINE:
            self._run_coro(r)
        if expr is not None:
            value = eval(expr, self.ns)
            if expr.co_flags & _CO_COROUTINE:
                value = self._run_coro(value)
            if value is not None:
                self.ns["_"] = value
                if _is_figure(value):
                    self.shown.add(id(value))
                self.emit_result(value, True)
                _check_pending()

    def run(self, rid, code, count, env=None):
        status = "ok"
        code = _dedent_cell(code)
        fname = "<cell-%d>" % count
        linecache.cache[fname] = (len(code), None, _source_lines(code), fname)
        self.cell = rid
        self.shown = set()
        err = None
        S.busy = True
        try:
            self._run(code, fname)
        except BaseException as e:
            err = e
        try:
            self.flush_figures()
        except BaseException as e:
            if err is None:
                err = e
        S.busy = False
        S.pending = False
        if os.getpid() != self.pid:
            os._exit(0)  # a child made by os.fork() in the cell must not become a second driver
        if signal.getsignal(signal.SIGINT) is not _on_sigint:
            signal.signal(signal.SIGINT, _on_sigint)  # a cell replaced it: idle SIGINT must not kill
        try:
            self.stdio.restore()
        except Exception:
            pass
        self.pump.sync()
        if err is not None:
            status = "error"
            self.out.send(_error_msg(rid, err))
            del err
        self.cell = None
        return status

    def shutdown(self):
        pass


class ChildDied(Exception):
    pass


def _readline(f):
    """readline that survives a SIGINT (the driver's handler never raises outside python)."""
    while True:
        try:
            return f.readline()
        except InterruptedError:
            continue


def stdio_fifos():
    """FIFOs read like fds 1 and 2 (see node_driver.js: node cannot dup2, so it reopens one of
    these when a cell closed its stdout or stderr). Returns [(read fd, name)], [paths]."""
    d = tempfile.mkdtemp(prefix=".cordon-stdio-")
    fds, paths = [], []
    for name in ("stdout", "stderr"):
        path = os.path.join(d, name)
        os.mkfifo(path, 0o600)
        # Read-write: a writer always exists, so the pump never sees end-of-file on it.
        fds.append((os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC), name))
        paths.append(path)
    return fds, paths


class NodeKernel:
    def __init__(self, out, pump, source, fifos=()):
        self.out = out
        self.pump = pump
        req_r, req_w = os.pipe()
        frm_r, frm_w = os.pipe()
        node = os.environ.get("CORDON_NODE", "node")
        # fd 0 (/dev/null), 1 and 2 (the driver's output pipes) are inherited; the requests
        # and frames pipes are passed by number, so user code cannot read them by accident.
        self.proc = subprocess.Popen(
            [node, "--expose-internals", "-e", source, str(req_r), str(frm_w), *fifos],
            pass_fds=(req_r, frm_w),
            close_fds=True,
        )
        os.close(req_r)
        os.close(frm_w)
        self.req = os.fdopen(req_w, "wb", buffering=0)
        self.frames = os.fdopen(frm_r, "rb")
        line = _readline(self.frames)
        if not line:
            raise RuntimeError("node exited during start-up (status %s)" % self.proc.wait())
        self._version = json.loads(line).get("version", "")

    def version(self):
        return self._version

    def run(self, rid, code, count, env=None):
        msg = json.dumps({"id": rid, "op": "execute", "code": code, "count": count, "env": env or {},
                          "plain_str": S.plain_str})
        try:
            self.req.write(msg.encode("utf-8", "surrogatepass") + b"\n")
        except OSError:
            raise ChildDied("node")
        status = "error"
        while True:
            line = _readline(self.frames)
            if not line:
                raise ChildDied("node")
            try:
                frame = json.loads(line)
            except ValueError:
                continue
            t = frame.get("type")
            frame["id"] = rid
            if t == "done":
                status = "error" if frame.get("status") == "error" else "ok"
                break
            if t in ("result", "error"):
                self.pump.sync()
                self.out.send(frame)
        self.pump.sync()
        return status

    def describe_death(self):
        return _describe_exit("node", self.proc)

    def shutdown(self):
        _stop(self.proc)


_BASH_INIT = r"""
exec {fd}>&{st} {st}>&- {fd1}>&1 {fd2}>&2
set -T
shopt -s expand_aliases
trap '__cordon_intr=1; trap "return 130 2>/dev/null" DEBUG' INT
printf '%s\n' "$BASH_VERSION" >&{fd}
"""

# Each cell: stdin from /dev/null, stdout/stderr from the shell's private copies of the output
# pipes (so `exec >&-` or `exec >file` in a cell ends with the cell), the status fd closed.
# SIGINT kills the running child (same process group) or stops a builtin; the INT trap then
# sets a DEBUG trap whose `return` leaves every enclosing function and the sourced file. (The
# INT trap must not `return` itself: after a `return` from a trap run while bash waited for a
# child, bash 5.2 stops running INT traps.) The DEBUG trap is cleared before and after cells.
_BASH_RUN = (
    "trap - DEBUG; unset __cordon_intr; "
    "source {file} </dev/null >&{fd1} 2>&{fd2} {fd}>&- {fd1}>&- {fd2}>&-; __cordon_st=$?; "
    "trap - DEBUG; printf '%d\\n' \"$__cordon_st\" >&{fd}\n"
)


class BashKernel:
    FD, FD1, FD2 = 197, 198, 199  # the shell's private status fd and copies of fds 1 and 2

    def __init__(self, out, pump):
        self.out = out
        self.pump = pump
        st_r, st_w = os.pipe()
        if st_w in (self.FD, self.FD1, self.FD2):
            st_w2 = fcntl.fcntl(st_w, fcntl.F_DUPFD, 10)
            os.close(st_w)
            st_w = st_w2
        self.proc = subprocess.Popen(
            ["bash", "--noprofile", "--norc"],
            stdin=subprocess.PIPE,
            pass_fds=(st_w,),
            close_fds=True,
        )
        os.close(st_w)
        self.stdin = self.proc.stdin
        self.status = os.fdopen(st_r, "rb")
        self.tmpdir = os.environ.get("TMPDIR") or "/tmp"
        fds = {"{fd}": self.FD, "{fd1}": self.FD1, "{fd2}": self.FD2, "{st}": st_w}
        init, self.run_cmd = _BASH_INIT, _BASH_RUN
        for k, v in fds.items():
            init = init.replace(k, str(v))
            self.run_cmd = self.run_cmd.replace(k, str(v))
        self._send(init)
        line = _readline(self.status)
        if not line:
            raise RuntimeError("bash exited during start-up (status %s)" % self.proc.wait())
        self._version = line.decode().strip()

    def version(self):
        return self._version

    def _send(self, text):
        try:
            self.stdin.write(text.encode("utf-8", "surrogateescape"))
            self.stdin.flush()
        except OSError:
            raise ChildDied("bash")

    def run(self, rid, code, count, env=None):
        import tempfile

        # One file per cell, removed after it (bash says ".../cordon-cell-3-xxxx: line 2: ...").
        fd, path = tempfile.mkstemp(prefix="cordon-cell-%d-" % count, dir=self.tmpdir)
        try:
            with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as f:
                f.write(code)
                if code and not code.endswith("\n"):
                    f.write("\n")
            # Assignments before `source` hold for the sourced file only and are exported.
            names = [k for k in (env or {}) if k.isascii() and k.isidentifier()]
            prefix = "".join("%s=%s " % (k, shlex.quote(env[k])) for k in names)
            self._send(self.run_cmd.replace("source {file}", prefix + "source " + shlex.quote(path)))
            line = _readline(self.status)
        finally:
            try:
                os.unlink(path)
            except OSError:
                pass
        if not line:
            raise ChildDied("bash")
        try:
            rc = int(line.strip() or b"0")
        except ValueError:
            rc = 1
        self.pump.sync()
        if rc == 0:
            return "ok"
        if S.interrupted and rc == 130:
            name, value = "KeyboardInterrupt", "interrupted (exit status 130)"
        else:
            name, value = "ExitCode", "exit status %d" % rc
        self.out.send({"id": rid, "type": "error", "name": name, "value": value, "traceback": []})
        return "error"

    def describe_death(self):
        return _describe_exit("bash", self.proc)

    def shutdown(self):
        _stop(self.proc)


def _describe_exit(what, proc):
    try:
        rc = proc.wait(timeout=2)
    except subprocess.TimeoutExpired:
        return "%s stopped answering" % what, 1
    if rc < 0:
        return "%s was killed by signal %d" % (what, -rc), 128 - rc
    hint = " (`exit` or `set -e`?)" if what == "bash" else ""
    return "%s exited with status %d%s" % (what, rc, hint), rc or 1


def _stop(proc):
    try:
        proc.terminate()
        proc.wait(timeout=1)
    except Exception:
        try:
            proc.kill()
        except Exception:
            pass


# ---------------------------------------------------------------------------------------------
# Main

KERNEL = None


def _setup_fds():
    proto_in = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, _PRIVATE_FD_MIN)
    proto_out = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, _PRIVATE_FD_MIN)
    try:
        diag = fcntl.fcntl(2, fcntl.F_DUPFD_CLOEXEC, _PRIVATE_FD_MIN)  # the driver's own errors
    except OSError:
        diag = None
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    if null != 0:
        os.close(null)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    os.dup2(out_w, 1)  # dup2 makes 1 and 2 inheritable: subprocesses write into the pipes
    os.dup2(err_w, 2)
    return proto_in, proto_out, diag, out_r, out_w, err_r, err_w


def main():
    global KERNEL
    lang = sys.argv[1] if len(sys.argv) > 1 else "python"
    node_src = os.environ.pop("CORDON_NODE_DRIVER", None)
    node_file = os.environ.pop("CORDON_NODE_DRIVER_FILE", None)
    S.lang = lang
    signal.signal(signal.SIGINT, _on_sigint)
    proto_in, proto_out, diag, out_r, out_w, err_r, err_w = _setup_fds()
    out = Out(proto_out)
    try:
        if lang not in ("python", "javascript", "bash"):
            raise ValueError("unknown language %r (python, javascript or bash)" % lang)
        fifo_fds, fifo_paths = stdio_fifos() if lang == "javascript" else ([], [])
        pump = Pump(out, [(out_r, "stdout"), (err_r, "stderr")] + fifo_fds)
        if lang == "python":
            KERNEL = PythonKernel(out, pump, Stdio(out_w, err_w))
        elif lang == "javascript":
            if node_src is None and node_file:
                with open(node_file, encoding="utf-8") as f:
                    node_src = f.read()
            if not node_src:
                raise ValueError("CORDON_NODE_DRIVER is not set")
            KERNEL = NodeKernel(out, pump, node_src, fifo_paths)
            node_src = None
        else:
            KERNEL = BashKernel(out, pump)
    except Exception as e:
        out.send({"type": "fatal", "message": "%s: %s" % (type(e).__name__, e)})
        os._exit(1)
    out.send({"type": "ready", "language": lang, "version": KERNEL.version(), "pid": os.getpid()})

    reqs = io.open(proto_in, "rb", closefd=False)
    count = 0
    while True:
        line = _readline(reqs)
        if not line:
            break
        if not line.strip():
            continue
        try:
            req = json.loads(line)
            if not isinstance(req, dict):
                raise ValueError("a request is a JSON object")
        except ValueError as e:
            out.send({"id": None, "type": "error", "name": "ProtocolError", "value": str(e), "traceback": []})
            out.send({"id": None, "type": "done", "status": "error", "execution_count": count})
            continue
        op = req.get("op")
        rid = req.get("id")
        if op == "shutdown":
            break
        if op != "execute" or not isinstance(req.get("code"), str):
            out.send({"id": rid, "type": "error", "name": "ProtocolError",
                      "value": "unknown op %r (execute needs a string 'code')" % (op,), "traceback": []})
            out.send({"id": rid, "type": "done", "status": "error", "execution_count": count})
            continue
        count += 1
        S.interrupted = False
        S.pending = False
        S.plain_str = req.get("plain_str") is True
        pump.begin(rid)
        S.busy = lang != "python"  # the Python kernel marks exactly its user-code sections
        env = req.get("env") or {}
        if not isinstance(env, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            env = {}
        saved = None
        if lang == "python" and env:
            saved = {k: os.environ.get(k) for k in env}
            os.environ.update(env)
        try:
            status = KERNEL.run(rid, req["code"], count, env)
        except ChildDied:
            why, rc = KERNEL.describe_death()
            pump.sync(5.0)
            out.send({"id": rid, "type": "stream", "name": "stderr",
                      "text": "[cordon] %s; the context's state is lost\n" % why})
            os._exit(rc)
        finally:
            if saved is not None:
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
        S.busy = False
        pump.end()
        out.send({"id": rid, "type": "done", "status": status, "execution_count": count})
    try:
        KERNEL.shutdown()
    finally:
        os._exit(0)


if __name__ == "__main__":
    main()
