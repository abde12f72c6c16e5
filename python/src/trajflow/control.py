"""The trainer's side of `trajflow gateway`: start, read, reward, end and delete sessions and announce the
policy version, through the gateway's control routes (docs/gateway.md, "Security").

The agent being trained reaches the gateway too (its model calls go there), so a deployment sets a control
token (`$TRAJFLOW_CONTROL_TOKEN` on the gateway) and gives it to the trainer only; this client sends it as
`Authorization: Bearer`, from the same environment variable unless told otherwise. With a control listener
(`--control-listen`), point the client at that address. The token is never put in an exception's message.

    from trajflow.control import GatewayControl

    gw = GatewayControl("http://127.0.0.1:8001")          # token from $TRAJFLOW_CONTROL_TOKEN
    s = gw.start_session(uid="gsm8k-0042", sample_index=0, group_size=8)
    # ... the agent runs against s["base_url"] (or with s["api_key"]) ...
    gw.reward(s["session_id"], 1.0)
    gw.end(s["session_id"])
    gw.set_weights(13)
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from typing import Any


class GatewayError(Exception):
    """An error answer of the gateway: its HTTP status, its error code and message."""

    def __init__(self, status: int, code: str | None, message: str):
        super().__init__(f"{status} {code or ''}: {message}".strip())
        self.status = status
        self.code = code
        self.message = message


class GatewayControl:
    def __init__(self, base_url: str, token: str | None = None, timeout: float = 30.0):
        self.base_url = base_url.rstrip("/")
        self._token = token if token is not None else os.environ.get("TRAJFLOW_CONTROL_TOKEN")
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"GatewayControl({self.base_url!r}, token={'set' if self._token else 'unset'})"

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        headers = {"content-type": "application/json"}
        if self._token:
            headers["authorization"] = f"Bearer {self._token}"
        request = urllib.request.Request(self.base_url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as err:
            text = err.read().decode("utf-8", "replace")
            try:
                error = json.loads(text).get("error", {})
                raise GatewayError(err.code, error.get("code"), error.get("message", text)) from None
            except (ValueError, AttributeError):
                raise GatewayError(err.code, None, text) from None

    @staticmethod
    def _id(session_id: str) -> str:
        return urllib.parse.quote(session_id, safe="")

    def start_session(
        self,
        session_id: str | None = None,
        uid: str | None = None,
        sample_index: int | None = None,
        group_size: int | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Starts a session; answers its session_id, uid, base_url and api_key."""
        fields = {"session_id": session_id, "uid": uid, "sample_index": sample_index,
                  "group_size": group_size, "metadata": metadata}
        return self._call("POST", "/sessions", {k: v for k, v in fields.items() if v is not None})

    def session(self, session_id: str) -> dict[str, Any]:
        """The session as the gateway holds it."""
        return self._call("GET", f"/sessions/{self._id(session_id)}")

    def reward(
        self,
        session_id: str,
        value: float,
        target: str | None = None,
        stage: str | None = None,
        key: str | None = None,
        finished: bool | None = None,
        info: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A reward for the session (or, with `target`, one of its calls)."""
        fields = {"value": value, "target": target, "stage": stage, "key": key, "finished": finished,
                  "info": info}
        body = {k: v for k, v in fields.items() if v is not None}
        return self._call("POST", f"/sessions/{self._id(session_id)}/reward", body)

    def end(self, session_id: str, status: str = "ok") -> dict[str, Any]:
        """Ends the session: ok, aborted or failed."""
        return self._call("POST", f"/sessions/{self._id(session_id)}/end", {"status": status})

    def delete(self, session_id: str) -> dict[str, Any]:
        """Ends the session as aborted (if it was open) and forgets it."""
        return self._call("DELETE", f"/sessions/{self._id(session_id)}")

    def set_weights(self, version: int) -> dict[str, Any]:
        """The policy version now served (recorded as policy.update)."""
        return self._call("POST", "/weights", {"version": version})
