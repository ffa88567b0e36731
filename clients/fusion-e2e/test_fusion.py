"""The published `sandbox-fusion` client (PyPI), unpatched, against a real `cordon serve`:
every language whose toolchain is here (the others refused, naming what is missing), compile
and runtime errors, timeouts, stdin, files in and `fetch_files` out, the API key as HTTP Basic
auth, a few hundred problems in the shape RL reward code sends (solution + asserts), and
hostile runs checked from outside.
"""

from __future__ import annotations

import asyncio
import base64
import os
import shutil
import uuid
from pathlib import Path

import pytest
from sandbox_fusion import (
    RunCodeRequest,
    RunStatus,
    SummaryMapping,
    run_code,
    run_code_async,
    run_concurrent,
    summary_run_code_result,
)

from conftest import endpoint_of

# Where a sandbox without an image finds its programs: the host's system directories.
SYSTEM_PATH = ("/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin")


def have(tool: str) -> bool:
    return any(os.access(os.path.join(d, tool), os.X_OK) for d in SYSTEM_PATH)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def run(endpoint: str, **kw):
    return run_code(RunCodeRequest(**kw), endpoint=endpoint, max_attempts=1)


# One program per language: reads a number on stdin, prints "hello <n>". The tools each
# needs are those the server looks for.
PROGRAMS = {
    "python": (["python3"], "print('hello', int(input()))"),
    "bash": (["bash"], "read n; echo hello $n"),
    "cpp": (["g++"], '#include <iostream>\nint main(){int n;std::cin>>n;std::cout<<"hello "<<n<<"\\n";}'),
    "nodejs": (["node"], "const n=require('fs').readFileSync(0,'utf8').trim();console.log('hello '+n)"),
    "typescript": (["tsc", "node"], "const n: string = require('fs').readFileSync(0,'utf8').trim();console.log('hello '+n)"),
    "go": (["go"], 'package main\nimport "fmt"\nfunc main(){var n int;fmt.Scan(&n);fmt.Println("hello", n)}'),
    "java": (
        ["javac", "java"],
        "import java.util.*;public class Main{public static void main(String[] a){"
        'System.out.println("hello "+new Scanner(System.in).nextInt());}}',
    ),
    "rust": (["rustc"], 'fn main(){let mut s=String::new();std::io::stdin().read_line(&mut s).unwrap();println!("hello {}",s.trim());}'),
    "perl": (["perl"], 'my $n=<STDIN>;chomp $n;print "hello $n\\n";'),
    "php": (["php"], '<?php $n=trim(fgets(STDIN)); echo "hello $n\\n";'),
    "ruby": (["ruby"], 'puts "hello #{gets.to_i}"'),
    "lua": (["lua"], 'print("hello " .. io.read("n"))'),
}


@pytest.mark.parametrize("language", sorted(PROGRAMS))
def test_each_language_runs_when_its_toolchain_is_here_and_is_refused_by_name_otherwise(endpoint, language):
    tools, code = PROGRAMS[language]
    missing = [t for t in tools if not have(t)]
    if missing:
        with pytest.raises(Exception, match=f"toolchain.*{missing[0]}"):
            run(endpoint, code=code, language=language, stdin="42", compile_timeout=60)
        return
    r = run(endpoint, code=code, language=language, stdin="42", compile_timeout=60)
    assert r.status == RunStatus.Success, r
    assert r.run_result.stdout == "hello 42\n", r
    assert r.run_result.return_code == 0
    assert r.run_result.execution_time is not None and r.run_result.execution_time >= 0
    compiled = language in ("cpp", "typescript", "go", "java", "rust")
    assert (r.compile_result is not None) == compiled, r
    assert summary_run_code_result(r, SummaryMapping()) == "Success"


def test_a_compile_error_is_failed_with_the_compilers_message_and_no_run(endpoint):
    r = run(endpoint, code="int main( {", language="cpp")
    assert r.status == RunStatus.Failed
    assert r.run_result is None
    assert r.compile_result.status == "Finished" and r.compile_result.return_code != 0
    assert "error" in r.compile_result.stderr
    mapping = SummaryMapping(CompileFailed="CE", RunFailed="RE", RunTimeout="TLE")
    assert summary_run_code_result(r, mapping) == "CE"


def test_a_runtime_error_is_failed_with_its_return_code_and_traceback(endpoint):
    r = run(endpoint, code="import sys\nprint('before')\nraise ValueError('boom')", language="python")
    assert r.status == RunStatus.Failed
    assert r.run_result.status == "Finished"
    assert r.run_result.return_code == 1
    assert r.run_result.stdout == "before\n"
    assert "ValueError: boom" in r.run_result.stderr
    assert summary_run_code_result(r, SummaryMapping(RunFailed="RE")) == "RE"


def test_a_run_over_its_timeout_is_time_limit_exceeded(endpoint):
    r = run(endpoint, code="while True: pass", language="python", run_timeout=1)
    assert r.status == RunStatus.Failed
    assert r.run_result.status == "TimeLimitExceeded"
    assert r.run_result.return_code is None
    assert 0.9 <= r.run_result.execution_time < 5, r
    assert summary_run_code_result(r, SummaryMapping(RunTimeout="TLE")) == "TLE"


def test_files_go_in_and_fetch_files_come_out(endpoint):
    r = run(
        endpoint,
        code="import json\nd = json.load(open('in/data.json'))\nopen('out.txt','w').write(str(sum(d)))\nprint('ok')",
        language="python",
        files={"in/data.json": b64(b"[1, 2, 3]"), "/workspace/extra.bin": b64(b"\x00\xff")},
        fetch_files=["out.txt", "/workspace/extra.bin", "never-written.txt"],
    )
    assert r.status == RunStatus.Success, r
    assert base64.b64decode(r.files["out.txt"]) == b"6"
    assert base64.b64decode(r.files["/workspace/extra.bin"]) == b"\x00\xff"
    assert "never-written.txt" not in r.files


def test_the_async_client_and_the_endpoints_user_info_without_a_colon(server):
    # aiohttp sends `http://KEY@host` as Basic auth; requests (the sync client) needs the
    # colon, `http://KEY:@host`, or sends nothing.
    ep = endpoint_of(server, server.api_key, colon=False)
    r = asyncio.run(run_code_async(RunCodeRequest(code="print(1+1)", language="python"), endpoint=ep, max_attempts=1))
    assert r.run_result.stdout == "2\n"


def test_a_missing_or_wrong_key_is_refused(server):
    host = server.url
    with pytest.raises(Exception, match="401"):
        run(host, code="print(1)", language="python")
    with pytest.raises(Exception, match="401"):
        run(endpoint_of(server, "cdn_" + "0" * 48), code="print(1)", language="python")
    # What requests does with `http://KEY@host`: no credentials at all.
    with pytest.raises(Exception, match="401"):
        run(endpoint_of(server, server.api_key, colon=False), code="print(1)", language="python")


def test_a_language_this_server_does_not_have_is_refused_naming_its_toolchain(endpoint):
    absent = next((lang for lang in ("lua", "php", "ruby", "swift", "julia") if not have(PROGRAMS.get(lang, ([lang],))[0][0])), None)
    if absent is None:
        pytest.skip("every candidate toolchain is installed here")
    with pytest.raises(Exception, match=f"language {absent}: its toolchain is not installed"):
        run(endpoint, code="x", language=absent)


# ~200 problems in the shape RL reward code sends: a solution and asserts, the right verdict
# known for each (a correct solution, an off-by-one, a crash, a wrong type).
def problem(i: int):
    k = i % 7 + 2
    kind = i % 4
    body = {
        0: f"return x * {k}",
        1: f"return x * {k} + 1",
        2: "raise RuntimeError('crash')",
        3: f"return str(x * {k})",
    }[kind]
    asserts = "\n".join(f"assert solve({x}) == {x * k}" for x in range(5))
    return f"def solve(x):\n    {body}\n\n{asserts}\n", kind == 0


def test_two_hundred_rl_problems_get_the_right_verdicts(endpoint):
    problems = [problem(i) for i in range(200)]
    results = run_concurrent(
        run,
        kwargs=[
            {"endpoint": endpoint, "code": code, "language": "python", "run_timeout": 10}
            for code, _ in problems
        ],
        concurrency=8,
    )
    wrong = [
        (i, r.status, r.run_result.stderr[-200:])
        for i, ((_, expected), r) in enumerate(zip(problems, results))
        if (r.status == RunStatus.Success) != expected
    ]
    assert not wrong, wrong
    assert sum(r.status == RunStatus.Success for r in results) == 50


def test_a_run_reaches_neither_another_runs_files_nor_the_hosts(server, endpoint, tmp_path):
    secret = f"fusion-secret-{uuid.uuid4().hex}"
    host_file = tmp_path / "host-secret.txt"
    host_file.write_text(secret)
    host_file.chmod(0o644)
    first = run(endpoint, code=f"open('mine.txt','w').write('{secret}')\nprint('left')", language="python")
    assert first.status == RunStatus.Success
    probe = (
        "ls -a /workspace; cat /workspace/mine.txt; find / -name mine.txt -o -name 'host-secret.txt' 2>/dev/null;"
        f" cat {host_file} 2>&1; cat ../runs/*/mine.txt 2>&1; true"
    )
    r = run(endpoint, code=probe, language="bash")
    seen = r.run_result.stdout + r.run_result.stderr
    assert secret not in seen, seen
    # From outside: nothing of either run is left on the host, and the host file is intact.
    runs = Path(server.data_dir) / "runs"
    assert not runs.exists() or list(runs.iterdir()) == []
    assert host_file.read_text() == secret


@pytest.mark.parametrize("path", ["/etc/shadow", "../../etc/passwd", "/workspace/../etc/passwd", "a/../../x"])
def test_fetch_files_outside_the_runs_workspace_is_refused(endpoint, path):
    with pytest.raises(Exception, match="outside_workspace"):
        run(endpoint, code="true", language="bash", fetch_files=[path])
    with pytest.raises(Exception, match="outside_workspace"):
        run(endpoint, code="true", language="bash", files={path: b64(b"x")})


def test_links_planted_by_the_run_do_not_lead_fetch_files_out(endpoint):
    passwd = Path("/etc/passwd").read_bytes()
    r = run(
        endpoint,
        code="ln -s /etc/passwd abs; ln -s ../../../../../../../etc/passwd up; mkfifo fifo; ln -s / root; true",
        language="bash",
        fetch_files=["abs", "up", "fifo", "root/etc/passwd"],
    )
    assert r.status == RunStatus.Success, r
    for name, content in r.files.items():
        assert base64.b64decode(content) != passwd, name
    assert r.files == {}
