"""The console's host panel, for admin keys only: the server's API keys (list, create — the
secret shown once —, revoke) and the host's enforcement as `cordon check` reports it.

Attacks: a key that is not an admin key gets 403 from every admin route and sees no panel;
without a session, 401; an admin cannot revoke its own key; a key name holding markup renders
as text.
"""

from __future__ import annotations

import requests
from playwright.sync_api import expect


def bearer(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


def sign_in(page, server, key: str) -> None:
    page.goto(server.url + "/console")
    page.fill("#key", key)
    page.click("#signin")
    expect(page.locator("#who")).to_contain_text("key ")


def test_an_admin_lists_creates_and_revokes_keys_and_sees_the_hosts_enforcement(server, page):
    sign_in(page, server, server.api_key)
    page.click('#nav a[href="#/host"]')
    me = page.locator(f'#keys tr[data-key="{server.key_id}"]')
    expect(me).to_contain_text("admin", timeout=10_000)
    assert me.locator("button.revoke").count() == 0, "one's own key offers no revoke"
    hostile = "<b>ops</b><img src=x onerror=alert(1)>"
    page.fill("#key-name", hostile)
    page.click("#key-create")
    expect(page.locator("#key-secret code.secret")).to_contain_text("cdn_", timeout=10_000)
    secret = page.locator("#key-secret code.secret").inner_text().strip()
    row = page.locator("#keys tr[data-key]").filter(has_text="<b>ops</b>")
    expect(row).to_have_count(1)
    assert page.locator("#keys b, #keys img").count() == 0
    # The new key works, and is no admin key.
    assert requests.get(server.url + "/v1/sandboxes", headers=bearer(secret), timeout=10).status_code == 200
    assert requests.get(server.url + "/v1/keys", headers=bearer(secret), timeout=10).status_code == 403
    row.locator("button.revoke").click()
    expect(row.locator("td.state")).to_have_text("revoked", timeout=10_000)
    assert requests.get(server.url + "/v1/sandboxes", headers=bearer(secret), timeout=10).status_code == 401
    # The secret was shown once: the list never has it.
    listed = requests.get(server.url + "/v1/keys", headers=bearer(server.api_key), timeout=10).text
    assert secret not in listed and server.api_key not in listed

    # The host: cordon check's verdict and layers.
    expect(page.locator("#host-mode")).to_be_visible(timeout=30_000)
    layers = page.locator("#features tr[data-feature]")
    expect(layers.filter(has_text="seccomp")).to_have_count(1)
    assert layers.count() >= 5
    assert "null" not in page.locator("#enforcement").inner_text()
    r = requests.get(server.url + "/v1/host/enforcement", headers=bearer(server.api_key), timeout=60)
    assert r.status_code == 200 and r.json()["mode"] in ("full", "no_namespaces", "none")
    assert {"kernel", "features", "obstacles", "wasm_backend"} <= set(r.json()["report"])


def test_a_key_that_is_not_an_admin_key_gets_403_and_sees_no_host_panel(server, page):
    other = server.new_key()
    for method, path, body in [
        ("GET", "/v1/keys", None),
        ("POST", "/v1/keys", {"name": "mine"}),
        ("DELETE", f"/v1/keys/{server.key_id}", None),
        ("GET", "/v1/host/enforcement", None),
    ]:
        r = requests.request(method, server.url + path, json=body, headers=bearer(other), timeout=30)
        assert r.status_code == 403 and r.json()["error"]["code"] == "admin_only", (path, r.text)
        assert requests.request(method, server.url + path, json=body, timeout=10).status_code == 401, path
    # The admin key is still valid: nothing was revoked.
    assert requests.get(server.url + "/v1/keys", headers=bearer(server.api_key), timeout=10).status_code == 200
    sign_in(page, server, other)
    expect(page.locator('#nav a[href="#/host"]')).to_be_hidden()
    page.goto(server.url + "/console#/host")
    expect(page.locator("#keys .error")).to_contain_text("admin", timeout=10_000)


def test_an_admin_cannot_revoke_its_own_key_and_a_change_needs_the_csrf_token(server):
    r = requests.delete(server.url + f"/v1/keys/{server.key_id}", headers=bearer(server.api_key), timeout=10)
    assert r.status_code == 409, r.text
    s = requests.Session()
    login = s.post(server.url + "/console/login", json={"key": server.api_key}, timeout=10)
    assert login.status_code == 200
    # A refused request's body is left unread, and its connection closed: one each.
    close = {"Connection": "close"}
    assert s.post(server.url + "/v1/keys", json={"name": "csrf"}, headers=close, timeout=10).status_code == 403
    r = s.post(server.url + "/v1/keys", json={"name": "csrf"}, timeout=10,
               headers={"X-Cordon-CSRF": login.json()["csrf"], "Origin": "http://evil.test", **close})
    assert r.status_code == 403
    names = [k["name"] for k in requests.get(server.url + "/v1/keys", headers=bearer(server.api_key), timeout=10).json()["keys"]]
    assert "csrf" not in names
