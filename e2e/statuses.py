#!/usr/bin/env python3
"""Which documented statuses a schemathesis run reached.

usage: statuses.py OPENAPI_JSON HAR_JSON... [--allow-unreached FILE]

Reads the OpenAPI document and schemathesis's HAR reports, prints every
documented (operation, status) with the number of answers seen, and exits 1
if a documented status was never reached, unless FILE lists it as one only
a fault can produce ("METHOD PATH STATUS  reason" per line).
"""
import json
import re
import sys
from urllib.parse import urlparse


def operations(doc):
    for path, item in doc["paths"].items():
        for method, op in item.items():
            pattern = "^" + re.sub(r"\{[^}]+\}", "[^/]+", re.escape(path).replace(r"\{", "{").replace(r"\}", "}")) + "$"
            yield method.upper(), path, re.compile(pattern), set(op["responses"])


def main():
    args = sys.argv[1:]
    allowed = set()
    if "--allow-unreached" in args:
        i = args.index("--allow-unreached")
        with open(args[i + 1]) as f:
            for line in f:
                line = line.split("#")[0].strip()
                if line:
                    method, path, status = line.split()[:3]
                    allowed.add((method, path, status))
        del args[i : i + 2]
    doc = json.load(open(args[0]))
    entries = [e for path in args[1:] for e in json.load(open(path))["log"]["entries"]]
    ops = list(operations(doc))
    seen = {}
    for entry in entries:
        method = entry["request"]["method"].upper()
        path = urlparse(entry["request"]["url"]).path
        status = str(entry["response"]["status"])
        for op_method, op_path, pattern, _ in ops:
            if op_method == method and pattern.match(path):
                key = (method, op_path, status)
                seen[key] = seen.get(key, 0) + 1
                break
    missing = []
    for method, path, _, statuses in ops:
        for status in sorted(statuses):
            count = seen.get((method, path, status), 0)
            note = ""
            if count == 0:
                if (method, path, status) in allowed:
                    note = "  (not reached here; see the allow list for the test that proves it)"
                else:
                    note = "  NOT REACHED"
                    missing.append((method, path, status))
            print(f"{method:5} {path:22} {status}  {count:6}{note}")
    undocumented = [k for k in seen if k[2] not in next(s for m, p, _, s in ops if (m, p) == k[:2])]
    for method, path, status in undocumented:
        print(f"{method:5} {path:22} {status}  {seen[(method, path, status)]:6}  UNDOCUMENTED")
    if missing or undocumented:
        sys.exit(1)


main()
