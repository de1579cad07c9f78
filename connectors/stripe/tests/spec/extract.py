#!/usr/bin/env python3
"""Trims Stripe's OpenAPI spec to what recon reads of balance transactions
and payouts: the two object schemas (and `fee`, the items of
`fee_details`), the query parameters of their list and retrieve endpoints,
the list envelope, and Stripe's newest fixtures of both objects.

    git -C STRIPE_OPENAPI show COMMIT:openapi/spec3.yaml > spec3.yaml
    git -C STRIPE_OPENAPI show HEAD:openapi/fixtures3.json > fixtures3.json
    python3 extract.py spec3.yaml COMMIT fixtures3.json FIXTURES_COMMIT > stripe-finance.json

Types are reduced to JSON types: an `anyOf` of an ID string and expandable
objects (`source`, `balance_transaction`) becomes ["string", "object"].
"""
import json
import sys

import yaml

spec_path, spec_commit, fixtures_path, fixtures_commit = sys.argv[1:5]
spec = yaml.safe_load(open(spec_path))
fixtures = json.load(open(fixtures_path))["resources"]


def types(s):
    if "anyOf" in s:
        out = []
        for alt in s["anyOf"]:
            for t in types(alt):
                if t not in out:
                    out.append(t)
        return out
    if "$ref" in s:
        return ["object"]
    return [s["type"]]


def prop(s):
    p = {"types": types(s), "nullable": bool(s.get("nullable", False))}
    if s.get("format"):
        p["format"] = s["format"]
    if "enum" in s and s.get("type") == "string":
        p["enum"] = s["enum"]
    return p


def schema(name):
    s = spec["components"]["schemas"][name]
    return {
        "required": sorted(s.get("required", [])),
        "properties": {k: prop(v) for k, v in sorted(s["properties"].items())},
    }


def params(path, method="get"):
    out = {}
    for p in spec["paths"][path][method].get("parameters", []):
        if p["in"] != "query":
            continue
        s = p["schema"]
        if "anyOf" in s and any("properties" in a for a in s["anyOf"]):
            rng = next(a for a in s["anyOf"] if "properties" in a)
            out[p["name"]] = {"range": sorted(rng["properties"]), "or": "integer"}
        else:
            out[p["name"]] = prop(s)
    return out


def envelope(path):
    s = spec["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    props = s["properties"]
    return {
        "required": sorted(s["required"]),
        "data_items": props["data"]["items"]["$ref"].rsplit("/", 1)[1],
        "object": props["object"]["enum"],
        "url_pattern": props["url"].get("pattern"),
    }


out = {
    "source": {
        "repo": "stripe/openapi",
        "path": "openapi/spec3.yaml",
        "commit": spec_commit,
        "api_version": spec["info"]["version"],
    },
    "fixtures_source": {
        "repo": "stripe/openapi",
        "path": "openapi/fixtures3.json",
        "commit": fixtures_commit,
    },
    "schemas": {n: schema(n) for n in ["balance_transaction", "payout", "fee"]},
    "endpoints": {
        "/v1/balance_transactions": {"query": params("/v1/balance_transactions"),
                                     "list": envelope("/v1/balance_transactions")},
        "/v1/balance_transactions/{id}": {"query": params("/v1/balance_transactions/{id}")},
        "/v1/payouts": {"query": params("/v1/payouts"), "list": envelope("/v1/payouts")},
        "/v1/payouts/{payout}": {"query": params("/v1/payouts/{payout}")},
    },
    "fixtures": {n: fixtures[n] for n in ["balance_transaction", "payout"]},
}
json.dump(out, sys.stdout, indent=1, sort_keys=True)
sys.stdout.write("\n")
