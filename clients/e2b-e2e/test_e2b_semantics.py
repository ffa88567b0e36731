"""E2B behaviours that E2B's own test suites (scripts/e2b-suite.sh) found cordon answering
differently, each checked here through the published SDK: list order and filters, the state
a paused sandbox reports, how a command ends when it runs out of time or its sandbox is
killed, the file API's semantics, and the error shape on routes this server lacks."""

from __future__ import annotations

import json
import struct
import time
import uuid
from datetime import timedelta

import httpx
import pytest
from e2b import FileType, Sandbox, SandboxQuery
from e2b.exceptions import TimeoutException


def test_list_is_newest_first_with_order_started_after_and_template(server):
    tag = uuid.uuid4().hex[:8]
    # Within one second: only millisecond start times can order them.
    first = Sandbox.create("base", timeout=120, metadata={"tag": tag})
    second = Sandbox.create("code-interpreter-v1", timeout=120, metadata={"tag": tag})
    try:
        q = SandboxQuery(metadata={"tag": tag})
        newest = [s.sandbox_id for s in Sandbox.list(query=q).next_items()]
        assert newest == [second.sandbox_id, first.sandbox_id]
        oldest = [s.sandbox_id for s in Sandbox.list(query=q, order="asc").next_items()]
        assert oldest == [first.sandbox_id, second.sandbox_id]
        # Pages follow the same order.
        pager = Sandbox.list(query=q, limit=1)
        assert [s.sandbox_id for s in pager.next_items()] == [second.sandbox_id]
        assert [s.sandbox_id for s in pager.next_items()] == [first.sandbox_id]
        assert not pager.has_next

        started = second.get_info().started_at
        assert started.microsecond % 1000 == 0 and started > first.get_info().started_at
        since = Sandbox.list(query=SandboxQuery(metadata={"tag": tag}, started_after=started))
        assert [s.sandbox_id for s in since.next_items()] == [second.sandbox_id]
        later = SandboxQuery(metadata={"tag": tag}, started_after=started + timedelta(seconds=1))
        assert Sandbox.list(query=later).next_items() == []

        base = Sandbox.list(query=SandboxQuery(metadata={"tag": tag}, template="base"))
        assert [s.sandbox_id for s in base.next_items()] == [first.sandbox_id]
        none = Sandbox.list(query=SandboxQuery(metadata={"tag": tag}, template="no-such"))
        assert none.next_items() == []
    finally:
        first.kill()
        second.kill()


def test_a_paused_sandbox_is_not_running_until_resumed(sbx):
    assert sbx.is_running()
    sbx.pause()
    assert not sbx.is_running()
    resumed = Sandbox.connect(sbx.sandbox_id)
    assert resumed.is_running()


def test_a_command_out_of_time_ends_its_stream_with_deadline_exceeded(server, sbx):
    """envd ends a command's stream that outlives its `connect-timeout-ms` with the error
    `deadline_exceeded` and no `end` event: what the SDKs turn into `TimeoutException`."""
    h = {
        "E2b-Sandbox-Id": sbx.sandbox_id,
        "X-Access-Token": sbx._envd_access_token,
        "Content-Type": "application/connect+json",
        "Connect-Timeout-Ms": "1500",
    }
    req = json.dumps({"process": {"cmd": "/bin/bash", "args": ["-l", "-c", "sleep 30"]}}).encode()
    t0 = time.monotonic()
    with httpx.Client(timeout=30) as c:
        r = c.post(f"{server.url}/process.Process/Start", headers=h,
                   content=struct.pack(">BI", 0, len(req)) + req)
    assert time.monotonic() - t0 < 20
    body, events, end = r.content, [], None
    while body:
        flags, n = struct.unpack(">BI", body[:5])
        msg = json.loads(body[5 : 5 + n])
        body = body[5 + n :]
        if flags & 2:
            end = msg
        else:
            events.append(next(iter(msg["event"])))
    assert "end" not in events, events
    assert end and end.get("error", {}).get("code") == "deadline_exceeded", end
    with pytest.raises(TimeoutException):
        sbx.commands.run("sleep 30", timeout=2)


def test_a_command_whose_sandbox_is_killed_raises_timeout(server):
    s = Sandbox.create(timeout=120)
    cmd = s.commands.run("sleep 60", background=True)
    s.kill()
    with pytest.raises(TimeoutException) as e:
        cmd.wait()
    assert "sandbox was killed or reached its end of life" in str(e.value)


def test_files_remove_of_a_missing_path_succeeds(sbx):
    sbx.files.remove("/home/user/never-there.txt")
    sbx.files.write("/home/user/there.txt", "x")
    sbx.files.remove("/home/user/there.txt")
    assert not sbx.files.exists("/home/user/there.txt")


def test_files_list_deep_is_in_path_order(sbx):
    for d in ("t/a/a1", "t/a/a2", "t/b/b1"):
        sbx.files.make_dir(d)
    sbx.files.write("t/f.txt", "x")
    got = [e.path for e in sbx.files.list("t", depth=2)]
    root = "/home/user/t"
    assert got == [f"{root}/a", f"{root}/a/a1", f"{root}/a/a2", f"{root}/b", f"{root}/b/b1", f"{root}/f.txt"]


def test_files_get_info_of_a_symlink_describes_its_target(sbx):
    sbx.files.write("/home/user/ln/target.txt", "Hello, World!")
    sbx.commands.run("ln -s target.txt link && ln -s nowhere dangling", cwd="/home/user/ln")
    info = sbx.files.get_info("/home/user/ln/link")
    assert (info.name, info.path, info.type) == ("link", "/home/user/ln/link", FileType.FILE)
    assert info.size == len("Hello, World!")
    assert info.symlink_target == "/home/user/ln/target.txt"
    # A link to nothing is described as the link.
    dangling = sbx.files.get_info("/home/user/ln/dangling")
    assert dangling.symlink_target == "/home/user/ln/nowhere"


def test_an_unknown_route_answers_e2b_errors_to_e2b_clients(server):
    from e2b import Template

    # The SDK reads the 404 as "no such template" rather than crashing on the body.
    assert Template.exists(f"nonexistent-{uuid.uuid4()}") is False
    # E2B's alias lookup is served now: its 404 is E2B's shape.
    r = httpx.get(f"{server.url}/templates/aliases/x", headers={"X-API-KEY": server.api_key})
    assert r.status_code == 404 and r.json()["code"] == 404
    # A route no door serves keeps the native API's shape for other clients.
    r = httpx.get(f"{server.url}/templates/aliases/x/nothing-here", headers={"X-API-KEY": server.api_key})
    assert r.status_code == 404 and "error" in r.json()


def test_sandbox_metrics_answer_only_inside_the_range_asked(sbx):
    import datetime

    now = datetime.datetime.now(datetime.timezone.utc)
    assert len(sbx.get_metrics(start=now - timedelta(minutes=1), end=now + timedelta(minutes=1))) == 1
    before = sbx.get_metrics(start=now - timedelta(hours=1), end=now - timedelta(minutes=30))
    assert before == []


def test_run_code_shows_a_string_result_as_itself(ci):
    assert ci.run_code("import os; os.getenv('HOME', 'x') and 'plain'").text == "plain"
    assert ci.run_code("'it' + \"'s\"").text == "it's"
    assert ci.run_code("['a']").text == "['a']"
    assert ci.run_code("'js'", language="js").text == "js"


def test_run_code_raises_timeout_when_its_sandbox_is_killed(server):
    import threading

    from e2b_code_interpreter import Sandbox as CodeSandbox

    s = CodeSandbox.create(timeout=120)
    timer = threading.Timer(2.0, s.kill)
    timer.start()
    try:
        with pytest.raises(TimeoutException, match="sandbox was killed while the request was in progress"):
            s.run_code("import time; time.sleep(300)", timeout=120)
    finally:
        timer.cancel()


def test_a_client_that_times_out_interrupts_its_cell(ci):
    with pytest.raises(TimeoutException):
        ci.run_code("import time; time.sleep(300)", timeout=2)
    t0 = time.monotonic()
    # The next cell does not wait behind the abandoned one.
    assert ci.run_code("1 + 1", timeout=20).text == "2"
    assert time.monotonic() - t0 < 15


def test_default_contexts_are_listed_from_the_start_and_usable_by_id(ci):
    listed = ci.list_code_contexts()
    assert [c.language for c in listed[:2]] == ["python", "javascript"]
    assert all(c.cwd == "/home/user" for c in listed[:2])
    py = listed[0]
    ci.run_code("shared = 41")  # the default Python context, by language
    assert ci.run_code("shared + 1", context=py).text == "42"
    made = ci.create_code_context()
    assert ci.list_code_contexts()[-1].id == made.id
