"""`cordon gateway` passes every MCP feature of an upstream, under policy: the official MCP
Python client talks to the gateway over stdio; the upstream (upstream_server.py `feat`, the
official SDK's MCPServer) runs in a cordon sandbox and writes down on the host, in MARKS, what
reached it (a cancelled call, subscriptions, the log level). Everything stays on loopback.

    CORDON_BIN=target/debug/cordon /tmp/gwvenv/bin/pytest clients/gateway-e2e/test_features.py -q

(the venv made with /usr/bin/python3, as test_gateway.py says: the sandbox binds it read-only).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError

from test_gateway import REFUSED, cordon_bin, is_error, run, texts

HERE = Path(__file__).resolve().parent
INVALID_PARAMS = -32602
RESOURCE_NOT_FOUND = -32002


class FeatEnv:
    def __init__(self, gateway: str = 'default = "deny"', rules: str = "", server: str = "feat"):
        self.root = Path(tempfile.mkdtemp(prefix="cordon-gw-feat-"))
        os.chmod(self.root, 0o755)
        self.srv = self.root / "srv"
        shutil.copytree(HERE, self.srv, ignore=shutil.ignore_patterns("__pycache__", "test_*"))
        self.marks = self.root / "marks"
        self.marks.mkdir()
        os.chmod(self.marks, 0o777)
        self.audit = self.root / "audit.jsonl"
        venv = Path(sys.prefix)
        self.config = self.root / "gateway.toml"
        self.config.write_text(
            f"""
[gateway]
{gateway}
audit = "{self.audit}"

[servers.{server}]
command = ["{venv / "bin" / "python"}", "{self.srv}/upstream_server.py", "{server}"]
ro = ["{self.srv}", "{venv}"]
rw = ["{self.marks}"]
env = ["MARKS={self.marks}"]
{rules}
"""
        )

    def cleanup(self):
        shutil.rmtree(self.root, ignore_errors=True)

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [cordon_bin(), "gateway", *args, "--config", str(self.config)],
            capture_output=True, text=True, timeout=30,
        )

    def records(self, event: str) -> list[dict]:
        return [r for r in (json.loads(l) for l in self.audit.read_text().splitlines()) if r.get("event") == event]

    def mark(self, name: str) -> str:
        p = self.marks / name
        return p.read_text() if p.exists() else ""


RULES = """
[[rules]]
tool = "feat.*"

[[rules]]
resource = "feat+file:///public/**"

[[rules]]
prompt = "feat.summarize"
paths = { path = { deny = ["/secret/**"] } }

[[rules]]
sampling = "feat"
approve = true
approve_timeout = "30s"

[[rules]]
elicitation = "feat"
"""


class Client:
    """The agent's side: a model, a user and roots of its own, and everything it heard."""

    def __init__(self):
        self.logs: list = []
        self.notes: list = []

    async def sampling(self, ctx, params):
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text="four"), model="test-model"
        )

    async def elicitation(self, ctx, params):
        return types.ElicitResult(action="accept", content={"name": "Ann"})

    async def roots(self, ctx):
        return types.ListRootsResult(roots=[types.Root(uri="file:///work/project")])

    async def logging(self, params):
        self.logs.append(params)

    async def messages(self, m):
        if not isinstance(m, Exception):
            self.notes.append(m)

    def heard(self, kind: str) -> list:
        out = []
        for n in self.notes:
            inner = getattr(n, "root", n)
            if type(inner).__name__ == kind:
                out.append(inner)
        return out


async def session_for(env: FeatEnv, body, client: Client | None = None):
    c = client or Client()
    params = StdioServerParameters(command=cordon_bin(), args=["gateway", "--config", str(env.config)])
    async with stdio_client(params) as (read, write):
        async with ClientSession(
            read, write,
            sampling_callback=c.sampling,
            elicitation_callback=c.elicitation,
            list_roots_callback=c.roots,
            logging_callback=c.logging,
            message_handler=c.messages,
        ) as session:
            await session.initialize()
            await body(session, c)


@pytest.fixture
def env():
    e = FeatEnv(rules=RULES)
    yield e
    e.cleanup()


async def wait_for(pred, seconds: float = 10.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if pred():
            return True
        await anyio.sleep(0.05)
    return pred()


def test_resources_prompts_completion_logging_progress_pass_through_the_gateway(env):
    async def body(s: ClientSession, c: Client):
        # Resources: the allowlisted ones, named server+uri; the secret one hidden.
        uris = [str(r.uri) for r in (await s.list_resources()).resources]
        assert uris == ["feat+file:///public/readme.txt"], uris
        tpls = [t.uri_template for t in (await s.list_resource_templates()).resource_templates]
        assert tpls == ["feat+file:///public/{name}"], tpls
        r = await s.read_resource("feat+file:///public/readme.txt")
        assert r.contents[0].text == "public text" and str(r.contents[0].uri) == "feat+file:///public/readme.txt", r
        r = await s.read_resource("feat+file:///public/notes.txt")
        assert r.contents[0].text == "file notes.txt", r

        # Subscriptions reach the server, and its updates come back under the gateway's name.
        await s.subscribe_resource("feat+file:///public/readme.txt")
        assert env.mark("subscribed").strip() == "file:///public/readme.txt"
        r = await s.call_tool("feat.touch", {})
        assert not is_error(r), texts(r)
        assert await wait_for(lambda: c.heard("ResourceUpdatedNotification")), c.notes
        assert str(c.heard("ResourceUpdatedNotification")[0].params.uri) == "feat+file:///public/readme.txt"
        assert await wait_for(lambda: c.heard("ToolListChangedNotification") and c.heard("ResourceListChangedNotification")), c.notes
        await s.unsubscribe_resource("feat+file:///public/readme.txt")
        assert env.mark("unsubscribed").strip() == "file:///public/readme.txt"

        # Prompts and completion.
        names = [p.name for p in (await s.list_prompts()).prompts]
        assert names == ["feat.summarize"], names
        p = await s.get_prompt("feat.summarize", {"path": "/public/a.txt"})
        assert "Summarize /public/a.txt" in p.messages[0].content.text, p
        done = await s.complete(types.PromptReference(type="ref/prompt", name="feat.summarize"), {"name": "path", "value": "/pu"})
        assert done.completion.values == ["/public/a.txt", "/public/b.txt"], done

        # Logging: the level reaches the server, its messages the client (logger: the server).
        await s.set_logging_level("debug")
        assert env.mark("level").strip() == "debug"
        await s.call_tool("feat.shout", {})
        assert await wait_for(lambda: any(l.data == "hello from feat" for l in c.logs)), c.logs
        assert [l.logger for l in c.logs if l.data == "hello from feat"][0].startswith("feat")

        # Progress, under the client's own token.
        seen = []

        async def progress(p, total, message):
            seen.append((p, total, message))

        r = await s.call_tool("feat.steps", {}, progress_callback=progress)
        assert texts(r) == "stepped"
        # Each step, in order (one overtaken by the next may be dropped: progress only grows).
        assert await wait_for(lambda: seen and seen[-1] == (3, 3, "step 3")), seen
        assert len(seen) >= 2 and [p for p, _, _ in seen] == sorted({p for p, _, _ in seen}), seen

        await s.send_ping()

        # Roots and elicitation go to this client (it declared them), and come back.
        r = await s.call_tool("feat.roots", {})
        assert texts(r) == "file:///work/project", texts(r)
        r = await s.call_tool("feat.ask_user", {})
        assert texts(r) == "accept Ann", texts(r)

    run(lambda: session_for(env, body))
    reads = env.records("resources/read")
    assert [r["verdict"] for r in reads] == ["allowed", "allowed"], reads
    assert env.records("elicitation/create")[0]["verdict"] == "allowed"


def test_refusals_under_policy_each_with_its_audit_record(env):
    def answer(verb: str, found: list):
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            ids = [l.split("\t")[0] for l in env.cli("approvals").stdout.splitlines() if l.startswith("call-")]
            if ids:
                found.append(env.cli(verb, ids[0]))
                return
            time.sleep(0.1)

    async def body(s: ClientSession, c: Client):
        # A resource outside the allowlist answers like a missing one.
        with pytest.raises(MCPError) as e:
            await s.read_resource("feat+file:///secret/keys.txt")
        assert e.value.code == RESOURCE_NOT_FOUND, e.value
        assert "secret keys" not in str(e.value)

        # A prompt argument that a path rule denies, however it is spelled.
        with pytest.raises(MCPError) as e:
            await s.get_prompt("feat.summarize", {"path": "/public/../secret/keys.txt"})
        assert e.value.code == REFUSED and e.value.data["reason"] == "path", e.value

        # Sampling under approval: granted once, refused once.
        for verb in ("approve", "deny"):
            found: list = []
            t = threading.Thread(target=answer, args=(verb, found))
            t.start()
            try:
                if verb == "approve":
                    r = await s.call_tool("feat.ask_model", {})
                    assert not is_error(r) and texts(r) == "model said four", texts(r)
                else:
                    # The server's sampling request is refused; the server fails its call.
                    with pytest.raises(MCPError) as e:
                        await s.call_tool("feat.ask_model", {})
                    assert "a person refused" in e.value.message and "four" not in e.value.message, e.value
            finally:
                t.join()
            assert found and found[0].returncode == 0, found


    run(lambda: session_for(env, body))
    read = env.records("resources/read")
    assert read[-1]["verdict"] == "refused" and read[-1]["reason"] == "not_allowed", read
    get = env.records("prompts/get")
    assert get[-1]["verdict"] == "refused" and get[-1]["reason"] == "path", get
    sampling = env.records("sampling/createMessage")
    assert [r["verdict"] for r in sampling] == ["allowed", "refused"], sampling
    assert sampling[-1]["reason"] == "approval", sampling
    answered = [r["verdict"] for r in env.records("approval.answered")]
    assert answered == ["granted", "refused"], answered


def test_a_cancelled_call_ends_upstream_and_the_next_is_served(env):
    async def body(s: ClientSession, c: Client):
        # The upstream session of this client's capabilities is up before the clock starts.
        await s.list_tools()
        with anyio.move_on_after(2):
            await s.call_tool("feat.slow", {})
        assert env.mark("started"), "the call reached the server"
        # The server itself saw the cancellation (its handler was interrupted).
        assert await wait_for(lambda: env.mark("cancelled"), 10), "the server never heard"
        t0 = time.monotonic()
        r = await s.call_tool("feat.steps", {})
        assert texts(r) == "stepped" and time.monotonic() - t0 < 5
        assert not env.mark("finished")

    run(lambda: session_for(env, body))
    calls = [r for r in env.records("tools/call") if r["tool"] == "feat.slow"]
    assert calls and calls[0]["reason"] == "cancelled", calls


def test_unknown_tool_and_schema_failure_answer_as_the_specification_says(env):
    async def body(s: ClientSession, c: Client):
        with pytest.raises(MCPError) as e:
            await s.call_tool("feat.nonexistent", {})
        assert e.value.code == INVALID_PARAMS, e.value
        with pytest.raises(MCPError) as e:
            await s.call_tool("mail.hidden", {})
        assert e.value.code == INVALID_PARAMS, e.value
        # A schema failure is the tool's own error result, which the model can read.
        r = await s.call_tool("feat.echo", {"n": "not a number"})
        assert is_error(r) and "inputSchema" in texts(r), texts(r)
        r = await s.call_tool("feat.echo", {"n": 4})
        assert not is_error(r) and texts(r) == "4", texts(r)

    run(lambda: session_for(env, body))


def test_sampling_refused_when_no_rule_allows_it():
    env = FeatEnv(rules='[[rules]]\ntool = "feat.*"\n')
    try:
        async def body(s: ClientSession, c: Client):
            with pytest.raises(MCPError) as e:
                await s.call_tool("feat.ask_model", {})
            assert "no rule allows feat" in e.value.message, e.value
            # Resources and prompts no rule names are hidden under default = "deny".
            assert (await s.list_resources()).resources == []
            assert (await s.list_prompts()).prompts == []

        run(lambda: session_for(env, body))
        sampling = env.records("sampling/createMessage")
        assert sampling and sampling[0]["verdict"] == "refused" and sampling[0]["reason"] == "not_allowed", sampling
    finally:
        env.cleanup()


def test_a_single_server_gateway_can_show_unprefixed_names():
    env = FeatEnv(gateway='default = "allow"\nprefix = false')
    try:
        async def body(s: ClientSession, c: Client):
            names = {t.name for t in (await s.list_tools()).tools}
            assert {"slow", "steps", "touch"} <= names, names
            uris = sorted(str(r.uri) for r in (await s.list_resources()).resources)
            assert uris == ["file:///public/readme.txt", "file:///secret/keys.txt"], uris
            r = await s.read_resource("file:///public/readme.txt")
            assert r.contents[0].text == "public text"
            assert str(r.contents[0].uri) == "file:///public/readme.txt"
            assert [p.name for p in (await s.list_prompts()).prompts] == ["summarize"]
            r = await s.call_tool("steps", {})
            assert texts(r) == "stepped"

        run(lambda: session_for(env, body))
        assert env.records("tools/call")[0]["tool"] == "feat.steps"
    finally:
        env.cleanup()


def host_processes_with(token: str) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if token in (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                    out.append(int(d.name))
            except OSError:
                pass
    return out


def test_a_cancelled_script_tool_call_ends_the_script():
    token = f"{31 + os.getpid() % 1000 / 1000:.3f}"  # a sleep no other process has
    env = FeatEnv(rules=f'[tools.nap]\ncommand = ["sleep", "{token}"]\n\n[[rules]]\ntool = "nap"\n')
    try:
        async def body(s: ClientSession, c: Client):
            seen = []

            async def call():
                with anyio.move_on_after(3):
                    await s.call_tool("nap", {})

            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                assert await wait_for(lambda: host_processes_with(f"sleep {token}"), 3), "the script ran"
                seen.append(True)
            assert seen
            assert await wait_for(lambda: not host_processes_with(f"sleep {token}"), 3), "the script lives on"

        run(lambda: session_for(env, body))
        naps = [r for r in env.records("tools/call") if r["tool"] == "nap"]
        assert naps and naps[0]["reason"] == "cancelled", naps
    finally:
        env.cleanup()


@contextlib.contextmanager
def http_gateway(env: FeatEnv):
    """`cordon gateway --listen` on loopback; yields (url, API key)."""
    keys = env.root / "keys"
    out = subprocess.run([cordon_bin(), "keys", "create", "--data-dir", str(keys), "--name", "gw"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    proc = subprocess.Popen(
        [cordon_bin(), "gateway", "--config", str(env.config), "--listen", "127.0.0.1:0", "--keys-dir", str(keys)],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        line = proc.stdout.readline()
        assert "listening on http://127.0.0.1:" in line, line
        threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
        yield line.split("listening on ")[1].strip(), out.stdout.strip()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@contextlib.asynccontextmanager
async def http_session(url: str, key: str, **callbacks):
    from test_gateway import _httpx
    from mcp.client.streamable_http import streamable_http_client

    httpx = _httpx()
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"},
                                 timeout=httpx.Timeout(30, read=120)) as client:
        async with streamable_http_client(url, http_client=client) as (read, write):
            async with ClientSession(read, write, **callbacks) as s:
                await s.initialize()
                yield s


async def direct_view(name: str, **callbacks) -> tuple[set, str]:
    """The tools a client declaring `callbacks` sees connected straight to the upstream
    (unsandboxed, on stdio), and what the upstream says the client declared."""
    params = StdioServerParameters(command=sys.executable, args=[str(HERE / "upstream_server.py"), name])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, **callbacks) as s:
            await s.initialize()
            tools = {t.name for t in (await s.list_tools()).tools}
            return tools, texts(await s.call_tool("declared", {}))


async def decline(ctx, params):
    return types.ElicitResult(action="decline")


def test_each_client_sees_the_tools_it_would_see_directly():
    # caps lists ask_user only to clients that declared elicitation, ask_model only to those
    # that declared sampling. Two clients of one gateway at once: one declares nothing, one
    # elicitation; each sees exactly what it sees connected directly, and the upstream is told
    # exactly what each declared.
    env = FeatEnv(gateway='default = "allow"\nprefix = false', server="caps")
    try:
        async def main():
            plain_direct = await direct_view("caps")
            asking_direct = await direct_view("caps", elicitation_callback=decline)
            assert plain_direct == ({"echo", "declared", "refuse"}, ""), plain_direct
            assert asking_direct == ({"echo", "declared", "refuse", "ask_user"}, "elicitation"), asking_direct
            with http_gateway(env) as (url, key):
                async with http_session(url, key) as plain, \
                        http_session(url, key, elicitation_callback=decline) as asking:
                    for s, direct in ((plain, plain_direct), (asking, asking_direct), (plain, plain_direct)):
                        tools = {t.name for t in (await s.list_tools()).tools}
                        said = texts(await s.call_tool("declared", {}))
                        assert (tools, said) == direct
                    # A tool the client was not shown is unknown to it, as it would be directly.
                    with pytest.raises(MCPError) as e:
                        await plain.call_tool("ask_user", {})
                    assert e.value.error.code == INVALID_PARAMS
                    assert texts(await asking.call_tool("ask_user", {})) == "asked"

        run(main)
        started = env.records("server.started")
        assert sorted(sorted(json.loads(r["client_capabilities"])) for r in started) == [
            [], ["elicitation"], ["elicitation", "roots", "sampling"]], started
    finally:
        env.cleanup()


def test_an_error_the_upstream_answers_to_a_call_reaches_the_client_as_it_is():
    env = FeatEnv(gateway='default = "allow"\nprefix = false', server="caps")
    try:
        async def body(s: ClientSession, c: Client):
            with pytest.raises(MCPError) as e:
                await s.call_tool("refuse", {})
            assert (e.value.error.code, e.value.error.message, e.value.error.data) == (
                -32050, "the server says no", {"why": "a test"})

        run(lambda: session_for(env, body))
        [rec] = env.records("tools/call")
        assert rec["verdict"] == "failed" and "code -32050" in rec["message"], rec
    finally:
        env.cleanup()


def test_lists_pass_every_page_of_an_upstream_that_pages_in_pages_of_the_gateway():
    # The upstream answers 11 of each in pages of 4 (its own cursors); the gateway follows
    # them and answers the merged list in pages of 5 with cursors of its own.
    env = FeatEnv(gateway='default = "allow"\npage_size = 5', server="paged")
    try:
        async def body(s: ClientSession, c: Client):
            lists = {
                "tools": (s.list_tools, lambda r: [t.name for t in r.tools]),
                "resources": (s.list_resources, lambda r: [str(x.uri) for x in r.resources]),
                "templates": (s.list_resource_templates, lambda r: [x.uri_template for x in r.resource_templates]),
                "prompts": (s.list_prompts, lambda r: [p.name for p in r.prompts]),
            }
            want = {
                "tools": [f"paged.t{i:02}" for i in range(11)],
                "resources": [f"paged+file:///r/{i:02}" for i in range(11)],
                "templates": [f"paged+file:///t{i:02}/{{name}}" for i in range(11)],
                "prompts": [f"paged.p{i:02}" for i in range(11)],
            }
            for kind, (call, items) in lists.items():
                got, sizes, cursor = [], [], None
                while True:
                    r = await call(params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
                    got += items(r)
                    sizes.append(len(items(r)))
                    cursor = r.next_cursor
                    if not cursor:
                        break
                assert (got, sizes) == (want[kind], [5, 5, 1]), kind
            with pytest.raises(MCPError) as e:
                await s.list_tools(params=types.PaginatedRequestParams(cursor="4"))
            assert e.value.error.code == INVALID_PARAMS
            r = await s.read_resource("paged+file:///r/10")
            assert r.contents[0].text == "resource 10"

        run(lambda: session_for(env, body))
    finally:
        env.cleanup()


def test_log_levels_are_per_client():
    # Two clients of one gateway (one upstream session: they declared the same): one asks for
    # errors only, the other for everything; an info message reaches only the second.
    env = FeatEnv(rules=RULES)
    try:
        async def main():
            quiet, loud = Client(), Client()
            with http_gateway(env) as (url, key):
                async with http_session(url, key, logging_callback=quiet.logging) as q, \
                        http_session(url, key, logging_callback=loud.logging) as l:
                    await q.set_logging_level("error")
                    await l.set_logging_level("debug")
                    for s in (q, l):
                        assert texts(await s.call_tool("feat.shout", {})) == "logged"
                    assert await wait_for(lambda: len(loud.logs) >= 2)
                    await anyio.sleep(0.5)
            assert quiet.logs == [], quiet.logs
            assert {m.data for m in loud.logs} == {"hello from feat"}, loud.logs
            # Upstream, the most verbose level a client asked for.
            assert env.mark("level").split() == ["error", "debug"], env.mark("level")

        run(main)
    finally:
        env.cleanup()
