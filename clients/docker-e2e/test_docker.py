"""docker-py, unchanged, against cordon's Docker door: the seed guide's `containers.run`
pattern, detach/wait/logs, exec, archives, the error types docker-py raises, and attacks —
powers a client asks for that cordon never grants (each refused, nothing started, checked from
outside), hostile archives (the host checked from outside), a fork bomb and an OOM contained.
"""

from __future__ import annotations

import io
import math
import os
import shutil
import stat
import subprocess
import tarfile
import time
from pathlib import Path

import docker
import pytest
from docker.errors import APIError, ContainerError, ImageNotFound, NotFound

SH = ["sh", "-c"]


def test_the_socket_is_mode_0660_and_answers_ping_version_and_info(client, dserver):
    assert stat.S_IMODE(os.stat(dserver.socket).st_mode) == 0o660
    assert stat.S_ISSOCK(os.stat(dserver.socket).st_mode)
    assert client.ping()
    v = client.version()
    assert v["ApiVersion"] >= "1.41" and v["Os"] == "linux"
    assert "cordon" in client.info()["ServerVersion"]


def test_the_tcp_listener_refuses_a_client_without_the_api_key(dserver):
    anon = docker.DockerClient(base_url=f"tcp://{dserver.tcp}", version="1.41")
    with pytest.raises(APIError) as e:
        anon.ping()
    assert e.value.response.status_code == 401
    keyed = docker.DockerClient(base_url=f"tcp://{dserver.tcp}", version="1.41")
    keyed.api.headers["Authorization"] = f"Bearer {dserver.server.api_key}"
    assert keyed.ping()


def test_the_seed_guides_containers_run_returns_the_output_and_removes_the_container(client, image):
    out = client.containers.run(
        image,
        SH + ["echo hello from cordon; echo $((6*7)) > /tmp/x; cat /tmp/x"],
        mem_limit="512m",
        nano_cpus=1_000_000_000,
        pids_limit=64,
        network_disabled=True,
        read_only=True,
        tmpfs={"/tmp": ""},
        remove=True,
    )
    assert out == b"hello from cordon\n42\n"
    assert client.containers.list(all=True) == []


def test_a_failing_command_raises_ContainerError_with_its_stderr(client, image):
    with pytest.raises(ContainerError) as e:
        client.containers.run(image, SH + ["echo oops >&2; exit 3"], remove=True)
    assert e.value.exit_status == 3
    assert b"oops" in e.value.stderr


def test_detach_wait_logs_and_inspect_say_how_it_ended(client, image):
    c = client.containers.run(
        image, SH + ["echo out; echo err >&2; exit 7"], detach=True, labels={"suite": "docker-e2e"},
        environment={"GREETING": "hi"}, working_dir="/tmp",
    )
    assert c.wait(timeout=60)["StatusCode"] == 7
    assert c.logs(stdout=True, stderr=False) == b"out\n"
    assert c.logs(stdout=False, stderr=True) == b"err\n"
    c.reload()
    assert c.status == "exited"
    assert c.attrs["State"]["ExitCode"] == 7
    assert c.attrs["State"]["OOMKilled"] is False
    assert c.labels == {"suite": "docker-e2e"}
    assert [x.id for x in client.containers.list(all=True, filters={"label": "suite=docker-e2e"})] == [c.id]
    assert client.containers.list() == []  # not running
    c.remove()
    with pytest.raises(NotFound):
        client.containers.get(c.id)


def test_logs_tail_gives_the_last_lines_only(client, image):
    c = client.containers.run(image, SH + ["for i in 1 2 3 4 5; do echo line$i; done; echo err >&2"], detach=True)
    assert c.wait(timeout=60)["StatusCode"] == 0
    # The two streams are read from two pipes: which of "err" and "line5" came last varies.
    assert len(c.logs(tail=2).splitlines()) == 2
    assert c.logs(stdout=False, tail=1) == b"err\n"
    assert c.logs(stderr=False, tail=3) == b"line3\nline4\nline5\n"
    assert c.logs(tail=0) == b""
    assert c.logs(tail="all").count(b"\n") == 6
    c.remove()


def test_logs_follow_streams_until_the_container_exits(client, image):
    c = client.containers.run(image, SH + ["for i in 1 2 3; do echo $i; sleep 0.2; done"], detach=True)
    assert b"".join(c.logs(stream=True, follow=True)) == b"1\n2\n3\n"
    c.remove()


def test_exec_run_runs_in_the_running_container_with_its_exit_code(client, image):
    c = client.containers.run(image, ["busybox", "sleep", "60"], detach=True, environment={"FROM_CREATE": "yes"})
    assert c.status in ("created", "running")
    r = c.exec_run(SH + ["echo $FROM_CREATE $((6*7))"])
    assert (r.exit_code, r.output) == (0, b"yes 42\n")
    assert c.exec_run(SH + ["exit 5"]).exit_code == 5
    c.kill()
    assert c.wait(timeout=30)["StatusCode"] == 137
    c.remove()


def test_put_archive_then_get_archive_round_trips_files(client, image):
    c = client.containers.run(image, ["busybox", "sleep", "60"], detach=True)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        data = b"print('hi')\n"
        info = tarfile.TarInfo("pkg/main.py")
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    assert c.put_archive("/tmp", buf.getvalue())
    assert c.exec_run(["busybox", "cat", "/tmp/pkg/main.py"]).output == b"print('hi')\n"
    stream, st = c.get_archive("/tmp/pkg")
    assert st["name"] == "pkg"
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as t:
        assert t.extractfile("pkg/main.py").read() == b"print('hi')\n"
    c.remove(force=True)


def test_unknown_images_and_containers_raise_docker_pys_not_found_errors(client):
    with pytest.raises(ImageNotFound):
        client.images.get("127.0.0.1:1/no/such:image")
    with pytest.raises(ImageNotFound):
        client.containers.create("127.0.0.1:1/no/such:image", ["true"])
    with pytest.raises(NotFound):
        client.containers.get("no-such-container")


def test_images_list_inspect_and_remove(client, image):
    names = [t for i in client.images.list() for t in i.tags]
    assert image in names
    img = client.images.get(image)
    assert img.attrs["Config"]["Cmd"] == ["/bin/sh"]


REFUSED = {
    "privileged": dict(privileged=True),
    "cap_add": dict(cap_add=["SYS_ADMIN"]),
    "network_mode host": dict(network_mode="host"),
    "pid_mode host": dict(pid_mode="host"),
    "ipc_mode host": dict(ipc_mode="host"),
    "bind of /": dict(volumes={"/": {"bind": "/host", "mode": "rw"}}),
    "bind of /etc": dict(volumes={"/etc": {"bind": "/hostetc", "mode": "ro"}}),
    "devices /dev/kmsg": dict(devices=["/dev/kmsg:/dev/kmsg:rwm"]),
    "seccomp unconfined": dict(security_opt=["seccomp=unconfined"]),
    "sysctls": dict(sysctls={"net.ipv4.ip_forward": "1"}),
}


@pytest.mark.parametrize("power", sorted(REFUSED))
def test_a_power_cordon_never_grants_is_refused_naming_the_field_and_nothing_starts(client, dserver, image, power):
    created = dserver.sandboxes_created()
    with pytest.raises(APIError) as e:
        client.containers.run(image, SH + ["echo should not run"], remove=True, **REFUSED[power])
    assert e.value.response.status_code in (400, 403), e.value
    field = {"privileged": "Privileged", "cap_add": "CapAdd", "network_mode host": "NetworkMode",
             "pid_mode host": "PidMode", "ipc_mode host": "IpcMode", "devices /dev/kmsg": "Devices",
             "seccomp unconfined": "SecurityOpt", "sysctls": "Sysctls"}.get(power, "binds")
    assert field in str(e.value.explanation), e.value.explanation
    assert client.containers.list(all=True) == []
    assert dserver.sandboxes_created() == created


def test_a_bind_outside_the_bind_roots_is_refused_and_one_inside_is_granted(client, dserver, image, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("host secret")
    with pytest.raises(APIError) as e:
        client.containers.run(image, ["busybox", "cat", "/data/secret"], volumes={str(outside): {"bind": "/data", "mode": "ro"}}, remove=True)
    assert "bind roots" in str(e.value.explanation)
    # A symlink under an allowed root that leads out is resolved first: refused too.
    link = dserver.bind_root / "escape"
    link.symlink_to(outside)
    with pytest.raises(APIError):
        client.containers.run(image, ["busybox", "cat", "/data/secret"], volumes={str(link): {"bind": "/data", "mode": "ro"}}, remove=True)
    inside = dserver.bind_root / "project"
    inside.mkdir()
    (inside / "input.txt").write_text("from the host\n")
    out = client.containers.run(image, ["busybox", "cat", "/data/input.txt"], volumes={str(inside): {"bind": "/data", "mode": "ro"}}, remove=True)
    assert out == b"from the host\n"
    # Inspect shows the bind as Docker does (docker-py's own VolumeBindTest checks it).
    c = client.containers.run(image, ["true"], volumes={str(inside): {"bind": "/data", "mode": "ro"}}, detach=True)
    assert [(m["Source"], m["Destination"], m["RW"]) for m in c.attrs["Mounts"]] == [(str(inside), "/data", False)]
    c.remove(force=True)


def _tar(*members: tarfile.TarInfo, data: bytes = b"pwned\n") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for m in members:
            if m.isreg():
                m.size = len(data)
                t.addfile(m, io.BytesIO(data))
            else:
                t.addfile(m)
    return buf.getvalue()


def test_hostile_archives_change_nothing_on_the_host(client, image, tmp_path):
    target = tmp_path / "host-dir"
    target.mkdir()
    c = client.containers.run(image, ["busybox", "sleep", "60"], detach=True)
    # An absolute name and a `..` climb: folded under the destination, inside the sandbox.
    absolute = tarfile.TarInfo(str(target / "absolute"))
    climb = tarfile.TarInfo("../" * 20 + str(target / "climb").lstrip("/"))
    assert c.put_archive("/tmp", _tar(absolute, climb))
    # A symlink whose target climbs out of the root, then a file written through it:
    # refused as a whole.
    link = tarfile.TarInfo("out")
    link.type = tarfile.SYMTYPE
    link.linkname = "../" * 20 + str(target).lstrip("/")
    through = tarfile.TarInfo("out/through")
    with pytest.raises(APIError) as e:
        c.put_archive("/tmp", _tar(link, through))
    assert "climbs above" in str(e.value.explanation)
    # One to the host directory's absolute path names the container's own path of that
    # name: the file written through it lands in the container, never on the host.
    link.linkname = str(target)
    assert c.put_archive("/tmp", _tar(link, through))
    # A link into /proc (where magic links lead out) is refused.
    magic = tarfile.TarInfo("magic")
    magic.type = tarfile.SYMTYPE
    magic.linkname = "/proc/1/root"
    with pytest.raises(APIError):
        c.put_archive("/tmp", _tar(magic))
    hard = tarfile.TarInfo("hard")
    hard.type = tarfile.LNKTYPE
    hard.linkname = "/etc/passwd"
    with pytest.raises(APIError):
        c.put_archive("/tmp", _tar(hard))
    assert list(target.iterdir()) == []
    assert c.exec_run(["busybox", "cat", f"/tmp{target}/absolute"]).output == b"pwned\n"
    assert c.exec_run(["busybox", "cat", "/tmp/out/through"]).output == b"pwned\n"
    assert c.exec_run(["busybox", "cat", f"{target}/through"]).output == b"pwned\n"
    assert c.exec_run(["busybox", "ls", "/tmp/magic"]).exit_code != 0
    c.remove(force=True)


def test_put_archive_extracts_symlinks_that_stay_inside_the_container(client, image):
    c = client.containers.run(image, ["busybox", "sleep", "60"], detach=True)
    absolute = tarfile.TarInfo("app/greeting")
    absolute.type = tarfile.SYMTYPE
    absolute.linkname = "/etc/greeting"
    relative = tarfile.TarInfo("app/rel")
    relative.type = tarfile.SYMTYPE
    relative.linkname = "../../etc/greeting"
    folder = tarfile.TarInfo("app")
    folder.type = tarfile.DIRTYPE
    assert c.put_archive("/tmp", _tar(folder, absolute, relative))
    for path in ("/tmp/app/greeting", "/tmp/app/rel"):
        assert c.exec_run(["busybox", "cat", path]).output == b"hello from the image\n"
    assert c.exec_run(["busybox", "readlink", "/tmp/app/rel"]).output == b"../../etc/greeting\n"
    c.remove(force=True)


def test_an_oom_is_contained_and_inspect_says_OOMKilled_with_exit_137(client, image):
    c = client.containers.run(
        image, SH + ["x=aaaaaaaaaaaaaaaa; while true; do x=$x$x; done"], mem_limit="64m", detach=True
    )
    code = c.wait(timeout=120)["StatusCode"]
    c.reload()
    assert c.attrs["State"]["ExitCode"] == code != 0
    if os.geteuid() == 0:
        # As root the memory cgroup holds it and its OOM killer ends it, as Docker reports.
        assert (code, c.attrs["State"]["OOMKilled"]) == (137, True)
    else:
        # Rootless, without a delegated memory cgroup, the address-space rlimit holds it:
        # its allocation fails and the shell exits on its own.
        assert c.attrs["State"]["OOMKilled"] is False
    c.remove()


def test_a_fork_bomb_is_contained_by_the_pids_limit(client, image):
    t0 = time.monotonic()
    c = client.containers.run(
        image,
        SH + ["bomb() { bomb | bomb & }; bomb; sleep 3; echo still here"],
        pids_limit=64,
        detach=True,
    )
    c.wait(timeout=120)
    c.remove(force=True)
    assert time.monotonic() - t0 < 120
    # The server still serves, and a new container runs.
    assert client.containers.run(image, SH + ["echo after"], remove=True) == b"after\n"


def test_an_output_flood_is_cut_at_the_output_limit_and_the_server_stays_well(client, image):
    c = client.containers.run(image, SH + ["busybox yes flood | busybox head -c 200000000; echo done >&2"], detach=True)
    assert c.wait(timeout=120)["StatusCode"] == 0
    c.reload()
    assert c.attrs["LogOutputTruncated"] is True
    assert len(c.logs(stdout=True, stderr=False)) < 64 << 20
    c.remove()
    assert client.containers.run(image, SH + ["echo fine"], remove=True) == b"fine\n"


def test_the_docker_cli_runs_lists_and_shows_images_against_the_socket(dserver, image):
    if shutil.which("docker") is None:
        pytest.skip("the docker CLI is not installed: its part of the suite is skipped")
    env = dict(os.environ, DOCKER_HOST=f"unix://{dserver.socket}", DOCKER_CONFIG=str(dserver.bind_root.parent / "cli"))
    run = lambda *a: subprocess.run(["docker", *a], env=env, capture_output=True, text=True, timeout=120)  # noqa: E731
    r = run("run", "--rm", image, "sh", "-c", "echo hi from the cli")
    assert r.returncode == 0 and r.stdout == "hi from the cli\n", r
    r = run("ps", "-a")
    assert r.returncode == 0 and "CONTAINER ID" in r.stdout, r
    r = run("images")
    assert r.returncode == 0 and image.rsplit(":", 1)[0] in r.stdout, r
    r = run("run", "--rm", "--privileged", image, "true")
    assert r.returncode != 0 and "Privileged" in r.stderr, r
    r = run("run", "-d", "--name", "cli-box", image, "busybox", "sleep", "60")
    assert r.returncode == 0, r
    r = run("exec", "cli-box", "sh", "-c", "echo in-exec; echo hi > /tmp/from-exec")
    assert (r.returncode, r.stdout) == (0, "in-exec\n"), r
    dest = dserver.bind_root.parent / "cli-cp"
    r = run("cp", "cli-box:/tmp/from-exec", str(dest))
    assert r.returncode == 0 and dest.read_text() == "hi\n", r
    r = run("rm", "-f", "cli-box")
    assert r.returncode == 0, r


def test_read_only_keeps_the_root_unwritable_and_tmp_writable(client, image):
    probe = "echo ok > /tmp/f && cat /tmp/f; if echo x > /etc/new 2>/dev/null; then echo root-writable; else echo root-read-only; fi"
    assert client.containers.run(image, SH + [probe], remove=True) == b"ok\nroot-writable\n"
    out = client.containers.run(image, SH + [probe], read_only=True, tmpfs={"/tmp": ""}, remove=True)
    assert out == b"ok\nroot-read-only\n"


def test_user_runs_the_container_as_that_id_inside_and_an_unprivileged_host_id_outside(client, dserver, image):
    shared = dserver.bind_root / "user-out"
    shared.mkdir()
    shared.chmod(0o777)
    bind = {str(shared): {"bind": "/data", "mode": "rw"}}
    probe = "id -u; id -g; echo x > /data/$0; busybox stat -c %u:%g /data/$0"
    c = client.containers.run(image, SH + [probe + "; exec busybox sleep 60", "f"], user="1234:2345", volumes=bind, detach=True)
    deadline = time.monotonic() + 30
    while c.logs() != b"1234\n2345\n1234:2345\n" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert c.logs() == b"1234\n2345\n1234:2345\n"
    # From outside: every process of the container runs as an unprivileged host id (neither
    # root nor 1234) ...
    pids = [int(row[0]) for row in c.top()["Processes"]]
    assert pids
    for pid in pids:
        status = Path(f"/proc/{pid}/status").read_text()
        uids = next(line.split()[1:] for line in status.splitlines() if line.startswith("Uid:"))
        for uid in map(int, uids):
            assert uid != 0 and uid != 1234, status
            assert uid >= 2_000_000_000 if os.geteuid() == 0 else uid == os.geteuid()
    c.remove(force=True)
    # ... and the file it wrote through the bind is owned on the host as any container's is.
    assert client.containers.run(image, SH + ["echo x > /data/g"], volumes=bind, remove=True) == b""
    assert os.stat(shared / "f").st_uid == os.stat(shared / "g").st_uid


def test_exec_runs_as_the_containers_user_and_another_user_is_refused_naming_the_field(client, image):
    c = client.containers.run(image, ["busybox", "sleep", "60"], user="1234:2345", detach=True)
    assert c.exec_run(["busybox", "id", "-u"]).output == b"1234\n"
    assert c.exec_run(["busybox", "id", "-u"], user="1234:2345").output == b"1234\n"
    with pytest.raises(APIError) as e:
        c.exec_run(["busybox", "id", "-u"], user="0")
    assert "User" in str(e.value.explanation)
    c.remove(force=True)


def test_a_user_the_image_does_not_list_is_refused_naming_the_field_and_nothing_starts(client, dserver, image):
    created = dserver.sandboxes_created()
    with pytest.raises(APIError) as e:
        client.containers.run(image, ["true"], user="nosuchuser", remove=True)
    assert "User" in str(e.value.explanation) and "nosuchuser" in str(e.value.explanation)
    assert dserver.sandboxes_created() == created


def _demux(sock) -> bytes:
    """Everything a hijacked multiplexed stream carries, stdout and stderr together."""
    from docker.utils.socket import frames_iter

    return b"".join(data for _, data in frames_iter(sock, False))


def test_attach_socket_feeds_stdin_to_a_container_created_with_stdin_open(client, image):
    import socket

    c = client.containers.create(image, SH + ["read line; echo got:$line"], stdin_open=True)
    sock = c.attach_socket(params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
    c.start()
    sock._sock.sendall(b"hello over stdin\n")
    sock._sock.shutdown(socket.SHUT_WR)
    assert _demux(sock) == b"got:hello over stdin\n"
    assert c.wait(timeout=60)["StatusCode"] == 0
    c.remove()


def test_exec_with_stdin_reads_what_the_client_sends_until_it_closes(client, image):
    import socket

    c = client.containers.run(image, ["busybox", "sleep", "60"], detach=True)
    _, sock = c.exec_run(["busybox", "wc", "-c"], stdin=True, socket=True)
    sock._sock.sendall(b"12345")
    sock._sock.shutdown(socket.SHUT_WR)
    assert _demux(sock).strip() == b"5"
    c.remove(force=True)


def test_tty_runs_the_command_on_a_terminal(client, image):
    out = client.containers.run(image, ["busybox", "tty"], tty=True, remove=True)
    assert out.startswith(b"/dev/pts/"), out


def test_an_exec_on_a_terminal_is_framed_as_its_start_request_asks(client, image):
    c = client.containers.run(image, ["busybox", "sleep", "60"], detach=True)
    api = client.api
    # Created with a tty, started without: Docker frames the terminal's output as stdout.
    eid = api.exec_create(c.id, ["busybox", "sh", "-c", "echo hello out; echo hello err >&2"], tty=True)
    assert api.exec_start(eid) == b"hello out\r\nhello err\r\n"
    eid = api.exec_create(c.id, ["busybox", "tty"], tty=True)
    assert api.exec_start(eid, tty=True).startswith(b"/dev/pts/")
    c.remove(force=True)


def test_the_docker_cli_pipes_stdin_with_run_i(dserver, image):
    if shutil.which("docker") is None:
        pytest.skip("the docker CLI is not installed: its part of the suite is skipped")
    env = dict(os.environ, DOCKER_HOST=f"unix://{dserver.socket}", DOCKER_CONFIG=str(dserver.bind_root.parent / "cli"))
    r = subprocess.run(
        ["docker", "run", "-i", "--rm", image, "busybox", "wc", "-l"],
        input="a\nb\nc\n", env=env, capture_output=True, text=True, timeout=120,
    )
    assert (r.returncode, r.stdout.strip()) == (0, "3"), r


def _docker_archive(
    tag: str,
    applets: tuple[str, ...] = ("sh", "timeout", "id", "cat", "echo", "grep"),
    user: str | None = None,
    dirs: tuple[str, ...] = (),
) -> bytes:
    """A `docker save` archive made here: one layer with busybox, links to it for `applets`,
    and an /etc/passwd and /etc/group that name a user `app` (4321:4322) and a group `staff`
    (50); its config names `user` as the image's `User` when given; `dirs` are made too."""
    import hashlib
    import json
    import platform

    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as t:
        for d in ("bin", "etc", *dirs):
            m = tarfile.TarInfo(d)
            m.type, m.mode = tarfile.DIRTYPE, 0o755
            t.addfile(m)
        busybox = Path(shutil.which("busybox") or "/bin/busybox").read_bytes()
        files = {
            "bin/busybox": (busybox, 0o755),
            "etc/passwd": (b"root:x:0:0:root:/root:/bin/sh\napp:x:4321:4322:app:/home/app:/bin/sh\n", 0o644),
            "etc/group": (b"root:x:0:\nstaff:x:50:\n", 0o644),
        }
        for name, (data, mode) in files.items():
            m = tarfile.TarInfo(name)
            m.size, m.mode = len(data), mode
            t.addfile(m, io.BytesIO(data))
        for applet in applets:
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type, link.linkname = tarfile.SYMTYPE, "busybox"
            t.addfile(link)
    layer_bytes = layer.getvalue()
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    config = json.dumps(
        {
            "architecture": arch,
            "os": "linux",
            "config": {"Cmd": ["/bin/sh"], "Env": ["PATH=/bin"], **({"User": user} if user else {})},
            "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer_bytes).hexdigest()]},
        }
    ).encode()
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [tag], "Layers": ["layer/layer.tar"]}]).encode()
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as t:
        for name, data in (("layer/layer.tar", layer_bytes), (config_name, config), ("manifest.json", manifest)):
            m = tarfile.TarInfo(name)
            m.size = len(data)
            t.addfile(m, io.BytesIO(data))
    return out.getvalue()


@pytest.fixture(scope="session")
def loaded(client) -> str:
    """An image loaded through `images.load` (docker-py's), by its tag."""
    tag = "cordon-test/loaded:1"
    images = client.images.load(_docker_archive(tag))
    assert any(tag in i.tags for i in images), [i.tags for i in images]
    return tag


def test_images_load_takes_a_docker_save_archive_and_save_is_a_clear_501(client, loaded):
    assert client.containers.run(loaded, ["sh", "-c", "echo from a loaded image"], remove=True) == b"from a loaded image\n"
    with pytest.raises(APIError) as e:
        b"".join(client.images.get(loaded).save())
    assert e.value.response.status_code == 501 and "save" in str(e.value.explanation)
    with pytest.raises(APIError):
        client.images.load(b"not a tar archive")


def test_user_names_resolve_in_the_images_own_passwd_and_group(client, loaded):
    probe = ["sh", "-c", "id -u; id -g"]
    assert client.containers.run(loaded, probe, user="app", remove=True) == b"4321\n4322\n"
    assert client.containers.run(loaded, probe, user="app:staff", remove=True) == b"4321\n50\n"
    assert client.containers.run(loaded, probe, user="root", remove=True) == b"0\n0\n"
    # Root inside holds no capability: the host's view of what it may do is the sandbox's.
    out = client.containers.run(loaded, ["sh", "-c", "grep CapEff /proc/self/status"], user="root", remove=True)
    assert out.split() == [b"CapEff:", b"0000000000000000"]


def test_without_a_user_a_container_runs_as_the_user_its_images_config_names(client, dserver):
    tag = "cordon-test/app-user:1"
    client.images.load(_docker_archive(tag, user="app"))
    probe = ["sh", "-c", "id -u; id -g"]
    c = client.containers.run(tag, probe, detach=True)
    assert c.wait(timeout=60)["StatusCode"] == 0
    assert c.logs() == b"4321\n4322\n"
    # As Docker's daemon does, inspect shows the image's User filled in.
    assert c.attrs["Config"]["User"] == "app"
    c.remove()
    # The create's own User still wins over the image's.
    assert client.containers.run(tag, probe, user="root", remove=True) == b"0\n0\n"
    # A User the image's config names but its /etc/passwd does not list: refused, nothing made.
    bad = "cordon-test/ghost-user:1"
    client.images.load(_docker_archive(bad, user="ghost"))
    created = dserver.sandboxes_created()
    with pytest.raises(APIError) as e:
        client.containers.run(bad, probe, remove=True)
    assert "User" in str(e.value.explanation) and "ghost" in str(e.value.explanation)
    assert dserver.sandboxes_created() == created


def test_an_image_that_names_no_user_runs_as_its_root_inside_with_no_capability(client, loaded):
    c = client.containers.run(loaded, ["sh", "-c", "id -u; id -g; grep CapEff /proc/self/status"], detach=True)
    assert c.wait(timeout=60)["StatusCode"] == 0
    assert c.logs().split() == [b"0", b"0", b"CapEff:", b"0000000000000000"]
    assert c.attrs["Config"]["User"] == ""
    c.remove()


def test_autogens_docker_code_executor_runs_a_code_block_through_the_socket(dserver, loaded, monkeypatch):
    """AutoGen's published Docker executor (autogen-ext[docker]), unchanged: it creates a
    container with a tty and the work dir bound at /workspace, then runs each code block with
    `exec_run(["timeout", "60", "sh", FILE])`."""
    executor_mod = pytest.importorskip(
        "autogen_ext.code_executors.docker",
        reason="autogen-ext[docker] is not installed (pip install -r clients/docker-e2e/requirements-autogen.txt)",
    )
    import asyncio

    from autogen_core import CancellationToken
    from autogen_core.code_executor import CodeBlock

    monkeypatch.setenv("DOCKER_HOST", f"unix://{dserver.socket}")
    work = dserver.bind_root / "autogen"
    work.mkdir()
    work.chmod(0o777)

    async def run() -> tuple[int, str]:
        ex = executor_mod.DockerCommandLineCodeExecutor(image=loaded, work_dir=work, timeout=60)
        await ex.start()
        try:
            r = await ex.execute_code_blocks(
                [CodeBlock(code="echo hello from autogen; echo $((6*7))", language="sh")], CancellationToken()
            )
            return r.exit_code, r.output
        finally:
            await ex.stop()

    code, output = asyncio.run(run())
    assert (code, output.strip()) == (0, "hello from autogen\n42")


def _until(check, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_restart_runs_the_command_again_in_the_same_container(client, image):
    c = client.containers.run(image, SH + ["echo run >> /tmp/runs; busybox cat /tmp/runs; exec busybox sleep 60"], detach=True)
    _until(lambda: c.logs() == b"run\n", "the first run's output")
    c.reload()
    first_start = c.attrs["State"]["StartedAt"]
    c.restart(timeout=1)
    c.reload()
    assert c.status == "running" and c.attrs["State"]["StartedAt"] != first_start
    # Its files are kept (the second run finds the first's line) and so is its log.
    _until(lambda: c.logs() == b"run\nrun\nrun\n", "the second run's output")
    c.remove(force=True)


def test_pause_freezes_every_process_and_unpause_thaws_them(client, image):
    c = client.containers.run(image, SH + ["while :; do echo tick; busybox sleep 0.1; done"], detach=True)
    _until(lambda: c.logs().count(b"tick") >= 2, "ticks")
    c.pause()
    c.reload()
    assert (c.status, c.attrs["State"]["Paused"], c.attrs["State"]["Running"]) == ("paused", True, True)
    assert [x.id for x in client.containers.list(filters={"status": "paused"})] == [c.id]
    time.sleep(0.5)
    frozen = c.logs()
    time.sleep(1)
    assert c.logs() == frozen
    with pytest.raises(APIError) as e:
        c.pause()
    assert e.value.response.status_code == 409
    c.unpause()
    c.reload()
    assert (c.status, c.attrs["State"]["Paused"]) == ("running", False)
    _until(lambda: len(c.logs()) > len(frozen), "ticks after unpause")
    with pytest.raises(APIError) as e:
        c.unpause()
    assert e.value.response.status_code == 409
    c.remove(force=True)


def test_rename_changes_the_name_every_lookup_uses_and_a_taken_name_is_a_conflict(client, image):
    a = client.containers.create(image, ["true"], name="before-rename")
    client.containers.create(image, ["true"], name="taken-name")
    a.rename("after-rename")
    assert client.containers.get("after-rename").id == a.id
    assert client.containers.get(a.id).name == "after-rename"
    with pytest.raises(NotFound):
        client.containers.get("before-rename")
    with pytest.raises(APIError) as e:
        a.rename("taken-name")
    assert e.value.response.status_code == 409
    with pytest.raises(APIError) as e:
        a.rename("../escape")
    assert e.value.response.status_code == 400
    assert client.containers.get(a.id).name == "after-rename"


def test_containers_prune_removes_the_stopped_ones_and_keeps_the_running(client, image):
    done = client.containers.run(image, SH + ["echo data > /tmp/f"], detach=True)
    assert done.wait(timeout=60)["StatusCode"] == 0
    created = client.containers.create(image, ["true"], labels={"keep": "yes"})
    live = client.containers.run(image, ["busybox", "sleep", "60"], detach=True)
    # A filter it does not understand is refused: a prune never removes more than asked.
    with pytest.raises(APIError) as e:
        client.containers.prune(filters={"until": "10m"})
    assert e.value.response.status_code == 400
    r = client.containers.prune(filters={"label!": "keep=yes"})
    assert r["ContainersDeleted"] == [done.id]
    r = client.containers.prune()
    assert r["ContainersDeleted"] == [created.id]
    assert [c.id for c in client.containers.list(all=True)] == [live.id]


def test_images_prune_removes_images_that_no_name_and_no_container_use(client):
    tag = "cordon-test/prune:1"
    first = client.images.load(_docker_archive(tag, applets=("sh",)))[0].id
    second = client.images.load(_docker_archive(tag, applets=("sh", "echo")))[0].id
    assert first != second
    r = client.images.prune()
    deleted = [d.get("Deleted") for d in r["ImagesDeleted"] or []]
    assert first in deleted and second not in deleted, r
    with pytest.raises(ImageNotFound):
        client.images.get(first)
    assert client.images.get(tag).id == second
    with pytest.raises(APIError) as e:
        client.images.prune(filters={"label": "x"})
    assert e.value.response.status_code == 400


def test_update_is_a_clear_501_and_the_limits_stay(client, image):
    c = client.containers.run(image, ["busybox", "sleep", "60"], mem_limit="64m", detach=True)
    with pytest.raises(APIError) as e:
        c.update(mem_limit="32m")
    assert e.value.response.status_code == 501 and "update" in str(e.value.explanation)
    c.reload()
    assert c.attrs["HostConfig"]["Memory"] == 64 * 1024 * 1024
    c.remove(force=True)


def test_stats_has_the_sections_docker_pys_callers_read(client, image):
    c = client.containers.run(image, ["busybox", "sleep", "60"], detach=True)
    s = c.stats(stream=False)
    for key in ("read", "networks", "precpu_stats", "cpu_stats", "memory_stats", "blkio_stats", "pids_stats"):
        assert key in s, s
    c.remove(force=True)


def test_another_api_keys_client_sees_none_of_a_callers_containers_or_execs(client, dserver, image):
    """Attack: a client with another key (here the TCP listener's, against the socket's local
    caller) names a container or exec it does not own, by id, id prefix and name."""
    c = client.containers.run(image, ["busybox", "sleep", "60"], detach=True, name="not-yours")
    eid = client.api.exec_create(c.id, ["busybox", "true"])["Id"]
    other = docker.DockerClient(base_url=f"tcp://{dserver.tcp}", version="1.41")
    other.api.headers["Authorization"] = f"Bearer {dserver.server.api_key}"
    assert other.containers.list(all=True) == []
    assert other.info()["Containers"] == 0 and client.info()["Containers"] == 1
    for ref in (c.id, c.id[:12], "not-yours"):
        with pytest.raises(NotFound):
            other.containers.get(ref)
        with pytest.raises(NotFound):
            other.api.kill(ref)
        with pytest.raises(NotFound):
            other.api.remove_container(ref, force=True)
        with pytest.raises(NotFound):
            other.api.exec_create(ref, ["busybox", "true"])
    with pytest.raises(NotFound):
        other.api.exec_inspect(eid)
    with pytest.raises(NotFound):
        other.api.exec_start(eid)
    assert not other.containers.prune()["ContainersDeleted"]
    c.reload()
    assert c.status == "running"
    assert client.api.exec_inspect(eid)["Running"] is False
    c.remove(force=True)


def test_kill_answers_once_the_container_has_exited(client, image):
    c = client.containers.run(image, ["busybox", "sleep", "60"], detach=True)
    c.kill()
    # No wait: as from Docker's daemon, an inspect right after the answer sees the exit.
    c.reload()
    assert (c.status, c.attrs["State"]["ExitCode"]) == ("exited", 137)


def test_logs_since_until_and_timestamps_select_by_when_each_line_came(client, image):
    import datetime
    import re

    c = client.containers.run(image, SH + ["echo early; busybox sleep 2; echo late"], detach=True)
    _until(lambda: c.logs() == b"early\n", "the first line")
    # Whole seconds (docker-py 5 sends no fraction): "late" comes 2 s after "early", so at
    # least a second after this.
    between = math.ceil(time.time())
    assert c.wait(timeout=60)["StatusCode"] == 0
    assert c.logs(until=between) == b"early\n"
    assert c.logs(since=between) == b"late\n"
    assert c.logs(since=datetime.datetime.now() + datetime.timedelta(seconds=60)) == b""
    stamped = c.logs(timestamps=True).decode().splitlines()
    assert [line.split(" ", 1)[1] for line in stamped] == ["early", "late"]
    for line in stamped:
        assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z ", line), line
    c.remove()


def test_log_config_and_runtime_read_back_as_given_and_an_unknown_driver_is_refused(client, dserver, image):
    from docker.types import LogConfig

    log = LogConfig(type="json-file", config={"max-file": "3"})
    c = client.containers.create(image, ["true"], log_config=log)
    assert c.attrs["HostConfig"]["LogConfig"] == {"Type": "json-file", "Config": {"max-file": "3"}}
    assert c.attrs["HostConfig"]["Runtime"] == "runc"
    created = dserver.sandboxes_created()
    with pytest.raises(APIError) as e:
        client.containers.create(image, ["true"], log_config=LogConfig(type="syslog"))
    assert e.value.response.status_code == 400 and "syslog" in str(e.value.explanation)
    assert dserver.sandboxes_created() == created


def test_a_restart_policy_is_refused_naming_the_field_not_silently_ignored(client, dserver, image):
    created = dserver.sandboxes_created()
    with pytest.raises(APIError) as e:
        client.containers.run(image, ["true"], restart_policy={"Name": "always"}, detach=True)
    assert e.value.response.status_code == 400 and "RestartPolicy" in str(e.value.explanation)
    assert dserver.sandboxes_created() == created
    # "no" is what every container does.
    client.containers.create(image, ["true"], restart_policy={"Name": "no"})


def test_anonymous_volumes_are_writable_and_deleted_with_the_container(client, dserver, image):
    volumes = dserver.server.data_dir / "volumes"

    def anon() -> list[Path]:
        return [p for p in volumes.rglob("anon-*") if p.is_dir()] if volumes.exists() else []

    before = len(anon())
    c = client.containers.create(image, SH + ["echo kept > /vol1/f; busybox cat /vol1/f"], volumes=["/vol1"])
    assert len(anon()) == before + 1
    c.start()
    assert c.wait(timeout=60)["StatusCode"] == 0 and c.logs() == b"kept\n"
    # put_archive and get_archive reach it too.
    assert c.put_archive("/vol1", _tar(tarfile.TarInfo("g"), data=b"in\n"))
    strm, st = c.get_archive("/vol1/g")
    assert st["name"] == "g"
    c.remove()
    assert len(anon()) == before


def test_detach_keys_end_an_attachment_and_leave_the_container_running(client, image):
    c = client.containers.run(image, ["busybox", "cat"], stdin_open=True, tty=True, detach=True)
    sock = c.attach_socket(params={"stdin": 1, "stdout": 1, "stream": 1})
    sock._sock.sendall(b"\x10\x11")  # ctrl-p ctrl-q, Docker's default
    sock._sock.settimeout(10)
    assert sock._sock.recv(128) == b""
    c.reload()
    assert c.status == "running"
    sock = c.attach_socket(params={"stdin": 1, "stdout": 1, "stream": 1, "detachKeys": "ctrl-x"})
    sock._sock.sendall(b"\x18")
    sock._sock.settimeout(10)
    assert sock._sock.recv(128) == b""
    with pytest.raises(APIError) as e:
        c.attach_socket(params={"stdin": 1, "stream": 1, "detachKeys": "meta-x"})
    assert e.value.response.status_code == 400
    c.remove(force=True)


def test_commit_makes_an_image_of_what_the_container_changed_with_changes_and_conf(client, loaded):
    c = client.containers.run(loaded, ["sh", "-c", "echo hello > /etc/made"], detach=True)
    try:
        assert c.wait()["StatusCode"] == 0
        img = c.commit(
            "cordon-test/committed",
            "v1",
            message="made here",
            author="tester",
            changes=["ENV MODE=committed", "EXPOSE 8000"],
            conf={"Cmd": ["cat", "/etc/made"], "Labels": {"k": "v w"}},
        )
        assert "cordon-test/committed:v1" in img.tags
        # conf's Cmd, the changes' Env, the container's file.
        assert client.containers.run(img.id, remove=True) == b"hello\n"
        out = client.containers.run("cordon-test/committed:v1", ["sh", "-c", "echo $MODE"], remove=True)
        assert out == b"committed\n"
        attrs = client.images.get(img.id).attrs
        assert attrs["Config"]["ExposedPorts"] == {"8000/tcp": {}}
        assert attrs["Config"]["Labels"] == {"k": "v w"}
        assert (attrs["Container"], attrs["Comment"], attrs["Author"]) == (c.id, "made here", "tester")
        assert attrs["ContainerConfig"]["Image"] == loaded
        assert attrs["Parent"] == client.images.get(loaded).id
        # Without a repository: an image known by its id only, as Docker's untagged commit.
        untagged = c.commit()
        assert untagged.tags == []
        assert client.containers.run(untagged.id, ["cat", "/etc/made"], remove=True) == b"hello\n"
        # A name the store has already is not replaced (another key's containers may run it).
        with pytest.raises(APIError) as e:
            c.commit("cordon-test/committed", "v1")
        assert e.value.response.status_code == 409
        # What cordon cannot honour is refused by name, and nothing is made.
        for conf, field in (({"Volumes": {"/data": {}}}, "Volumes"), ({"Env": ["A=1\nRUN x"]}, "Env")):
            with pytest.raises(APIError) as e:
                c.commit("cordon-test/committed", "v2", conf=conf)
            assert e.value.response.status_code == 400 and field in str(e.value.explanation)
        with pytest.raises(APIError) as e:
            c.commit("cordon-test/committed", "v2", changes=["RUN rm -rf /"])
        assert "RUN cannot be a commit's change" in str(e.value.explanation)
        with pytest.raises(ImageNotFound):
            client.images.get("cordon-test/committed:v2")
    finally:
        c.remove(force=True)
    # An untagged commit no container uses is dangling: images.prune removes it.
    deleted = [d.get("Deleted") for d in client.images.prune()["ImagesDeleted"] or []]
    assert untagged.id in deleted
