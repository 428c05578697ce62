"""``piagent proxy`` passes its limits to the server: a client that stops in the middle of
its headers gets 408 after ``--header-timeout``, SIGINT stops the server at once although
a client is stuck, and a limit out of range or a bad ``--allow-base-url`` is a usage error."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys

import pytest

from piagent.cli import main
from tests.conftest import WAIT


def test_a_limit_out_of_range_is_a_usage_error(capsys):
    assert main(["proxy", "--port", "0", "--token", "t", "--max-connections", "0"]) == 2
    assert capsys.readouterr().err == ("piagent proxy: max_connections must be a positive "
                                       "int, got 0.\n")


@pytest.mark.usefixtures("sigint_raises")  # also from a shell ignoring SIGINT
@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child process")
def test_proxy_limits_and_ctrl_c_with_a_stuck_client():
    proc = subprocess.Popen([sys.executable, "-m", "piagent", "proxy", "--port", "0",
                             "--token", "s3cret", "--header-timeout", "0.3",
                             "--body-timeout", "60"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    sockets: list[socket.socket] = []
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("piagent proxy on http://127.0.0.1:"), line
        port = int(line.split()[3].rsplit(":", 1)[1].split("/")[0])
        slow = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
        sockets.append(slow)
        slow.sendall(b"POST /api/stream HTTP/1.1\r\nHost: x\r\n")
        answer = b""
        while chunk := slow.recv(65536):
            answer += chunk
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408 Request Timeout")
        assert "header_timeout" in json.loads(body)["error"]
        stuck = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
        sockets.append(stuck)
        stuck.sendall(b"POST /api/stream HTTP/1.1\r\nHost: x\r\nContent-Type: "
                      b"application/json\r\nAuthorization: Bearer s3cret\r\n"
                      b"Content-Length: 100\r\n\r\n{")  # past the headers: stuck in its body
        # a second request answered: the stuck one was accepted first (accepts are in order)
        with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as probe:
            probe.sendall(b"GET /api/stream HTTP/1.1\r\nHost: x\r\n\r\n")
            assert probe.recv(65536).startswith(b"HTTP/1.1 405")  # from its headers alone
        proc.send_signal(signal.SIGINT)
        assert proc.wait(WAIT) == 0  # the stuck client's 60 s body deadline was not waited
        assert stuck.recv(65536) == b""
    finally:
        for sock in sockets:
            sock.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait(WAIT)
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        proc.stderr.close()


@pytest.mark.parametrize(("value", "why"), [
    ("openai", ""),
    ("=https://gateway.example/v1", ""),
    ("open ai=https://gateway.example/v1", ""),
    ("openai=", ""),
    ("openai=gateway.example/v1", " (an http:// or https:// URL with a host)"),
    ("openai=ftp://gateway.example/v1", " (an http:// or https:// URL with a host)"),
])
def test_a_bad_allow_base_url_is_a_usage_error_naming_the_flag(capsys, value, why):
    with pytest.raises(SystemExit) as exited:
        main(["proxy", "--port", "0", "--token", "t", "--allow-base-url", value])
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "piagent proxy: error: argument --allow-base-url: expected PROVIDER=URL, e.g. "
        f"openai=https://gateway.example/v1{why}, got {value!r}")
