#!/usr/bin/env python3
"""Seeds a running `warden dev` with one of everything the API's paths name, so that
schemathesis exercises every operation past authentication and lookup.

Usage: schemathesis_fixtures.py API PROXY PLATFORM_KEY OUT_DIR

Writes OUT_DIR/tenant_key (the fuzzed tenant's admin key) and OUT_DIR/fixtures.toml:
dictionaries binding each path parameter to a live id (most draws; the rest stay
generated, so unknown ids are still tried), and per-operation ids for the operations
that delete, so that a deletion never takes another operation's fixture away. The
tenant's own admin key is never offered to `DELETE /auth/api-keys/{key_id}`.
"""

import json
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

API, PROXY, PLATFORM_KEY, OUT = sys.argv[1:5]


def call(method, path, key, body=None, base=None, expect=None):
    url = (base or API + "/api/v1") + path
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("authorization", f"Bearer {key}")
    if data is not None:
        request.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status, text = response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        status, text = error.code, error.read().decode()
    if expect is not None and status not in expect:
        sys.exit(f"fixture {method} {path}: {status} {text}")
    return json.loads(text) if text.strip().startswith("{") else {}


def created(path, key, body):
    return call("POST", path, key, body, expect=(200, 201))["data"]


def certificate():
    """A self-signed certificate valid for a year, as an IdP's would be."""
    with tempfile.TemporaryDirectory() as folder:
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "365",
             "-subj", "/CN=fuzz-idp", "-keyout", f"{folder}/key.pem", "-out", f"{folder}/cert.pem"],
            check=True, capture_output=True,
        )
        return open(f"{folder}/cert.pem").read()


def main():
    tenant = created("/admin/tenants", PLATFORM_KEY,
                     {"company_name": "Schemathesis", "owner_email": "fuzz@example.com", "plan": "enterprise"})
    key, tenant_id = tenant["api_key"], tenant["id"]
    doomed_tenant = created("/admin/tenants", PLATFORM_KEY,
                            {"company_name": "Doomed", "owner_email": "doomed@example.com", "plan": "starter"})

    team = created("/teams", key, {"name": "fuzzers"})
    doomed_team = created("/teams", key, {"name": "doomed"})
    agent = created("/agents", key, {"name": "fuzz-agent", "team": "fuzzers", "environment": "production"})
    doomed_agent = created("/agents", key, {"name": "doomed-agent"})
    agent_id = agent["id"]
    owner = created(f"/agents/{agent_id}/owners", key,
                    {"owner_type": "user", "owner_id": "ana@example.com", "owner_name": "Ana"})
    doomed_owner = created(f"/agents/{agent_id}/owners", key,
                           {"owner_type": "user", "owner_id": "bob@example.com", "owner_name": "Bob"})

    # An anomaly: a daily cost the tenant set, crossed (the detector passes every second).
    rule = created("/anomaly-rules", key, {"anomaly_type": "cost_spike", "threshold_config": {"daily_cost_usd": 0.01}})
    doomed_rule = created("/anomaly-rules", key, {"anomaly_type": "security_threat", "enabled": False})
    call("POST", "/telemetry/usage", key, {"agent_id": agent_id, "model_provider": "openai",
         "model_name": "gpt-4o", "input_tokens": 10, "output_tokens": 10, "cost_usd": 1.0}, expect=(201,))
    anomaly = None
    for _ in range(100):
        listed = call("GET", "/anomalies", key, expect=(200,))["data"]
        if listed:
            anomaly = listed[0]
            break
        time.sleep(0.1)
    if anomaly is None:
        sys.exit("fixture: no anomaly was detected")

    # An approval: a request through the proxy held by a policy.
    policy = created("/policies", key, {"name": "approve o3", "policy_type": "require_approval",
                                        "config": {"models": ["o3"]}})
    doomed_policy = created("/policies", key, {"name": "doomed", "policy_type": "block_provider",
                                               "config": {"providers": ["google"]}})
    proxy_key = created("/proxy-keys", key, {"agent_id": agent_id, "developer_label": "fuzz"})
    doomed_proxy_key = created("/proxy-keys", key, {"agent_id": agent_id, "developer_label": "doomed"})
    approval = None
    for _ in range(100):
        call("POST", "/chat/completions", proxy_key["raw_key"],
             {"model": "o3", "messages": [{"role": "user", "content": "hi"}]}, base=PROXY + "/v1")
        listed = call("GET", "/approvals", key, expect=(200,))["data"]
        if listed:
            approval = listed[0]
            break
        time.sleep(0.1)
    if approval is None:
        sys.exit("fixture: no approval was queued")

    api_key = created("/auth/api-keys", key, {"name": "throwaway", "scopes": ["registry:read"]})
    # A team's limit, not the tenant's: a tenant-wide one is left for the fuzzer to create.
    limit = created("/budget/limits", key, {"team_id": team["id"], "monthly_limit_usd": 1000})
    doomed_limit = created("/budget/limits", key, {"agent_id": agent_id, "monthly_limit_usd": 1000})
    fria = created(f"/agents/{agent_id}/fria", key, {
        "processes": "Screens loan applications", "frequency_and_scope": "Continuously",
        "categories_of_persons": "Applicants", "specific_risks": "Discrimination",
        "human_oversight_measures": "An officer reviews refusals",
        "risk_mitigation_measures": "Bias audits"})
    incident = created("/incidents", key, {"agent_id": agent_id, "title": "Wrong advice", "severity": "high",
                                           "description": "Advised wrongly", "impact": "None yet",
                                           "affected_persons_count": 1})
    managed = created("/managed-keys", key, {"provider": "openai", "label": "prod",
                                             "secret_ref": f"warden/managed/{tenant_id}/openai"})
    server = created("/mcp-servers", key, {"name": "docs", "url": "https://8.8.8.8/mcp"})
    doomed_server = created("/mcp-servers", key, {"name": "doomed", "url": "https://8.8.4.4/mcp"})
    channel = created("/notifications/channels", key, {"name": "ops", "channel_type": "webhook",
                                                       "events": ["agent.blocked"],
                                                       "config": {"url": "https://8.8.8.8/hooks"}})
    doomed_channel = created("/notifications/channels", key, {"name": "doomed", "channel_type": "webhook",
                                                              "events": ["agent.blocked"],
                                                              "config": {"url": "https://8.8.4.4/hooks"}})
    template = call("GET", "/policy-templates", key, expect=(200,))["data"][0]["id"]
    # A self-service tenant (free plan) with a password: login and the billing changes
    # that only a free tenant can make (an upgrade's checkout, the free slot).
    login = {"email": "signup@example.com", "password": "a-long-fuzz-password"}
    signup = call("POST", "/auth/signup", "-", {**login, "company_name": "Signed up"}, expect=(201,))["data"]
    free_agent = created("/agents", signup["api_key"], {"name": "free-slot-agent"})
    cert = certificate()
    call("POST", "/sso/config", key, {"provider_name": "fuzz-idp", "idp_entity_id": "https://idp.example.com",
                                      "idp_sso_url": "https://idp.example.com/sso",
                                      "idp_x509_cert": cert}, expect=(200, 201))
    call("POST", "/sso/enable", key, {}, expect=(200, 204))

    shared = {
        "tenant_id": tenant_id,
        "agent_id": agent_id,
        "team_id": team["id"],
        "anomaly_id": anomaly["id"],
        "rule_id": rule["id"],
        "approval_id": approval["id"],
        "request_id": approval["id"],
        "limit_id": limit["id"],
        "fria_id": fria["id"],
        "incident_id": incident["id"],
        "server_id": server["id"],
        "channel_id": channel["id"],
        "template_id": template,
        "policy_id": policy["id"],
    }
    per_operation = {
        "DELETE /api/v1/admin/tenants/{tenant_id}": {"tenant_id": doomed_tenant["id"]},
        "DELETE /api/v1/agents/{agent_id}": {"agent_id": doomed_agent["id"]},
        "DELETE /api/v1/agents/{agent_id}/owners/{owner_id}": {"agent_id": agent_id, "owner_id": doomed_owner["id"]},
        "GET /api/v1/owners/{owner_id}/agents": {"owner_id": owner["owner_id"]},
        "DELETE /api/v1/anomaly-rules/{rule_id}": {"rule_id": doomed_rule["id"]},
        "DELETE /api/v1/auth/api-keys/{key_id}": {"key_id": api_key["id"]},
        "DELETE /api/v1/budget/limits/{limit_id}": {"limit_id": doomed_limit["id"]},
        "DELETE /api/v1/managed-keys/{managed_key_id}": {"managed_key_id": managed["id"]},
        "DELETE /api/v1/mcp-servers/{server_id}": {"server_id": doomed_server["id"]},
        "DELETE /api/v1/notifications/channels/{channel_id}": {"channel_id": doomed_channel["id"]},
        "DELETE /api/v1/policies/{policy_id}": {"policy_id": doomed_policy["id"]},
        "DELETE /api/v1/proxy-keys/{api_key_id}": {"api_key_id": doomed_proxy_key["api_key_id"]},
        "DELETE /api/v1/teams/{team_id}": {"team_id": doomed_team["id"]},
    }
    bodies = {
        "POST /api/v1/auth/login": {"body.email": login["email"], "body.password": login["password"]},
        "POST /api/v1/sso/config": {"body.idp_x509_cert": cert},
        "PATCH /api/v1/billing/free-slot": {"body.agent_id": free_agent["id"]},
    }
    free_key = signup["api_key"]
    own_key = ["POST /api/v1/billing/checkout", "PATCH /api/v1/billing/free-slot"]
    toml = ["# Written by .ci/schemathesis_fixtures.py for this run.", ""]
    for name, value in shared.items():
        toml += [f"[dictionaries.{name}]", f"values = [{json.dumps(value)}]", ""]
    toml.append("[parameters]")
    for name in shared:
        toml.append(f'"path.{name}" = {{ dictionary = "{name}", probability = 0.9 }}')
    toml.append("")
    for operation, values in per_operation.items():
        bound = ", ".join(f'"path.{name}" = {json.dumps(value)}' for name, value in values.items())
        toml += ["[[operations]]", f"include-name = {json.dumps(operation)}", f"parameters = {{ {bound} }}"]
        toml.append("")
    # Bodies that must carry a real value (a password, a certificate) take it from a
    # dictionary most of the time; other draws stay generated.
    for operation, fields in bodies.items():
        bound = []
        for field, value in fields.items():
            dictionary = field.replace(".", "_")
            toml[2:2] = [f"[dictionaries.{dictionary}]", f"values = [{json.dumps(value)}]", ""]
            bound.append(f'"{field}" = {{ dictionary = "{dictionary}", probability = 0.8 }}')
        toml += ["[[operations]]", f"include-name = {json.dumps(operation)}",
                 f"parameters = {{ {', '.join(bound)} }}", ""]
    for operation in own_key:
        toml += ["[[operations]]", f"include-name = {json.dumps(operation)}",
                 f'headers = {{ Authorization = "Bearer {free_key}" }}', ""]
    open(f"{OUT}/fixtures.toml", "w").write("\n".join(toml))
    open(f"{OUT}/tenant_key", "w").write(key)


main()
