#!/usr/bin/env python3
"""Fails when a fuzzed operation never answered 2xx: schemathesis then tested only its
authentication or lookup, not the operation.

Usage: schemathesis_coverage.py OPENAPI_JSON HAR [HAR ...]

Every operation of the document (but the proxies' state stream) must have at least one 2xx answer
among the recorded exchanges, except those in EXEMPT, each with the reason no fuzzer
can get one.
"""

import json
import re
import sys
from collections import defaultdict
from urllib.parse import urlparse

EXEMPT = {
    # Takes only an assertion a real IdP signed for a pending request (tests/api/sso).
    "POST /api/v1/sso/{tenant_id}/saml/acs": "needs an IdP's signed assertion",
    # Answers 302 to the IdP by design; a redirect counts below.
    "GET /api/v1/sso/{tenant_id}/saml/login": "redirects (3xx) by design",
    # Takes only events signed with the billing provider's secret (tests/api/billing.rs).
    "POST /api/v1/billing/webhook": "needs the billing provider's signature",
    # Approving lists the server's tools over MCP; the fixture's server is not reachable
    # from here (tests/api/proxy/mcp_gateway approve real servers).
    "POST /api/v1/mcp-servers/{server_id}/approve": "needs a reachable MCP server",
}


def operations(document):
    found = []
    for path, methods in document["paths"].items():
        if path == "/internal/v1/proxy-state":
            continue
        pattern = re.compile("^" + re.sub(r"\{[^/]+\}", "[^/]+", path) + "$")
        literal = path.count("{")
        for method in methods:
            found.append((literal, f"{method.upper()} {path}", method.upper(), pattern))
    # Literal segments first: `/agents/expired` before `/agents/{agent_id}`.
    found.sort(key=lambda op: op[0])
    return found


def main():
    document = json.load(open(sys.argv[1]))
    ops = operations(document)
    statuses = defaultdict(set)
    for har in sys.argv[2:]:
        for entry in json.load(open(har))["log"]["entries"]:
            method = entry["request"]["method"]
            path = urlparse(entry["request"]["url"]).path
            for _, name, op_method, pattern in ops:
                if op_method == method and pattern.match(path):
                    statuses[name].add(entry["response"]["status"])
                    break
    missing = []
    for _, name, _, _ in ops:
        answered = statuses.get(name, set())
        ok = any(200 <= s < 300 for s in answered)
        if name == "GET /api/v1/sso/{tenant_id}/saml/login":
            ok = any(300 <= s < 400 for s in answered)
        if not ok and name not in EXEMPT:
            missing.append(f"  {name}: answered {sorted(answered) or 'nothing'}")
        if ok and name in EXEMPT and name != "GET /api/v1/sso/{tenant_id}/saml/login":
            print(f"note: {name} answered 2xx; it need not be exempt any more")
    print(f"{len(ops)} operations, {len(ops) - len(missing)} answered 2xx or are exempt "
          f"({len(EXEMPT)} exempt)")
    if missing:
        print("operations that never answered 2xx (fuzzing never got past their checks):")
        print("\n".join(missing))
        sys.exit(1)


main()
