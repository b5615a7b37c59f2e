#!/usr/bin/env python3
"""Fixed requests that reach documented statuses for certain.

usage: probes.py BALANCER_URL ADMIN_TOKEN (healthy|outage) HAR_OUT

schemathesis draws its requests at random, so whether a run happens to send
(say) a removal of an unknown node is luck. These probes send one request per
status the stack in that phase must give, check the answer is that status,
and write what they saw as a HAR log for statuses.py. Exits 1 on a mismatch.
"""
import json
import sys
import urllib.error
import urllib.request

NOWHERE = "http://127.0.0.1:9"

HEALTHY = [
    # (method, path, body, content type, with token, expected status)
    ("GET", "/openapi.json", None, None, False, 200),
    ("POST", "/node", {"action": "remove", "address": NOWHERE}, "application/json", True, 404),
    ("POST", "/node", {"action": "drain", "address": NOWHERE}, "application/json", True, 404),
    ("POST", "/node", {"action": "jump", "address": NOWHERE}, "application/json", True, 400),
    ("POST", "/node", {"action": "add", "address": NOWHERE}, "application/json", False, 401),
    ("POST", "/node", "action=add", "text/plain", True, 415),
    ("GET", "/nodes", None, None, False, 401),
    ("GET", "/sessions/probe-never-pressed", None, None, True, 404),
    ("POST", "/press", {}, "application/json", False, 400),
    ("POST", "/press", "session_id=x", "text/plain", False, 415),
    ("GET", "/events?limit=many", None, None, True, 400),
    ("GET", "/sessions/" + "s" * 300, None, None, True, 400),
    ("GET", "/process/bad%20id", None, None, False, 400),
    ("GET", "/readyz", None, None, False, 200),
]

OUTAGE = [
    ("POST", "/press", {"session_id": "probe-outage-new"}, "application/json", False, 503),
    ("POST", "/node", {"action": "add", "address": NOWHERE}, "application/json", True, 503),
    ("GET", "/nodes", None, None, True, 503),
    ("GET", "/events", None, None, True, 503),
    ("GET", "/sessions/probe-outage-new", None, None, True, 503),
    ("GET", "/process/probe", None, None, False, 503),
    ("GET", "/readyz", None, None, False, 503),
]


def send(base, token, method, path, body, content_type, with_token):
    data = None
    if body is not None:
        data = (json.dumps(body) if isinstance(body, dict) else body).encode()
    request = urllib.request.Request(base + path, method=method, data=data)
    if content_type:
        request.add_header("Content-Type", content_type)
    if with_token:
        request.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as e:
        return e.code


def main():
    base, token, phase, har_out = sys.argv[1:]
    probes = {"healthy": HEALTHY, "outage": OUTAGE}[phase]
    entries, failed = [], 0
    for method, path, body, content_type, with_token, expected in probes:
        status = send(base, token, method, path, body, content_type, with_token)
        mark = "ok" if status == expected else f"FAILED, expected {expected}"
        failed += status != expected
        shown = path if len(path) <= 32 else path[:29] + "..."
        print(f"{method:5} {shown:32} {status}  {mark}")
        entries.append({"request": {"method": method, "url": base + path}, "response": {"status": status}})
    with open(har_out, "w") as f:
        json.dump({"log": {"entries": entries}}, f)
    sys.exit(1 if failed else 0)


main()
