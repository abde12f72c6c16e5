"""The rollout driver: a step of n agent sessions per task through trajflow's gateway, each GRPO group
handed back whole once exactly its sessions' rows are durable (docs/rollouts.md).

    from trajflow.rollout import Rollouts

    ro = Rollouts(agent_url="http://gw:8000", control_url="http://gw:8001", output="/data/rows",
                  journal_dir="/ckpt/rollouts")
    ro.set_weights(step)
    groups = ro.run(tasks, n=8, agent=my_agent, reward=my_reward, timeout_s=1800, max_concurrency=64, step=step)
    for g in groups.kept():
        train_on(g.table)
    log(groups.stats)
"""
from __future__ import annotations

import asyncio
import logging
import time
import urllib.parse
from typing import Any, AsyncIterator, Callable, Dict, Iterable, List, Optional, Set, Tuple

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from ..control import GatewayControl, GatewayError
from .agents import CliResult, call_agent
from .journal import SessionEntry, StepJournal
from .plan import Agent, Plan, Reward, check_options, fill_with_failures, score_of
from .progress import Progress
from .rows import RowWatcher
from .types import ABORTED, FAILED, OK, AgentContext, Group, Groups, SessionResult

log = logging.getLogger("trajflow.rollout")



class RolloutError(Exception):
    """A step that cannot run: bad tasks or options (every problem listed), or a gateway that refuses."""

    def __init__(self, code: str, message: str):
        super().__init__(f"[{code}] {message}")
        self.code = code


class Rollouts:
    """Runs agents through a trajflow gateway and hands each task's group back with its rows.

    Args:
        agent_url: the gateway's base URL as agents reach it (``http://host:8000``).
        control_url: its control routes (``--control-listen``; default: ``agent_url``).
        control_token: the control token (default: ``$TRAJFLOW_CONTROL_TOKEN``).
        output: where the pipeline writes the rows: the gateway's ``--out``, or the directory or
            ``s3://`` prefix a ``trajflow consume`` writes.
        filesystem: a pyarrow filesystem to read ``output`` through (default: from the URI, or local).
        journal_dir: a local directory for the step journals (journal.py): with ``step`` given, a driver
            killed mid-step and run again with the same step returns that step's groups without running a
            finished session again. None: steps are not durable.
        rows_timeout_s: how long a group waits for the rows of a session that made model calls once the
            session ended; past it the session counts as without rows and its group as incomplete.
        poll_s: how often the output is looked at for new files while a group waits.
        progress: a live line on a terminal (tqdm when installed), structured log lines otherwise; False:
            neither.
    """

    def __init__(
        self,
        agent_url: str,
        control_url: Optional[str] = None,
        control_token: Optional[str] = None,
        output: Optional[str] = None,
        *,
        filesystem: Optional[pafs.FileSystem] = None,
        journal_dir: Optional[str] = None,
        rows_timeout_s: float = 120.0,
        poll_s: float = 0.05,
        progress: bool = True,
    ):
        if output is None:
            raise RolloutError("ROLLOUT_CONFIG", "output is required: the gateway's --out, or where `trajflow consume` writes")
        self.agent_url = agent_url.rstrip("/")
        self.control = GatewayControl(control_url or agent_url, token=control_token)
        self.output = output
        self.filesystem = filesystem
        self.journal_dir = journal_dir
        self.rows_timeout_s = rows_timeout_s
        self.poll_s = poll_s
        self.progress = progress
        self.version: Optional[int] = None
        self._watcher: Optional[RowWatcher] = None

    # --- the trainer's calls -------------------------------------------------------------------------

    def set_weights(self, version: int) -> None:
        """Tells the gateway the policy version now served (POST /weights): rows sampled after it carry it."""
        self.control.set_weights(version)
        self.version = version

    def run(self, tasks: List[Dict[str, Any]], n: int, agent: Agent, **kwargs: Any) -> Groups:
        """``arun`` for a caller without an event loop: blocks until the step's groups are in hand."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.arun(tasks, n, agent, **kwargs))
        raise RolloutError("ROLLOUT_LOOP", "run() was called inside a running event loop: await arun() there")

    async def arun(
        self,
        tasks: List[Dict[str, Any]],
        n: int,
        agent: Agent,
        *,
        reward: Optional[Reward] = None,
        timeout_s: float = 1800.0,
        max_concurrency: int = 64,
        step: Any = None,
        failure: str = "keep",
        max_resamples: int = 2,
        oversample: int = 0,
        max_policy_lag: Optional[int] = None,
        stale: str = "flag",
        failure_reward: Optional[float] = None,
        _sem: Optional[asyncio.Semaphore] = None,
        _only: Optional[int] = None,
    ) -> Groups:
        """One step: ``n`` sessions per task, and one group per task in task order.

        Args:
            tasks: dicts with at least ``uid`` (the GRPO group's id: 1 to 160 letters, digits and ``. : @ -``);
                ``metadata`` goes into each session's start.
            n: sessions per task (the group size).
            agent: called with one ``AgentContext`` per session (agents.py): async, plain, or ``cli_agent``.
            reward: ``reward(task, result)`` for an agent that returns no reward itself (sync or async).
            timeout_s: an agent still running then is cancelled and its session ended ``aborted``.
            max_concurrency: sessions running at once, over the whole step.
            step: the step's id, for a durable step (with ``journal_dir``).
            failure: what a failed or aborted session does to its group: ``keep`` it (flagged by its
                status), ``drop`` the group, or ``resample`` it (up to ``max_resamples`` new sessions per
                group, the failed one left out).
            oversample: start ``n + oversample`` sessions and keep the first ``n`` to end ``ok``; the rest
                are ended ``aborted`` and never trained.
            max_policy_lag, stale: rows sampled more than this many versions before the one last set
                with ``set_weights`` are counted (``flag``) or left out (``drop``).
            failure_reward: the reward a failed or aborted session gets (stage ``rollout``, its reason in
                ``info``), as many GRPO setups score a broken rollout 0. None (default): no reward is
                posted for it, and the pipeline writes its rows once its reward grace has passed
                (``--reward-grace-ms``, 30 s), which holds its group that long.
        """
        problems = check_options(tasks, n, timeout_s, max_concurrency, failure, max_resamples, oversample, stale)
        if _only is not None and not (isinstance(_only, int) and 0 <= _only < (n if isinstance(n, int) else 0)):
            problems.append(f"sample_index must be an int in [0, n), not {_only!r}")
        if _only is not None and oversample:
            problems.append("oversample needs the whole group: run it with arun")
        if max_policy_lag is not None and self.version is None:
            problems.append("max_policy_lag needs the policy version: call set_weights(version) first")
        if problems:
            raise RolloutError("ROLLOUT_CONFIG", "; ".join(problems))
        uids = [t["uid"] for t in tasks]
        journal = StepJournal.open(self.journal_dir, step, uids)
        watcher = self._watcher_for()
        if not journal.resumed:
            journal.before = await asyncio.to_thread(watcher.files)
            journal.save()
        watcher.skip(journal.before)
        watcher.want(journal.sessions)  # sessions a killed driver began: their rows may be in the output
        sem = _sem if _sem is not None else asyncio.Semaphore(max_concurrency)
        progress = Progress(len(tasks), n, enabled=self.progress, step=step)
        plan = Plan(n, agent, reward, timeout_s, sem, failure, max_resamples, oversample, max_policy_lag, stale)
        plan.failure_reward = failure_reward
        plan.only = _only
        try:
            groups = await asyncio.gather(*(self._group(i, t, plan, journal, progress) for i, t in enumerate(tasks)))
        finally:
            progress.close()
        return Groups(list(groups), progress.stats())

    async def arun_sample(self, task: Dict[str, Any], n: int, sample_index: int, agent: Agent, **kwargs: Any) -> Group:
        """One session of a task's group of ``n``: sample ``sample_index``, for trainers whose unit of rollout
        is one sample (verl's agent loops run each of a group's n sessions as a loop of its own). The group
        returned holds that session and exactly its rows; the session starts with ``group_size`` n, so the
        pipeline groups it with its siblings as if one ``arun`` had started them all. The same options as
        ``arun`` but ``oversample`` (which needs the whole group) and ``step`` (not journaled)."""
        if kwargs.get("step") is not None:
            raise RolloutError("ROLLOUT_CONFIG", "arun_sample takes no step: one sample is not journaled")
        groups = await self.arun([task], n, agent, _only=sample_index, **kwargs)
        return groups[0]

    async def astream(
        self, tasks: Iterable[Dict[str, Any]], n: int, agent: Agent, *, max_groups_in_flight: int = 8, **kwargs: Any
    ) -> AsyncIterator[Group]:
        """Asynchronous RL: keeps ``max_groups_in_flight`` groups running and yields each as it completes
        (completion order), taking the next task as one leaves. The same options as ``arun`` (no
        ``step``: a stream is not journaled); ``max_concurrency`` bounds the sessions of every group in
        flight together; ``max_policy_lag`` is checked against the version at the moment each group
        completes, so a ``set_weights`` between two groups counts."""
        if kwargs.get("step") is not None:
            raise RolloutError("ROLLOUT_CONFIG", "astream takes no step: a stream is not journaled")
        kwargs["_sem"] = asyncio.Semaphore(kwargs.get("max_concurrency", 64))
        it = iter(tasks)
        running: Set[asyncio.Task] = set()

        def take() -> bool:
            task = next(it, None)
            if task is None:
                return False
            running.add(asyncio.ensure_future(self.arun([task], n, agent, **kwargs)))
            return True

        while len(running) < max_groups_in_flight and take():
            pass
        try:
            while running:
                done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for t in done:
                    running.discard(t)
                    yield t.result()[0]
                    take()
        finally:
            for t in running:
                t.cancel()

    # --- a group ---------------------------------------------------------------------------------------

    async def _group(self, ti: int, task: Dict[str, Any], plan: "Plan", journal: StepJournal, progress: Progress) -> Group:
        uid = task["uid"]
        slots = plan.n + plan.oversample
        done: List[SessionResult] = []
        attempts = [0] * slots
        restored: List[SessionResult] = []
        # A snapshot: the other groups add their sessions while this one awaits.
        for sid, e in [(k, v) for k, v in journal.sessions.items() if v.task_index == ti]:
            attempts[e.sample_index] = max(attempts[e.sample_index], e.attempt + 1)
            if e.result is None:
                e.result = await self._resumed(sid, e)
                if e.result.reason != "driver_restarted":
                    restored.append(e.result)
                journal.save()
            done.append(e.result)
        resamples = sum(1 for r in done if not r.kept and r.reason in ("raised", "timeout", "reward_raised"))
        running: Dict[asyncio.Task, Tuple[str, SessionEntry]] = {}

        def ok_kept() -> int:
            return sum(1 for r in done if r.kept and r.status == OK)

        def settle(r: SessionResult) -> bool:
            """Applies the group's policies to a session that ended; True when its sample runs again."""
            nonlocal resamples
            if plan.oversample and r.status != OK:
                r.kept = False  # the first n to end ok make the group; a failure may fill in below
            if r.status != OK and plan.failure == "resample" and resamples < plan.max_resamples:
                r.kept = False
                resamples += 1
                progress.count("sessions_resampled")
                return True
            return False

        # Ended by the killed driver, result not yet journaled: settled as they would have been then.
        for r in restored:
            settle(r)
        if restored:
            journal.save()

        def start(sample: int) -> None:
            entry = SessionEntry(ti, sample, attempts[sample])
            attempts[sample] += 1
            sid = f"{journal.run_id}-t{ti}-s{sample}-a{entry.attempt}"
            journal.sessions[sid] = entry  # journaled before the gateway hears of it
            journal.save()
            self._watcher_for().want([sid])
            running[asyncio.ensure_future(self._session(sid, entry, task, plan, journal, progress))] = (sid, entry)

        finished = {r.sample_index for r in done if r.kept}
        if not (plan.oversample and ok_kept() >= plan.n):
            for sample in range(slots) if plan.only is None else [plan.only]:
                if sample not in finished:
                    start(sample)
        while running:
            ended, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            for t in ended:
                _, entry = running.pop(t)
                r = t.result()
                if settle(r):
                    start(r.sample_index)
                entry.result = r
                done.append(r)
                journal.save()
            if plan.oversample and ok_kept() >= plan.n and running:
                for t in running:
                    t.cancel()
                for t, (sid, entry) in list(running.items()):
                    await asyncio.gather(t, return_exceptions=True)
                    entry.result = SessionResult(sid, entry.sample_index, entry.attempt, ABORTED, reason="oversampled", kept=False)
                    done.append(entry.result)
                    progress.count("sessions_oversampled")
                    progress.session_done(entry.result)
                running.clear()
                journal.save()
        if plan.oversample:
            fill_with_failures(done, plan.n)
        return await self._collect(uid, task, done, plan, progress)

    async def _collect(self, uid: str, task: Dict[str, Any], done: List[SessionResult], plan: "Plan", progress: Progress) -> Group:
        kept = sorted((r for r in done if r.kept), key=lambda r: r.sample_index)
        last_end = time.monotonic()
        wanted = {r.session_id for r in kept if r.calls > 0}
        found = await self._rows(wanted, self.rows_timeout_s)
        self._watcher_for().forget(r.session_id for r in done)
        tables = []
        for r in kept:
            t = found.get(r.session_id)
            r.rows = 0 if t is None else t.num_rows
            if t is not None:
                tables.append(t.sort_by("index"))
        table = pa.concat_tables(tables) if tables else self._empty()
        stale_rows = 0
        if plan.max_policy_lag is not None and table.num_rows:
            floor = self.version - plan.max_policy_lag
            versions = table.column("weight_version_min")
            old = pc.fill_null(pc.less(versions, floor), False)
            stale_rows = pc.sum(old).as_py() or 0
            if plan.stale == "drop" and stale_rows:
                table = table.filter(pc.invert(old))
        failed = any(r.status != OK for r in kept)
        group = Group(uid, task, table, sorted(done, key=lambda r: (r.sample_index, r.attempt)))
        group.incomplete = any(r.rows == 0 for r in kept) or len(kept) < (plan.n if plan.only is None else 1)
        group.stale_rows = stale_rows
        if plan.failure == "drop" and failed:
            group.dropped = True
            group.table = table.slice(0, 0)
        progress.group_done(group, time.monotonic() - last_end)
        return group

    async def _rows(self, wanted: Set[str], timeout_s: float) -> Dict[str, pa.Table]:
        """The rows of ``wanted`` sessions, waiting until all are in or ``timeout_s`` passes."""
        deadline = time.monotonic() + timeout_s
        while True:
            found = await asyncio.to_thread(self._watcher_for().scan, wanted, self.poll_s)
            if len(found) == len(wanted) or time.monotonic() >= deadline:
                if len(found) < len(wanted):
                    log.warning("rows never came for %d session(s): %s", len(wanted) - len(found), sorted(wanted - set(found))[:5])
                return found
            await asyncio.sleep(self.poll_s)

    # --- a session ---------------------------------------------------------------------------------

    async def _session(
        self, sid: str, entry: SessionEntry, task: Dict[str, Any], plan: "Plan", journal: StepJournal, progress: Progress
    ) -> SessionResult:
        async with plan.sem:
            t0 = time.monotonic()
            started = await self._control(
                self.control.start_session, session_id=sid, uid=task["uid"], sample_index=entry.sample_index,
                group_size=plan.n, metadata=task.get("metadata"),
            )
            path = f"{self.agent_url}/sessions/{urllib.parse.quote(sid, safe='')}"
            ctx = AgentContext(sid, task["uid"], entry.sample_index, task, f"{path}/v1", path, started["api_key"], entry.attempt)
            progress.session_started()
            status, reason, error, value = OK, None, None, None
            try:
                value = await asyncio.wait_for(call_agent(plan.agent, ctx), plan.timeout_s)
            except asyncio.TimeoutError:
                status, reason = ABORTED, "timeout"
            except asyncio.CancelledError:
                await asyncio.shield(self._end_quietly(sid))
                raise
            except Exception as e:  # noqa: BLE001 - an agent's failure is its session's, not the step's
                status, reason, error = FAILED, "raised", f"{type(e).__name__}: {e}"
            reward_value, info = None, None
            if status == OK:
                try:
                    reward_value, info = await score_of(task, value, plan.reward)
                except Exception as e:  # noqa: BLE001
                    status, reason, error = FAILED, "reward_raised", f"{type(e).__name__}: {e}"
            if isinstance(value, CliResult) and value.remove_workdir:
                import shutil

                shutil.rmtree(value.workdir, ignore_errors=True)
            stage = None
            if status != OK and plan.failure_reward is not None:
                reward_value, info, stage = float(plan.failure_reward), {"reason": reason}, "rollout"
            if reward_value is not None:
                await self._control(self.control.reward, sid, reward_value, key=f"{sid}/reward", info=info, stage=stage)
            result = SessionResult(
                sid, entry.sample_index, entry.attempt, status, reward_value, info, reason, error, seconds=time.monotonic() - t0
            )
            # Journaled before the end is posted: once the gateway records it, the session's rows are in the
            # output as ended, and a driver killed now must resume with this result, not cut the session.
            entry.ending = result
            journal.save()
            # The end's answer is the session as the gateway holds it: its calls and sampled tokens.
            seen = await self._control(self.control.end, sid, status)
            result.calls, result.sampled_tokens = int(seen.get("calls", 0)), int(seen.get("sampled_tokens", 0))
            progress.session_done(result)
            return result

    async def _resumed(self, sid: str, entry: SessionEntry) -> SessionResult:
        """The result of a session a killed driver began and journaled no result for.

        With an ``ending`` journaled, the agent had finished and the end was being posted: the end is posted
        again (or, when the gateway answers that the session ended already, its record is read), and the
        journaled result is the session's, kept as it would have been. A session the gateway no longer
        holds, or ended otherwise (its idle expiry), and one without an ``ending``, was cut by the driver's
        death: ended ``aborted`` now, never trained, and its sample run again."""
        pending = entry.ending
        if pending is not None:
            seen: Optional[Dict[str, Any]] = None
            try:
                seen = await self._control(self.control.end, sid, pending.status)
            except GatewayError as e:
                if e.status not in (404, 409):
                    raise
                if e.status == 409:  # ended already (409 session_ended): the gateway's record says how
                    seen = await self._described(sid)
            if seen is not None and seen.get("status", pending.status) == pending.status:
                pending.calls, pending.sampled_tokens = int(seen.get("calls", 0)), int(seen.get("sampled_tokens", 0))
                entry.ending = None
                return pending
            log.warning(
                "session %s: the gateway holds no %s end for it (the killed driver was posting one); cut, run again",
                sid, pending.status,
            )
        await self._end_quietly(sid)
        entry.ending = None
        return SessionResult(sid, entry.sample_index, entry.attempt, ABORTED, reason="driver_restarted", kept=False)

    async def _described(self, sid: str) -> Optional[Dict[str, Any]]:
        """The session as the gateway holds it; None when it holds it no more."""
        try:
            return await self._control(self.control.session, sid)
        except GatewayError as e:
            if e.status != 404:
                raise
            return None

    async def _control(self, fn: Callable[..., Dict[str, Any]], *args: Any, **kwargs: Any) -> Dict[str, Any]:
        """A control call in a worker thread, retried while the gateway answers 429 or 503 (it is at its
        capacity, or its output is briefly unavailable), with backoff."""
        delay = 0.05
        for attempt in range(12):
            try:
                return await asyncio.to_thread(fn, *args, **kwargs)
            except GatewayError as e:
                if e.status not in (429, 503) or attempt == 11:
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)
        raise AssertionError("unreachable")

    async def _end_quietly(self, sid: str) -> None:
        """Ends a session ``aborted`` whatever its state: one the gateway never heard of, or that has ended
        already, needs nothing."""
        try:
            await self._control(self.control.end, sid, ABORTED)
        except GatewayError as e:
            if e.status not in (404, 409):
                raise

    # --- helpers -----------------------------------------------------------------------------------

    def _watcher_for(self) -> RowWatcher:
        if self._watcher is None:
            self._watcher = RowWatcher(self.output, self.filesystem)
        return self._watcher

    def _empty(self) -> pa.Table:
        schema = self._watcher_for().schema()
        if schema is not None:
            return schema.empty_table()
        return pa.table({"key": pa.array([], pa.string()), "session_id": pa.array([], pa.string())})
