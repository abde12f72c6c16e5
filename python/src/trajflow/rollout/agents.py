"""Calling an agent: an async function, a plain function, or a command line (a CLI harness).

An agent takes one ``AgentContext`` and returns its outcome: a float (the reward), a dict with
``reward`` (and optionally ``info``), or None (the driver's ``reward(task, result)`` scores it), or, for
a command line, a ``CliResult``. Cancellation is structured: an async agent's task is cancelled (its
in-flight model call is closed, which the gateway records as an abort), a CLI agent's whole process group
is terminated and then killed. A plain function runs in a worker thread, which cannot be stopped from
outside: at its timeout its session is ended (``aborted``), so its next model call is refused (409
``session_ended``) and it fails there. Prefer an async agent or a command line where timeouts matter.
"""
from __future__ import annotations

import asyncio
import inspect
import os
import shutil
import signal
import tempfile
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

from .types import AgentContext


class AgentError(Exception):
    """An agent's failure, with a code: ``CLI_EXIT`` (a command line exited non-zero)."""

    def __init__(self, code: str, message: str):
        super().__init__(f"[{code}] {message}")
        self.code = code


async def call_agent(agent: Callable[[AgentContext], Any], ctx: AgentContext) -> Any:
    """Runs ``agent`` on ``ctx``: awaited when it is (or returns) a coroutine, else in a worker thread."""
    if inspect.iscoroutinefunction(agent) or inspect.iscoroutinefunction(getattr(agent, "__call__", None)):
        return await agent(ctx)
    result = await asyncio.to_thread(agent, ctx)
    if inspect.isawaitable(result):
        return await result
    return result


@dataclass
class CliResult:
    """What a command-line agent did: its exit status, its output (the last ``keep_bytes`` of each), and its
    working directory (kept until the session's reward is computed, so ``reward(task, result)`` can look
    at what the agent changed)."""

    returncode: int
    stdout: str
    stderr: str
    workdir: str
    argv: List[str]
    remove_workdir: bool = True  # by the driver, once the reward is computed


Command = Union[Sequence[str], Callable[[AgentContext, str], Sequence[str]]]


def cli_agent(
    command: Command,
    *,
    setup: Optional[Callable[[AgentContext, str], None]] = None,
    env: Optional[Dict[str, str]] = None,
    workdir_root: Optional[str] = None,
    keep_workdir: bool = False,
    fail_on_exit: bool = True,
    terminate_grace_s: float = 5.0,
    keep_bytes: int = 1 << 16,
) -> Callable[[AgentContext], Any]:
    """An agent that runs a command line (Claude Code's ``claude -p``, Codex's ``codex exec``,
    mini-swe-agent) in a working directory of its own per session.

    Args:
        command: the argv, each item formatted with the context's fields (``{task[prompt]}``,
            ``{session_id}``, ``{workdir}``...), or a function ``(ctx, workdir) -> argv``.
        setup: ``(ctx, workdir)``, called before the command: lay out the task's files (a repository to fix).
        env: more environment variables; the context's (OPENAI_BASE_URL, ANTHROPIC_BASE_URL and their keys)
            and the driver's own environment come first.
        workdir_root: where the per-session directories are made (default: the system's temporary
            directory).
        keep_workdir: keep each directory after the session (default: removed once the reward is known).
        fail_on_exit: a non-zero exit fails the session (``AgentError`` CLI_EXIT); False hands the result
            to the reward function whatever the exit.
        terminate_grace_s: at a timeout, the process group gets SIGTERM, then SIGKILL after this long.
        keep_bytes: how much of the end of stdout and stderr the result keeps.
    """

    async def run(ctx: AgentContext) -> CliResult:
        workdir = tempfile.mkdtemp(prefix=f"trajflow-{ctx.session_id}-", dir=workdir_root)
        try:
            if setup is not None:
                await asyncio.to_thread(setup, ctx, workdir)
            fields = {**ctx.__dict__, "workdir": workdir}
            argv = list(command(ctx, workdir) if callable(command) else [str(a).format(**fields) for a in command])
            proc = await asyncio.create_subprocess_exec(
                *argv,
                cwd=workdir,
                env={**os.environ, **ctx.env, **(env or {})},
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,  # its own process group: a timeout stops its children too
            )
            try:
                out, err = await proc.communicate()
            except asyncio.CancelledError:
                await _stop_group(proc, terminate_grace_s)
                raise
            result = CliResult(
                proc.returncode, out[-keep_bytes:].decode("utf-8", "replace"),
                err[-keep_bytes:].decode("utf-8", "replace"), workdir, argv,
            )
        except BaseException:
            if not keep_workdir:
                shutil.rmtree(workdir, ignore_errors=True)
            raise
        if fail_on_exit and result.returncode != 0:
            if not keep_workdir:
                shutil.rmtree(workdir, ignore_errors=True)
            tail = result.stderr.strip().splitlines()[-3:]
            raise AgentError("CLI_EXIT", f"{argv[0]} exited {result.returncode}: {' | '.join(tail)}")
        result.remove_workdir = not keep_workdir
        return result

    return run


async def _stop_group(proc: asyncio.subprocess.Process, grace_s: float) -> None:
    """SIGTERM to the process group, SIGKILL after ``grace_s``; waits until the leader is reaped."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            await asyncio.wait_for(asyncio.shield(proc.wait()), wait)
            break
        except asyncio.TimeoutError:
            continue
    await proc.wait()
    # Any child that outlived its leader in the group gets the same end.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
