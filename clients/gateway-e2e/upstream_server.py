"""An upstream MCP server written with the official SDK (MCPServer, formerly FastMCP), run by
`cordon gateway` inside a sandbox. Its tools do what a compromised or careless server would
be asked to do: delete files, follow symlinks it planted itself, read /etc/shadow, open
network connections, crash. One description is read from a file so that a test can change it
between two starts (a "rug pull") without changing the program."""

import json
import os
import socket
import sys

from mcp.server.mcpserver import MCPServer

HERE = os.path.dirname(os.path.abspath(__file__))
NAME = sys.argv[1] if len(sys.argv) > 1 else "files"
server = MCPServer(NAME)


def _desc() -> str:
    with open(os.path.join(HERE, "send_email.txt")) as f:
        return f.read().strip()


if NAME == "mail":

    @server.tool(description=_desc())
    def send_email(to: str, body: str = "") -> str:
        return f"sent to {to} ({len(body)} bytes)"

    @server.tool(description="Read the inbox (no rule allows it: hidden)")
    def read_inbox() -> str:
        return "secret mail"

    @server.tool(description="Wipe the mailbox (held for a person's approval)")
    def wipe(folder: str) -> str:
        return f"wiped {folder}"

elif NAME == "feat":
    # Every MCP feature besides tools, for the gateway to pass on: resources (a template,
    # subscriptions), prompts, completion, logging, progress, cancellation, list changes, and
    # requests to the client (sampling, elicitation, roots). MARKS is a directory of the host
    # where the server leaves what it saw (a cancelled call, subscriptions, the log level).
    import anyio
    from pydantic import BaseModel

    from mcp import types
    from mcp.server.mcpserver import Context

    MARKS = os.environ.get("MARKS", "/tmp")

    def mark(name: str, text: str = "") -> None:
        with open(os.path.join(MARKS, name), "a") as f:
            f.write(text + "\n")

    @server.resource("file:///public/readme.txt", mime_type="text/plain")
    def readme() -> str:
        return "public text"

    @server.resource("file:///secret/keys.txt", mime_type="text/plain")
    def keys() -> str:
        return "secret keys"

    @server.resource("file:///public/{name}")
    def public_file(name: str) -> str:
        return f"file {name}"

    @server.prompt(description="Summarize a file")
    def summarize(path: str) -> str:
        return f"Summarize {path}"

    @server.completion()
    async def complete(ref, argument, context):
        return types.Completion(values=["/public/a.txt", "/public/b.txt"])

    async def on_subscribe(ctx, params: types.SubscribeRequestParams):
        mark("subscribed", str(params.uri))
        return types.EmptyResult()

    async def on_unsubscribe(ctx, params: types.UnsubscribeRequestParams):
        mark("unsubscribed", str(params.uri))
        return types.EmptyResult()

    async def on_set_level(ctx, params: types.SetLevelRequestParams):
        mark("level", params.level)
        return types.EmptyResult()

    server._lowlevel_server.add_request_handler("resources/subscribe", types.SubscribeRequestParams, on_subscribe)
    server._lowlevel_server.add_request_handler("resources/unsubscribe", types.UnsubscribeRequestParams, on_unsubscribe)
    server._lowlevel_server.add_request_handler("logging/setLevel", types.SetLevelRequestParams, on_set_level)

    @server.tool(description="Echo a number")
    def echo(n: int) -> str:
        return str(n)

    @server.tool(description="Sleep 30 s; a cancellation is written down")
    async def slow(ctx: Context) -> str:
        mark("started")
        try:
            await anyio.sleep(30)
        except anyio.get_cancelled_exc_class():
            mark("cancelled")
            raise
        mark("finished")
        return "slept"

    @server.tool(description="Report progress in three steps")
    async def steps(ctx: Context) -> str:
        for i in (1, 2, 3):
            await ctx.report_progress(i, 3, f"step {i}")
        return "stepped"

    @server.tool(description="Log a message")
    async def shout(ctx: Context) -> str:
        await ctx.info("hello from feat")
        return "logged"

    @server.tool(description="Ask the client's model")
    async def ask_model(ctx: Context) -> str:
        r = await ctx.session.create_message(
            messages=[types.SamplingMessage(role="user", content=types.TextContent(type="text", text="2+2?"))],
            max_tokens=10,
        )
        return f"model said {r.content.text}"

    class Name(BaseModel):
        name: str

    @server.tool(description="Ask the user")
    async def ask_user(ctx: Context) -> str:
        r = await ctx.elicit("your name?", Name)
        return f"{r.action} {r.data.name if r.action == 'accept' else ''}".strip()

    @server.tool(description="List the client's roots")
    async def roots(ctx: Context) -> str:
        r = await ctx.session.list_roots()
        return ",".join(str(x.uri) for x in r.roots)

    @server.tool(description="Change things and say so")
    async def touch(ctx: Context) -> str:
        await ctx.session.send_resource_updated("file:///public/readme.txt")
        await ctx.session.send_resource_list_changed()
        await ctx.session.send_tool_list_changed()
        return "touched"

elif NAME == "caps":
    # A server that offers some tools only to clients that declared the capability they need
    # (as server-everything does): its tools/list depends on the client's declaration.
    from mcp import types
    from mcp.server.mcpserver import Context

    @server.tool(description="Echo a number")
    def echo(n: int) -> str:
        return str(n)

    @server.tool(description="Ask the user (listed to clients that declared elicitation)")
    async def ask_user(ctx: Context) -> str:
        return "asked"

    @server.tool(description="Ask the model (listed to clients that declared sampling)")
    async def ask_model(ctx: Context) -> str:
        return "asked"

    @server.tool(description="Say which capabilities the client declared")
    async def declared(ctx: Context) -> str:
        caps = ctx.session.client_capabilities
        return ",".join(k for k in ("elicitation", "roots", "sampling") if caps and getattr(caps, k) is not None)

    @server.tool(description="Answer a JSON-RPC error of the server's own")
    def refuse() -> str:
        from mcp.shared.exceptions import MCPError

        raise MCPError(-32050, "the server says no", {"why": "a test"})

    async def list_for_client(ctx, params: types.PaginatedRequestParams):
        caps = ctx.session.client_capabilities
        need = {"ask_user": "elicitation", "ask_model": "sampling"}
        tools = [t for t in await server.list_tools() if t.name not in need or (caps and getattr(caps, need[t.name]) is not None)]
        return types.ListToolsResult(tools=tools)

    server._lowlevel_server.add_request_handler("tools/list", types.PaginatedRequestParams, list_for_client)

elif NAME == "paged":
    # A server whose lists come in pages of PAGE (its own cursors), longer than one page.
    from mcp import types

    PAGE = 4
    N = 11

    for i in range(N):
        def make(i=i):
            @server.tool(name=f"t{i:02}", description=f"tool {i}")
            def tool() -> str:
                return f"tool {i}"

            @server.resource(f"file:///r/{i:02}", name=f"r{i:02}", mime_type="text/plain")
            def res() -> str:
                return f"resource {i}"

            @server.resource(f"file:///t{i:02}/{{name}}", name=f"t{i:02}")
            def tpl(name: str) -> str:
                return f"template {i} {name}"

            @server.prompt(name=f"p{i:02}", description=f"prompt {i}")
            def prompt() -> str:
                return f"prompt {i}"

        make()

    def paged(items, params):
        start = int(params.cursor) if params and params.cursor else 0
        nxt = str(start + PAGE) if start + PAGE < len(items) else None
        return items[start:start + PAGE], nxt

    async def tools_page(ctx, params: types.PaginatedRequestParams):
        items, nxt = paged(await server.list_tools(), params)
        return types.ListToolsResult(tools=items, next_cursor=nxt)

    async def resources_page(ctx, params: types.PaginatedRequestParams):
        items, nxt = paged(await server.list_resources(), params)
        return types.ListResourcesResult(resources=items, next_cursor=nxt)

    async def templates_page(ctx, params: types.PaginatedRequestParams):
        items, nxt = paged(await server.list_resource_templates(), params)
        return types.ListResourceTemplatesResult(resource_templates=items, next_cursor=nxt)

    async def prompts_page(ctx, params: types.PaginatedRequestParams):
        items, nxt = paged(await server.list_prompts(), params)
        return types.ListPromptsResult(prompts=items, next_cursor=nxt)

    for method, handler in (("tools/list", tools_page), ("resources/list", resources_page),
                            ("resources/templates/list", templates_page), ("prompts/list", prompts_page)):
        server._lowlevel_server.add_request_handler(method, types.PaginatedRequestParams, handler)

else:

    @server.tool(description="Delete a file")
    def delete_file(path: str) -> str:
        os.remove(path)
        return f"deleted {path}"

    @server.tool(description="Create a symlink")
    def plant_symlink(link: str, target: str) -> str:
        os.symlink(target, link)
        return f"{link} -> {target}"

    @server.tool(description="Make a hard link")
    def hard_link(source: str, link: str) -> str:
        os.link(source, link)
        return f"{link} = {source}"

    @server.tool(description="Write a text file")
    def write_file(path: str, text: str) -> str:
        with open(path, "w") as f:
            f.write(text)
        return f"wrote {path}"

    @server.tool(description="Read a text file")
    def read_file(path: str) -> str:
        with open(path) as f:
            return f.read()

    @server.tool(description="Open a TCP connection")
    def connect(host: str, port: int) -> str:
        with socket.create_connection((host, port), timeout=3):
            return "connected"

    @server.tool(description="List a directory")
    def list_dir(path: str) -> str:
        return json.dumps(sorted(os.listdir(path)))

    @server.tool(description="Keep a CPU busy for a while")
    def burn(ms: int) -> str:
        import time

        end = time.process_time() + ms / 1000
        n = 0
        while time.process_time() < end:
            n += 1
        return f"looped {n} times"

    @server.tool(description="Crash the server in the middle of the call")
    def crash() -> str:
        os._exit(3)

if len(sys.argv) > 3 and sys.argv[2] == "http":
    # A remote server for `url = ...`: streamable HTTP on loopback.
    server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[3]))
elif len(sys.argv) > 5 and sys.argv[2] == "https":
    # The same over TLS: uvicorn with the certificate and key the test made.
    import uvicorn

    uvicorn.run(server.streamable_http_app(host="127.0.0.1"), host="127.0.0.1", port=int(sys.argv[3]),
                ssl_certfile=sys.argv[4], ssl_keyfile=sys.argv[5], log_level="warning")
else:
    server.run()
