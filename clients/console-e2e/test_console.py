"""The web console end to end: a real `cordon serve`, Debian's Chromium driven by Playwright.

A person signs in with an API key, sees a sandbox appear that a program created, watches its
use move, types into its terminal, moves files in and out, and kills it; and the console's
protections are attacked as a hostile page or a hostile sandbox would: no session, another
key's session, a request from another origin, markup in names a sandbox chose.
"""

from __future__ import annotations

import re
import time
from typing import Any, Dict, Optional

import requests
from playwright.sync_api import expect


def api(server, method: str, path: str, body: Optional[Dict[str, Any]] = None, key: Optional[str] = None):
    r = requests.request(
        method,
        server.url + path,
        json=body,
        headers={"Authorization": f"Bearer {key or server.api_key}"},
        timeout=60,
    )
    return r


def new_sandbox(server, key: Optional[str] = None, **body: Any) -> str:
    r = api(server, "POST", "/v1/sandboxes", body, key)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def sign_in(page, server, key: Optional[str] = None) -> None:
    page.goto(server.url + "/console")
    page.fill("#key", key or server.api_key)
    page.click("#signin")
    expect(page.locator("#who")).to_contain_text("key ")


def test_sign_in_and_a_sandbox_made_by_a_program_appears_in_the_live_table(server, page):
    sign_in(page, server)
    sid = new_sandbox(server, metadata={"owner": "console-test"}, memory="128M")
    row = page.locator(f'tr[data-id="{sid}"]')
    expect(row).to_be_visible(timeout=10_000)
    expect(row).to_contain_text("running")
    expect(row).to_contain_text("owner=console-test")
    expect(row).to_contain_text("/ 128M")
    page.fill("#filter", "no-such-thing")
    expect(row).to_be_hidden()
    page.fill("#filter", "console-test")
    expect(row).to_be_visible()
    # The key never lands in the browser's storage or in a URL.
    stored = page.evaluate("() => JSON.stringify(localStorage) + JSON.stringify(sessionStorage) + location.href")
    assert server.api_key not in stored
    cookies = page.context.cookies()
    session = [c for c in cookies if c["name"] == "cordon_session"]
    assert session and session[0]["httpOnly"] and session[0]["sameSite"] == "Strict"
    assert server.api_key not in session[0]["value"]
    api(server, "DELETE", f"/v1/sandboxes/{sid}")


def test_the_graph_moves_under_a_busy_loop_and_the_terminal_answers(server, page):
    sid = new_sandbox(server)
    sign_in(page, server)
    page.goto(server.url + f"/console#/sandbox/{sid}")
    expect(page.locator("#use-text")).to_contain_text("CPU", timeout=10_000)
    r = api(server, "POST", f"/v1/sandboxes/{sid}/exec", {"cmd": "while :; do :; done", "background": True})
    assert r.status_code == 202, r.text

    def cpu() -> float:
        m = re.search(r"CPU ([0-9.]+)%", page.locator("#use-text").inner_text())
        return float(m.group(1)) if m else 0.0

    deadline = time.monotonic() + 20
    while cpu() < 20 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert cpu() >= 20, page.locator("#use-text").inner_text()
    assert page.locator("svg.graph polyline.cpu").count() == 1

    page.click("#open-terminal")
    expect(page.locator("#terminal .xterm")).to_be_visible(timeout=10_000)
    page.locator("#terminal").click()
    page.keyboard.type("echo $((6*7))-answer\n")
    expect(page.locator("#terminal .xterm-rows")).to_contain_text("42-answer", timeout=15_000)
    api(server, "DELETE", f"/v1/sandboxes/{sid}")


def test_upload_then_download_a_file_and_kill_from_the_page(server, page, tmp_path):
    sid = new_sandbox(server)
    sign_in(page, server)
    page.goto(server.url + f"/console#/sandbox/{sid}")
    src = tmp_path / "notes.txt"
    src.write_text("from the browser\n")
    page.set_input_files("#upload", str(src))
    link = page.locator('#files tr[data-name="notes.txt"] a.download')
    expect(link).to_be_visible(timeout=10_000)
    r = api(server, "GET", f"/v1/sandboxes/{sid}/files?path=/workspace/notes.txt")
    assert r.text == "from the browser\n"
    with page.expect_download() as d:
        link.click()
    assert open(d.value.path()).read() == "from the browser\n"

    page.click("#act-kill")
    expect(page).to_have_url(re.compile(r"#/$"), timeout=10_000)
    assert api(server, "GET", f"/v1/sandboxes/{sid}").json()["state"] == "deleted"


def test_markup_a_sandbox_chose_renders_as_text(server, page):
    hostile = '<img src=x onerror="alert(1)"><script>alert(2)</script>'
    sid = new_sandbox(server, metadata={"note": hostile})
    r = api(server, "POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["sh", "-c", "touch '/workspace/<b>bold<img src=x onerror=alert(3)>'"]})
    assert r.status_code == 200 and r.json()["exit_code"] == 0, r.text
    sign_in(page, server)
    row = page.locator(f'tr[data-id="{sid}"]')
    expect(row).to_be_visible(timeout=10_000)
    assert hostile in row.locator("td.meta").inner_text()
    assert row.locator("img, script").count() == 0
    page.goto(server.url + f"/console#/sandbox/{sid}")
    name = page.locator("#files td").filter(has_text="<b>bold<img")
    expect(name.first).to_be_visible(timeout=10_000)
    assert page.locator("#files b, #files img").count() == 0
    # The `page` fixture fails the test if any dialog opened or a script error happened.
    api(server, "DELETE", f"/v1/sandboxes/{sid}")


def test_without_a_session_the_page_loads_but_every_api_call_is_401(server):
    r = requests.get(server.url + "/console", timeout=10)
    assert r.status_code == 200
    csp = r.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "default-src 'none'" in csp and "frame-ancestors 'none'" in csp
    for path in ["/v1/sandboxes", "/console/session", "/v1/volumes"]:
        assert requests.get(server.url + path, timeout=10).status_code == 401, path
    forged = {"cordon_session": "0" * 64}
    assert requests.get(server.url + "/v1/sandboxes", cookies=forged, timeout=10).status_code == 401
    assert requests.post(server.url + "/console/login", json={"key": "cdn_wrong"}, timeout=10).status_code == 401


def _session(server, key: str) -> requests.Session:
    s = requests.Session()
    r = s.post(server.url + "/console/login", json={"key": key}, timeout=10)
    assert r.status_code == 200, r.text
    s.headers["X-Test-CSRF"] = r.json()["csrf"]
    return s


def test_a_change_needs_the_csrf_token_and_this_servers_origin(server):
    sid = new_sandbox(server)
    s = _session(server, server.api_key)
    csrf = s.headers.pop("X-Test-CSRF")
    url = server.url + f"/v1/sandboxes/{sid}"
    assert s.get(url, timeout=10).status_code == 200, "reading needs no token"
    assert s.delete(url, timeout=10).status_code == 403, "no token"
    assert s.delete(url, headers={"X-Cordon-CSRF": "0" * 64}, timeout=10).status_code == 403
    assert s.delete(url, headers={"X-Cordon-CSRF": csrf, "Origin": "http://evil.test"}, timeout=10).status_code == 403
    assert (
        requests.post(server.url + "/console/login", json={"key": server.api_key}, headers={"Origin": "http://evil.test"}, timeout=10).status_code
        == 403
    ), "a page elsewhere cannot sign a browser in"
    assert api(server, "GET", f"/v1/sandboxes/{sid}").json()["state"] == "running", "nothing was changed"
    assert s.delete(url, headers={"X-Cordon-CSRF": csrf, "Origin": server.url}, timeout=10).status_code == 204
    # Signed out: the cookie is worth nothing any more.
    assert s.delete(server.url + "/console/session", timeout=10).status_code == 204
    assert s.get(server.url + "/v1/sandboxes", timeout=10).status_code == 401


def test_one_keys_session_sees_nothing_of_anothers(server):
    mine = new_sandbox(server)
    other_key = server.new_key()
    s = _session(server, other_key)
    listed = s.get(server.url + "/v1/sandboxes", timeout=10).json()["sandboxes"]
    assert mine not in [x["id"] for x in listed]
    assert s.get(server.url + f"/v1/sandboxes/{mine}", timeout=10).status_code == 404
    assert s.get(server.url + f"/v1/sandboxes/{mine}/metrics", timeout=10).status_code == 404
    api(server, "DELETE", f"/v1/sandboxes/{mine}")


def test_the_audit_trail_is_searchable_and_a_tampered_record_is_flagged(server, page):
    sid = new_sandbox(server, metadata={"audit": "probe"})
    api(server, "POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["true"]})
    sign_in(page, server)
    page.goto(server.url + "/console#/audit")
    expect(page.locator("#chain")).to_contain_text("intact", timeout=10_000)
    page.fill("#audit-search", sid)
    page.click("#audit-go")
    rows = page.locator("#audit-records tr")
    expect(rows.first).to_contain_text(sid)
    assert all(sid in t for t in rows.all_inner_texts())
    assert any("sandbox.exec" in t for t in rows.all_inner_texts())

    # Someone with the disk edits a record in the middle of the log: the page says where.
    log = server.data_dir / "audit.jsonl"
    lines = log.read_text().splitlines()
    middle = len(lines) // 2
    assert '"event":"' in lines[middle]
    lines[middle] = lines[middle].replace('"event":"', '"event":"x', 1)
    log.write_text("\n".join(lines) + "\n")
    page.fill("#audit-search", "")
    page.click("#audit-go")
    expect(page.locator("#chain")).to_contain_text("BROKEN", timeout=10_000)
    expect(page.locator("#chain")).to_contain_text(f"line {middle + 1}")
    # Put it back: the session-wide server's log stays whole for the other tests.
    lines[middle] = lines[middle].replace('"event":"x', '"event":"', 1)
    log.write_text("\n".join(lines) + "\n")
    api(server, "DELETE", f"/v1/sandboxes/{sid}")


def test_images_and_state_list_the_keys_snapshots_volumes_and_secret_names_never_values(server, page):
    sid = new_sandbox(server)
    r = api(server, "POST", "/v1/volumes", {"name": "console-vol", "size": "64M"})
    assert r.status_code == 201, r.text
    r = api(server, "POST", f"/v1/sandboxes/{sid}/snapshots", {"name": "console-snap"})
    assert r.status_code == 201, r.text
    value = "console-secret-value-7f3a"
    r = api(server, "POST", "/v1/secrets", {"name": "console-secret", "value": value})
    assert r.status_code == 201, r.text
    # Another key's volume is not listed.
    other = server.new_key()
    r = api(server, "POST", "/v1/volumes", {"name": "other-vol"}, other)
    assert r.status_code == 201, r.text

    sign_in(page, server)
    page.goto(server.url + "/console#/resources")
    expect(page.locator('#volumes tr[data-name="console-vol"]')).to_contain_text("64", timeout=10_000)
    snap = page.locator('#snapshots tr[data-name="console-snap"]')
    expect(snap).to_contain_text(sid)
    expect(page.locator('#secrets tr[data-name="console-secret"]')).to_contain_text("1")
    expect(page.locator("#images")).to_be_visible()
    html = page.content()
    assert "other-vol" not in html
    assert value not in html

    for path in ("/v1/volumes/console-vol", "/v1/snapshots/console-snap", "/v1/secrets/console-secret"):
        api(server, "DELETE", path)
    api(server, "DELETE", "/v1/volumes/other-vol", key=other)
    api(server, "DELETE", f"/v1/sandboxes/{sid}")


def test_a_sandboxs_processes_are_listed_with_their_command_lines_as_text(server, page):
    sid = new_sandbox(server)
    marker = "<img src=x onerror=alert(1)>"
    r = api(server, "POST", f"/v1/sandboxes/{sid}/exec",
            {"cmd": ["sh", "-c", "exec python3 -c 'import time; time.sleep(300)' \"$0\"", marker], "background": True})
    assert r.status_code == 202, r.text
    # The API: pids inside the sandbox (its init is 1), the command line as the sandbox wrote it.
    deadline = time.monotonic() + 20
    rows = []
    while time.monotonic() < deadline:
        rows = api(server, "GET", f"/v1/sandboxes/{sid}/processes").json()["processes"]
        if any(marker in p["command"] for p in rows):
            break
        time.sleep(0.3)
    mine = [p for p in rows if marker in p["command"]]
    assert mine and mine[0]["command"].startswith("python3 -c"), rows
    assert any(p["pid"] == 1 for p in rows), rows
    assert all(p["pid"] < 100000 for p in rows)
    # Another key cannot list them.
    other = server.new_key()
    assert api(server, "GET", f"/v1/sandboxes/{sid}/processes", key=other).status_code == 404

    sign_in(page, server)
    page.goto(server.url + f"/console#/sandbox/{sid}")
    row = page.locator(f'#processes tr[data-pid="{mine[0]["pid"]}"]')
    expect(row).to_contain_text(marker, timeout=10_000)
    assert page.locator("#processes img").count() == 0
    api(server, "DELETE", f"/v1/sandboxes/{sid}")


def test_the_graph_spans_the_sandboxs_whole_life_as_the_server_sampled_it(server, page):
    """A busy spell that ended before the page was opened is still on its graph: the server
    samples every sandbox's cgroup, whoever watches."""
    sid = new_sandbox(server)
    busy = "import time\nt = time.time() + 6\nwhile time.time() < t: pass\n"
    r = api(server, "POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["python3", "-c", busy], "background": True})
    assert r.status_code == 202, r.text
    deadline = time.monotonic() + 40
    history: Dict[str, Any] = {}
    while time.monotonic() < deadline:
        history = api(server, "GET", f"/v1/sandboxes/{sid}/metrics/history").json()
        if history["source"] == "none":
            break
        s = history["samples"]
        peak = max((x["cpu_pct"] for x in s), default=0)
        # The spell is over: its peak, then two quiet points after it.
        if peak >= 20 and len(s) >= 3 and all(x["cpu_pct"] < 10 for x in s[-2:]):
            break
        time.sleep(0.5)
    assert history["source"] == "cgroup", history
    assert max(x["cpu_pct"] for x in history["samples"]) >= 20, history
    assert history["mem_total"] > 0 and all(x["mem_bytes"] > 0 for x in history["samples"]), history
    assert history["interval_ms"] == 2000

    sign_in(page, server)
    page.goto(server.url + f"/console#/sandbox/{sid}")
    use = page.locator("#use")
    expect(use).to_have_attribute("data-source", "server", timeout=10_000)
    assert float(use.get_attribute("data-peak") or 0) >= 20
    points = page.locator("svg.graph polyline.cpu").get_attribute("points") or ""
    ys = [float(p.split(",")[1]) for p in points.split()]
    assert len(ys) >= 3 and min(ys) <= 80, points  # the busy spell: above 20% of the height
    # The live table's one request has it, with its limits; another key's has nothing of it,
    # and cannot read its series.
    mine = {u["id"]: u for u in api(server, "GET", "/v1/usage").json()["sandboxes"]}
    assert sid in mine and mine[sid]["mem_total"] == history["mem_total"] and mine[sid]["processes"] >= 1, mine.get(sid)
    other = server.new_key()
    assert sid not in [u["id"] for u in api(server, "GET", "/v1/usage", key=other).json()["sandboxes"]]
    assert api(server, "GET", f"/v1/sandboxes/{sid}/metrics/history", key=other).status_code == 404
    api(server, "DELETE", f"/v1/sandboxes/{sid}")
