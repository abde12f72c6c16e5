"""A real `trajflow gateway` for the rollout tests: in front of the llama.cpp server `npm test` starts
(LLAMA_SERVER), writing rows itself (--out) or events to Kafka (--topic) for a `trajflow consume`."""
import os
import socket
import subprocess
import time
import urllib.request


from conftest import BIN, NODE, need


def installed(script):
    """The last line a project install script prints (a path), running it (it installs once)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run(["bash", script], cwd=root, capture_output=True, text=True)
    if done.returncode != 0:
        raise AssertionError(f"{script} failed:\n{done.stderr[-3000:]}")
    return done.stdout.strip().splitlines()[-1]


def harness_bin():
    """The bin directory of Claude Code and Codex CLI."""
    return installed("scripts/harnesses.sh")


def mini_swe_agent():
    """The path of mini-swe-agent's `mini`."""
    return installed("scripts/mini-swe-agent.sh")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(condition, what, limit=60.0, proc=None):
    deadline = time.monotonic() + limit
    while True:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"{what}: the process exited {proc.returncode}:\n{read_log(proc)}")
        try:
            if condition():
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}" + ("" if proc is None else f":\n{read_log(proc)}"))
        time.sleep(0.05)


def read_log(proc):
    path = getattr(proc, "log_path", None)
    if path is None or not os.path.exists(path):
        return ""
    with open(path, errors="replace") as f:
        return f.read()[-6000:]


def start_cli(args, log_path, env=None):
    """Starts the trajflow CLI with its output in ``log_path`` (a pipe nobody reads would fill up)."""
    log = open(log_path, "w")
    proc = subprocess.Popen(
        [NODE, BIN, *args], stdout=log, stderr=subprocess.STDOUT,
        env={**os.environ, "TRAJFLOW_LOG_LEVEL": "warn", **(env or {})},
    )
    proc.log_path = log_path
    return proc


def stop(proc):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Gateway:
    def __init__(self, tmp, *extra, engine=None, env=None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        upstream = engine or need("LLAMA_SERVER", "a llama.cpp server")
        self.proc = start_cli(
            ["gateway", "--upstream", upstream, "--engine", "llamacpp", "--listen", f"127.0.0.1:{self.port}",
             "--untrained-model", "claude-haiku-*", *extra],
            os.path.join(tmp, f"gateway-{self.port}.log"), env,
        )
        wait_until(lambda: urllib.request.urlopen(f"{self.url}/readyz", timeout=2).status == 200, "the gateway",
                   proc=self.proc)

    def metrics(self):
        return urllib.request.urlopen(f"{self.url}/metrics", timeout=10).read().decode()

    def stop(self):
        stop(self.proc)
