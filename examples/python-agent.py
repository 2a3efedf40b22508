#!/usr/bin/env python3
"""A Python agent beside an aap-mesh node: standard library only, HTTP only.

It registers a capability on the node (PUT /v1/card), reads its work from the
node's server-sent-event work stream (GET /v1/work/stream) and drives each run
through the local API:

  1. reports progress             POST /v1/runs/{id}/progress
  2. blocks on a checkpoint       POST /v1/runs/{id}/block
  3. waits for the resolution     a `blocked` item, then a `resume` item on the work stream
  4. completes                    POST /v1/runs/{id}/complete
     ... or fails, when the resolution says {"approved": false}
     ... or hands the run off,   POST /v1/runs/{id}/handoff
         when it says {"handoff_to": "<agent id>"}

A run that continues another agent's run after a handoff is completed at once.
A checkpoint the delegator raises itself (a `blocked` item whose `by` is not
this agent) pauses the run: the agent waits for its `resume` item, then goes
on where it was.

    npm start -- --data-dir ./.aap-mesh          # a node, in another terminal
    python3 examples/python-agent.py --data-dir ./.aap-mesh

It prints one JSON object per line on stdout (registered, ready, work,
blocked, paused, continued, resumed, completed, handed_off, failed, ended) so scripts and tests
can follow it.
"""
import argparse
import json
import os
import signal
import sys
import time
import urllib.error
import urllib.parse
import urllib.request


def say(event, **fields):
    print(json.dumps({"event": event, **fields}), flush=True)


class ApiError(Exception):
    def __init__(self, status, code, message):
        super().__init__(f"{code}: {message}")
        self.status = status
        self.code = code


class Api:
    """The node's local agent API: JSON calls and one SSE stream."""

    def __init__(self, url, token):
        self.url = url.rstrip("/")
        self.token = token

    def _request(self, method, path, body=None, headers=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", "Bearer " + self.token)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        return req

    def call(self, method, path, body=None):
        try:
            with urllib.request.urlopen(self._request(method, path, body), timeout=60) as res:
                return json.loads(res.read() or b"null")
        except urllib.error.HTTPError as err:
            try:
                e = json.loads(err.read())["error"]
            except Exception:  # not the API's JSON error
                e = {"code": "INTERNAL", "message": f"HTTP {err.code}"}
            raise ApiError(err.code, e["code"], e["message"]) from None

    def stream(self, path, last_event_id=None):
        """Yield (event, id, data) for each server-sent event until the stream ends."""
        headers = {"Accept": "text/event-stream"}
        if last_event_id is not None:
            headers["Last-Event-ID"] = str(last_event_id)
        with urllib.request.urlopen(self._request("GET", path, headers=headers), timeout=None) as res:
            event, ident, data = "message", None, []
            for raw in res:
                line = raw.decode("utf-8").rstrip("\r\n")
                if line == "":
                    if data:
                        yield event, ident, json.loads("\n".join(data))
                    event, ident, data = "message", None, []
                elif line.startswith(":"):
                    continue  # keep-alive
                else:
                    field, _, value = line.partition(":")
                    value = value[1:] if value.startswith(" ") else value
                    if field == "event":
                        event = value
                    elif field == "id":
                        ident = value
                    elif field == "data":
                        data.append(value)


def run_path(run_id, verb):
    return f"/v1/runs/{urllib.parse.quote(run_id, safe='')}/{verb}"


def summarize(inp):
    text = str(inp.get("text", ""))
    words = text.split()
    first = text.split(".")[0].strip()
    return {"words": len(words), "summary": first[:200]}


class Agent:
    def __init__(self, api, capability):
        self.api = api
        self.capability = capability
        self.inputs = {}
        self.me = None
        # run id -> the checkpoint another agent (the delegator) holds the run blocked on
        self.paused = {}
        # runs whose own checkpoint could not be raised because the delegator's block came first
        self.ask_later = set()

    def register(self, name, tags):
        """Add this agent's capability to the node's card (keeping what is there) and serve it."""
        cap_id, _, version = self.capability.rpartition("@")
        mine = {"capability_id": cap_id, "version": version}
        current = self.api.call("GET", "/v1/card")
        card = current.get("card") or {}
        caps = [c for c in card.get("capabilities", []) if c != mine] + [mine]
        draft = {
            "name": card.get("name") or name,
            "description": card.get("description") or "a Python agent driven over the local API",
            "capabilities": caps,
            "tags": sorted(set(card.get("tags", [])) | set(tags)),
        }
        state = self.api.call("PUT", "/v1/card", {"card": draft})
        self.me = state["agent_id"]
        say("registered", agent_id=state["agent_id"], capability=self.capability,
            serving=[f"{c['capability_id']}@{c['version']}" for c in state["serving"]])

    def on_work(self, item):
        run = item["run"]
        rid = run["run_id"]
        say("work", run_id=rid, correlation_id=run["correlation_id"], state=run["state"],
            handoff=item["handoff"] is not None)
        if item["restored"] is not None:
            # the node restarted while the run was blocked; it has just been resumed
            return self.finish(rid, item["restored"]["resolution"], item["input"])
        self.inputs[rid] = item["input"]
        if run["state"] != "running" or run["checkpoint_id"] is not None:
            # blocked, or resumed already (a reconnect): the resolution comes as a resume item
            return
        if item["handoff"] is not None:
            frm = item["handoff"]["from"]
            self.api.call("POST", run_path(rid, "progress"), {"payload": {"step": "continuing", "from_run": frm["run_id"]}})
            output = {**summarize(item["input"]), "continued_from": frm["run_id"], "context": item["handoff"]["context"]}
            self.api.call("POST", run_path(rid, "complete"), {"output": output})
            return say("completed", run_id=rid, output=output)
        self.ask(rid)

    def ask(self, rid):
        """Read the input, then raise this agent's own checkpoint."""
        s = summarize(self.inputs.get(rid, {}))
        try:
            self.api.call("POST", run_path(rid, "progress"), {"payload": {"step": "read", "words": s["words"]}})
            checkpoint = "approve-" + rid.rsplit(":", 1)[-1][:8]
            self.api.call("POST", run_path(rid, "block"), {"reason": "approve the summary before it is sent", "checkpoint_id": checkpoint})
        except ApiError as err:
            if err.code != "INVALID_TRANSITION":
                raise
            # the delegator blocked the run first: its `blocked` item follows; ask once it resumes
            self.ask_later.add(rid)
            return
        say("blocked", run_id=rid, checkpoint_id=checkpoint)

    def on_blocked(self, item):
        rid = item["run_id"]
        if item["by"] != self.me:
            self.paused[rid] = item["checkpoint_id"]
            say("paused", run_id=rid, checkpoint_id=item["checkpoint_id"], by=item["by"])

    def on_resume(self, item):
        rid = item["run_id"]
        if self.paused.get(rid) == item["checkpoint_id"]:
            # the delegator's checkpoint is resolved: carry on where the run was
            del self.paused[rid]
            say("continued", run_id=rid, checkpoint_id=item["checkpoint_id"], resolution=item["resolution"])
            if rid in self.ask_later:
                self.ask_later.discard(rid)
                self.ask(rid)
            return
        say("resumed", run_id=rid, checkpoint_id=item["checkpoint_id"], resolution=item["resolution"])
        self.finish(rid, item["resolution"], self.inputs.get(rid, {}))

    def finish(self, rid, resolution, inp):
        if resolution.get("handoff_to"):
            new = self.api.call("POST", run_path(rid, "handoff"), {
                "to_agent": resolution["handoff_to"],
                "context": {"draft": summarize(inp), "notes": resolution.get("notes", "")},
            })["run"]
            return say("handed_off", run_id=rid, new_run_id=new["run_id"], to_agent=new["agent_id"])
        if resolution.get("approved") is False:
            self.api.call("POST", run_path(rid, "fail"), {"message": "the summary was not approved"})
            return say("failed", run_id=rid)
        output = {**summarize(inp), "approved": True}
        self.api.call("POST", run_path(rid, "complete"), {"output": output})
        say("completed", run_id=rid, output=output)

    def serve(self):
        """Read the work stream for ever; reconnect (with Last-Event-ID) when it drops."""
        last = None
        backoff = 0.25
        while True:
            try:
                for event, ident, data in self.api.stream("/v1/work/stream", last):
                    backoff = 0.25
                    if ident is not None:
                        last = ident
                    try:
                        if event == "ready":
                            say("ready")
                        elif event == "work":
                            self.on_work(data)
                        elif event == "blocked":
                            self.on_blocked(data)
                        elif event == "resume":
                            self.on_resume(data)
                        elif event == "ended":
                            self.paused.pop(data["run_id"], None)
                            self.ask_later.discard(data["run_id"])
                            say("ended", run_id=data["run_id"], state=data["run"]["state"])
                    except ApiError as err:
                        say("error", code=err.code, message=str(err))
            except (urllib.error.URLError, ConnectionError, OSError) as err:
                say("disconnected", reason=str(err))
            time.sleep(backoff)
            backoff = min(backoff * 2, 5)


def api_from(args):
    url, token = args.api_url, args.token
    if url is None or token is None:
        try:
            with open(os.path.join(args.data_dir, "api.json")) as f:
                url = url or json.load(f)["url"]
            with open(os.path.join(args.data_dir, "api-token")) as f:
                token = token or f.read().strip()
        except OSError as err:
            sys.exit(f"python-agent: no running node in {args.data_dir} ({err.strerror}); start one, or pass --api-url and --token")
    return Api(url, token)


def main():
    p = argparse.ArgumentParser(description="A Python agent driven over an aap-mesh node's local API.")
    p.add_argument("--data-dir", default="./.aap-mesh", help="the node's data directory (its api.json and api-token)")
    p.add_argument("--api-url", default=os.environ.get("AAP_MESH_API_URL"))
    p.add_argument("--token", default=os.environ.get("AAP_MESH_TOKEN"))
    p.add_argument("--name", default="python-summarizer", help="card name, when the node has no card yet")
    p.add_argument("--capability", default="cap:summarize@1.0.0", help="the capability to serve, id@version")
    p.add_argument("--tag", action="append", default=[], help="a tag for the card, repeatable")
    args = p.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    agent = Agent(api_from(args), args.capability)
    try:
        agent.register(args.name, args.tag)
    except ApiError as err:
        sys.exit(f"python-agent: could not register: {err}")
    except urllib.error.URLError as err:
        sys.exit(f"python-agent: cannot reach the node at {agent.api.url}: {err.reason}")
    try:
        agent.serve()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
