#!/usr/bin/env python3
"""Check recorded ax-api responses against the OpenAPI document.

usage: openapi_check.py OPENAPI.json RESPONSES.jsonl

Each line of RESPONSES.jsonl is {"method","path","status","body"} as the
integration test saw it. Every response must be documented for its path
template, method and status, and its body must validate against that
response's schema (JSON Schema 2020-12, as OpenAPI 3.1 says). Every
documented operation must have been seen with its success status at least
once. Exit 0 if all holds; else 1, printing each violation."""
import json
import re
import sys

import jsonschema


def templates(doc):
    out = []
    for t in doc["paths"]:
        rx = "^" + re.sub(r"\{[^}]+\}", "[^/]+", re.escape(t).replace(r"\{", "{").replace(r"\}", "}")) + "$"
        literal = len([s for s in t.split("/") if s and not s.startswith("{")])
        out.append((literal, t, re.compile(rx)))
    out.sort(key=lambda x: -x[0])
    return out


def main():
    doc = json.load(open(sys.argv[1]))
    tpls = templates(doc)
    seen, bad, n = set(), [], 0
    for line in open(sys.argv[2]):
        r = json.loads(line)
        n += 1
        path = r["path"].split("?")[0]
        tpl = next((t for _, t, rx in tpls if rx.match(path)), None)
        where = "%s %s -> %s" % (r["method"], r["path"], r["status"])
        if not tpl:
            # an unknown path: 404 with the document's Error
            root = {"$ref": "#/components/schemas/Error", "components": doc["components"]}
            if r["status"] != 404:
                bad.append("%s: no path of the document matches" % where)
            for e in list(jsonschema.Draft202012Validator(root).iter_errors(r["body"]))[:3]:
                bad.append("%s: %s" % (where, e.message))
            continue
        op = doc["paths"][tpl].get(r["method"].lower())
        if not op:
            if r["status"] != 405:
                bad.append("%s: %s has no %s" % (where, tpl, r["method"]))
            continue
        resp = op["responses"].get(str(r["status"]))
        if not resp:
            bad.append("%s: status %s is not documented for %s %s" % (where, r["status"], r["method"], tpl))
            continue
        schema = resp["content"]["application/json"]["schema"]
        root = dict(schema)
        root["components"] = doc["components"]
        errors = sorted(jsonschema.Draft202012Validator(root).iter_errors(r["body"]), key=str)
        for e in errors[:3]:
            bad.append("%s: %s at %s" % (where, e.message, "/".join(map(str, e.absolute_path))))
        if 200 <= r["status"] < 300:
            seen.add((r["method"].lower(), tpl))
    for tpl, ops in doc["paths"].items():
        for m, op in ops.items():
            if m == "parameters":
                continue
            if (m, tpl) not in seen:
                bad.append("never seen succeeding: %s %s" % (m.upper(), tpl))
    for b in bad:
        print("openapi: " + b)
    print("openapi: %d responses checked, %d operations seen, %d problem(s)" % (n, len(seen), len(bad)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
