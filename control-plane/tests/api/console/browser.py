"""The console in a real browser: Debian's Chromium, headless, driven by Playwright.

Run by tests/api/console/browser.rs, which starts Warden, a proxy and a mock provider
and passes what it made as one JSON argument: {base, proxy, admin_key, reader_key,
proxy_key, agent_id, agent_name, xss_agent_id, chromium, axe, screenshots}.

Each step prints what it checked; the first failure raises, and the exit status is
not 0. Every page visited is scanned with axe-core (no serious or critical violation
allowed) and photographed into the screenshots folder; no page may log an error (a
Content-Security-Policy refusal shows there) or open a dialog.
"""

import json
import sys
import urllib.error
import urllib.request
from pathlib import Path

from playwright.sync_api import expect, sync_playwright

CONFIG = json.loads(sys.argv[1])
BASE = CONFIG["base"]
AXE = Path(CONFIG["axe"]).read_text()
SHOTS = Path(CONFIG["screenshots"])
SHOTS.mkdir(parents=True, exist_ok=True)
PROBLEMS = []


def step(text):
    print(f"ok: {text}", flush=True)


def agent_asks(model):
    """An agent's chat request through the proxy: the status it gets."""
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]})
    request = urllib.request.Request(
        CONFIG["proxy"] + "/v1/chat/completions",
        data=body.encode(),
        headers={
            "authorization": "Bearer " + CONFIG["proxy_key"],
            "content-type": "application/json",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code


def watch(page):
    """Records console errors and dialogs of `page` as problems."""
    def console(message):
        # A refused sign-in is answered 401, which Chromium logs like a failed load.
        expected = "status of 401" in message.text and "/console/sign-in" in page.url
        if message.type == "error" and not expected:
            PROBLEMS.append(f"{page.url}: console error: {message.text}")

    page.on("console", console)
    page.on("pageerror", lambda error: PROBLEMS.append(f"{page.url}: {error}"))

    def dialog(d):
        PROBLEMS.append(f"{page.url}: a dialog opened: {d.message}")
        d.dismiss()

    page.on("dialog", dialog)
    return page


def check(page, name):
    """Scans the page with axe-core and photographs it."""
    # evaluate() runs through the DevTools protocol, not as a page script: the page's
    # Content-Security-Policy still applies to everything the page itself loads.
    page.evaluate(AXE + "\n;0")
    violations = page.evaluate(
        """() => axe.run(document, {resultTypes: ['violations']}).then(r =>
            r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,
                                    targets: v.nodes.map(n => n.target.join(' ') +
                                        (n.any[0] && n.any[0].data && n.any[0].data.fgColor
                                         ? ` (${n.any[0].data.fgColor} on ${n.any[0].data.bgColor}: ${n.any[0].data.contrastRatio})`
                                         : ''))})))"""
    )
    serious = [v for v in violations if v["impact"] in ("serious", "critical")]
    for violation in serious:
        # A few of the elements are enough to find the rest.
        count = len(violation["targets"])
        violation["targets"] = violation["targets"][:5] + ([f"... {count} in all"] if count > 5 else [])
    if serious:
        PROBLEMS.append(f"{name}: accessibility: {json.dumps(serious)}")
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)
    step(f"{name}: scanned ({len(violations)} minor findings) and photographed")


def requests_on_load(page, path):
    """Loads `path` and returns the requests the page made to the server for it, besides
    static assets: a page must need at most three (no request per row)."""
    made = []
    listener = lambda request: made.append(request.url)
    page.on("request", listener)
    page.goto(BASE + path)
    page.wait_for_load_state("load")
    page.wait_for_timeout(500)
    page.remove_listener("request", listener)
    own = [url for url in made if url.startswith(BASE) and "/console/assets/" not in url]
    if len(own) > 3:
        PROBLEMS.append(f"{path}: {len(own)} requests on load: {own}")
    return own


def sign_in_with_key(page, key):
    page.goto(BASE + "/console/sign-in")
    page.get_by_text("Sign in with an API key").click()
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Sign in with the key").click()
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()


def passwords(browser):
    page = watch(browser.new_context().new_page())
    page.goto(BASE + "/")
    expect(page).to_have_url(BASE + "/console/sign-in?next=%2Fconsole")
    check(page, "sign-in")
    page.get_by_role("link", name="Create an organisation").click()
    check(page, "sign-up")
    page.get_by_label("Organisation name").fill("Browser Test Org")
    page.get_by_label("Email").fill("owner@browser.example")
    page.get_by_label("Password (10 to 256 characters)").fill("a-long-password")
    page.get_by_role("button", name="Sign up").click()
    expect(page.get_by_role("heading", name="Your organisation is ready")).to_be_visible()
    key = page.get_by_label("API key").input_value()
    assert key.startswith("wdn_"), key
    check(page, "signed-up")
    page.get_by_role("link", name="Go to the console").click()
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("heading", name="Sign in to Warden")).to_be_visible()
    step("signed up, reached the console, signed out")

    page.get_by_label("Email").fill("owner@browser.example")
    page.get_by_label("Password").fill("not-the-password")
    page.get_by_role("button", name="Sign in", exact=True).click()
    expect(page.get_by_role("alert")).to_contain_text("The email or the password is wrong.")
    step("a wrong password is refused")
    page.get_by_label("Password").fill("a-long-password")
    page.get_by_role("button", name="Sign in", exact=True).click()
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()
    expect(page.get_by_text("owner@browser.example")).to_be_visible()
    step("signed in with the password")
    page.context.close()


def approvals_and_kill_switch(browser):
    page = watch(browser.new_context().new_page())
    sign_in_with_key(page, CONFIG["admin_key"])
    step("signed in with an API key")
    check(page, "overview")

    page.get_by_role("link", name="Approvals", exact=True).click()
    expect(page.get_by_role("heading", name="Approvals", exact=True)).to_be_visible()
    expect(page.locator("#queue")).to_contain_text("Nothing waits for a reviewer.")
    # The page is open; the agent asks; the queue shows it without a reload.
    status = agent_asks("gpt-4o")
    assert status == 403, status
    expect(page.locator("#queue")).to_contain_text("openai gpt-4o", timeout=15_000)
    step("a held request appeared on the open approvals page without a reload")
    check(page, "approvals")
    page.get_by_label("Reason (optional)").fill("release day")
    page.get_by_role("button", name="Approve").click()
    expect(page.get_by_role("status")).to_contain_text("in force on every connected proxy")
    status = agent_asks("gpt-4o")
    assert status == 200, status
    step("approved in the console; the agent's retry passed")

    page.get_by_role("link", name="Agents", exact=True).click()
    check(page, "agents")
    page.get_by_role("link", name=CONFIG["agent_name"], exact=True).click()
    expect(page.get_by_role("heading", name=CONFIG["agent_name"])).to_be_visible()
    check(page, "agent")
    page.get_by_label("Why block it?").fill("runaway loop")
    page.get_by_label("to confirm").first.fill(CONFIG["agent_name"])
    page.get_by_role("button", name="Block").click()
    expect(page.get_by_role("status")).to_contain_text("in force on every connected proxy")
    expect(page.get_by_role("alert")).to_contain_text("Reason: runaway loop")
    status = agent_asks("gpt-4o-mini")
    assert status == 403, status
    step("blocked from the agent's page; the very next request was refused")
    check(page, "agent-blocked")
    page.get_by_label("to unblock it").fill(CONFIG["agent_name"])
    page.get_by_role("button", name="Unblock").click()
    expect(page.get_by_role("status")).to_contain_text("in force on every connected proxy")
    status = agent_asks("gpt-4o-mini")
    assert status == 200, status
    step("unblocked; requests pass again")

    # A name written to run script is shown as text.
    page.goto(BASE + "/console/agents/" + CONFIG["xss_agent_id"])
    expect(page.get_by_role("heading", name="<img src=x onerror=alert(1)>")).to_be_visible()
    step("an agent named like markup shows as text")

    # Another site's form posting into the console with this browser's cookie.
    forged = page.request.post(
        BASE + "/console/agents/" + CONFIG["agent_id"] + "/block",
        headers={"origin": "https://evil.example"},
        form={"csrf": "x", "reason": "x", "confirm": CONFIG["agent_name"]},
    )
    assert forged.status == 403, forged.status
    assert agent_asks("gpt-4o-mini") == 200
    step("a cross-site post was refused and changed nothing")
    for path in ["/console", "/console/approvals", "/console/agents",
                 "/console/agents/" + CONFIG["agent_id"], "/console/keys"]:
        own = requests_on_load(page, path)
        step(f"{path}: {len(own)} requests to the server on load")
    page.context.close()


def keys(browser):
    context = browser.new_context()
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=BASE)
    page = watch(context.new_page())
    sign_in_with_key(page, CONFIG["admin_key"])
    page.get_by_role("link", name="Keys", exact=True).click()
    check(page, "keys")
    page.get_by_label("Label (an agent of this name is registered behind it)").fill("browser-bot")
    page.get_by_role("button", name="Create the proxy key").click()
    expect(page.get_by_role("heading", name="New proxy key: browser-bot")).to_be_visible()
    check(page, "key-created")
    key = page.get_by_label("The proxy key").input_value()
    page.get_by_role("button", name="Copy").click()
    expect(page.get_by_role("button", name="Copied")).to_be_visible()
    assert page.evaluate("navigator.clipboard.readText()") == key
    step("a new proxy key is shown once and copied with its button")
    page.get_by_role("link", name="Back to the keys").click()
    row = page.get_by_role("row").filter(has_text="browser-bot")
    row.get_by_role("button", name="Revoke browser-bot").click()
    # The confirmation box is required: the browser keeps the form until it is ticked.
    expect(page.get_by_role("heading", name="Keys", exact=True)).to_be_visible()
    assert "revoked" not in page.url
    row.get_by_label("Its agent stops at once").check()
    row.get_by_role("button", name="Revoke browser-bot").click()
    expect(page.get_by_role("status")).to_contain_text("revoked")
    step("revoking asks for confirmation, then revokes")
    context.close()


def records(browser):
    """The costs and the audit trail: charts, tables, the chain's badge, downloads."""
    page = watch(browser.new_context(accept_downloads=True).new_page())
    sign_in_with_key(page, CONFIG["admin_key"])
    page.get_by_role("link", name="Costs", exact=True).click()
    expect(page.get_by_role("heading", name="Costs", exact=True)).to_be_visible()
    expect(page.get_by_role("img", name="Spend per day")).to_be_visible()
    check(page, "costs")
    with page.expect_download() as download:
        page.locator("#series-heading").locator("..").get_by_role("link", name="Download as CSV").click()
    csv = Path(download.value.path()).read_text()
    assert csv.startswith("timestamp,cost_usd,"), csv[:80]
    # This month day by day: from the 1st to today, a row each.
    lines = csv.splitlines()
    first, last = lines[1][:10], lines[-1][:10]
    assert first.endswith("-01") and first[:7] == last[:7], (first, last)
    assert len(lines) == int(last[8:10]) + 1, (len(lines), last)
    step("costs: chart, tables, and the series downloaded as CSV")

    page.get_by_role("link", name="Audit trail", exact=True).click()
    expect(page.get_by_role("heading", name="Audit trail")).to_be_visible()
    expect(page.locator("#verification")).to_contain_text("Hash chain intact", timeout=15_000)
    check(page, "audit")
    page.get_by_label("Event type").fill("agent.blocked")
    page.get_by_role("button", name="Filter").click()
    expect(page).to_have_url(BASE + "/console/audit?event_type=agent.blocked&target_id=&actor=&from=&to=")
    rows = page.locator("#events tbody tr")
    expect(rows.first).to_contain_text("agent.blocked")
    rows.first.get_by_text("Details").click()
    expect(rows.first.locator("pre")).to_contain_text("runaway loop")
    with page.expect_download() as download:
        page.get_by_role("link", name="JSON").click()
    events = json.loads(Path(download.value.path()).read_text())
    assert events and all(e["event_type"] == "agent.blocked" for e in events), events
    step(f"audit trail: verified, filtered, details opened, {len(events)} events exported")
    for path in ["/console/costs", "/console/audit"]:
        own = requests_on_load(page, path)
        step(f"{path}: {len(own)} requests to the server on load")
    page.context.close()


def compliance(browser):
    """Readiness, an agent's FRIA written and submitted, its card, an incident."""
    page = watch(browser.new_context().new_page())
    sign_in_with_key(page, CONFIG["admin_key"])
    page.get_by_role("link", name="Compliance", exact=True).click()
    expect(page.get_by_role("heading", name="Compliance", exact=True)).to_be_visible()
    check(page, "compliance")
    page.goto(BASE + "/console/agents/" + CONFIG["agent_id"] + "/compliance")
    expect(page.locator("#suggestion")).to_contain_text("The rules suggest")
    for label in ["The processes the agent is used in", "How often and how widely it is used",
                  "Categories of persons affected", "Specific risks of harm",
                  "Human oversight measures", "Measures if the risks materialise"]:
        page.get_by_label(label).fill(label + ": written in the browser test")
    page.get_by_role("button", name="Save as a draft").click()
    expect(page.locator("#fria-status")).to_contain_text("Version 1: draft")
    check(page, "agent-compliance")
    page.get_by_role("button", name="Submit version 1").click()
    expect(page.locator("#fria-status")).to_contain_text("Version 1: submitted")
    step("a FRIA written and submitted from the agent's compliance page")
    page.get_by_role("link", name="Transparency card (printable)").click()
    expect(page.get_by_role("heading", name=CONFIG["agent_name"])).to_be_visible()
    check(page, "transparency-card")
    page.emulate_media(media="print")
    assert not page.get_by_role("navigation", name="Console").is_visible()
    page.emulate_media(media="screen")
    step("the transparency card prints without the console around it")

    page.goto(BASE + "/console/compliance")
    page.get_by_text("Report an incident").click()
    page.get_by_label("Agent id").fill(CONFIG["agent_id"])
    page.get_by_label("Title").fill("Wrong answers to customers")
    page.get_by_label("Description").fill("The agent quoted prices that do not exist.")
    page.get_by_role("button", name="Report the incident").click()
    expect(page.get_by_role("heading", name="Wrong answers to customers")).to_be_visible()
    expect(page.locator("#deadline")).to_contain_text("due in 15 d 0 h")
    check(page, "incident")
    page.get_by_label("New status").select_option("investigating")
    page.get_by_label("Note").fill("looking into it")
    page.get_by_role("button", name="Record the update").click()
    expect(page.locator("#updates")).to_contain_text("looking into it")
    step("an incident reported, its deadline counting down, an update recorded")
    page.context.close()


def policies(browser):
    """The policy list and the dry run through its form."""
    page = watch(browser.new_context().new_page())
    sign_in_with_key(page, CONFIG["admin_key"])
    page.get_by_role("link", name="Policies", exact=True).click()
    expect(page.get_by_role("heading", name="Policies", exact=True)).to_be_visible()
    page.get_by_label("Agent id").fill(CONFIG["agent_id"])
    page.get_by_label("Provider", exact=True).fill("openai")
    page.get_by_label("Model (or server__tool)").fill("gpt-4o")
    page.get_by_role("button", name="Evaluate").click()
    # Approved earlier in this run, so the approval policy passes it for the hour.
    expect(page.locator("#dry-run-verdict")).to_contain_text("The request would pass.")
    expect(page.locator("#dry-run")).to_contain_text("approved by a reviewer")
    check(page, "policies")
    step("the dry run shows the approval policy passing the approved model")
    page.context.close()


def administration(browser):
    """Anomalies, MCP servers, notification channels and billing: reachable from the
    navigation, scanned and photographed."""
    page = watch(browser.new_context().new_page())
    sign_in_with_key(page, CONFIG["admin_key"])
    for link, heading, name in [
        ("Anomalies", "Anomalies", "anomalies"),
        ("MCP servers", "MCP servers", "mcp-servers"),
        ("Notifications", "Notification channels", "notifications"),
        ("Billing", "Billing", "billing"),
    ]:
        page.get_by_role("link", name=link, exact=True).click()
        expect(page.get_by_role("heading", name=heading, exact=True)).to_be_visible()
        check(page, name)
    page.get_by_label("Plan", exact=True).select_option("professional")
    page.get_by_role("button", name="Change the plan").click()
    expect(page.locator("#plan-change")).to_contain_text("Upgrade from starter to professional")
    step("billing: an upgrade answers its checkout link")
    for path in ["/console/anomalies", "/console/mcp-servers", "/console/notifications",
                 "/console/billing", "/console/compliance", "/console/policies"]:
        own = requests_on_load(page, path)
        step(f"{path}: {len(own)} requests to the server on load")
    page.context.close()


def reference(browser):
    """The API reference renders every operation of the OpenAPI document."""
    page = watch(browser.new_context().new_page())
    page.goto(BASE + "/docs")
    operations = page.locator("[data-section-id*='operation/'], [data-section-id*='paths/']")
    expect(operations.first).to_be_attached(timeout=60_000)
    with urllib.request.urlopen(BASE + "/api/v1/openapi.json", timeout=30) as answer:
        document = json.load(answer)
    methods = {"get", "put", "post", "delete", "patch", "head", "options", "trace"}
    expected = sum(1 for item in document["paths"].values() for m in item if m in methods)
    # Redoc marks each operation's section `tag/<tag>/operation/<operationId>`.
    shown = page.evaluate(
        """() => new Set([...document.querySelectorAll("[data-section-id^='tag/']")]
            .map(e => e.getAttribute('data-section-id'))
            .filter(id => /^tag\\/[^/]+\\/(operation|paths)\\//.test(id))).size"""
    )
    assert shown == expected, f"{shown} operations shown, {expected} in the document"
    check(page, "docs")
    step(f"/docs renders all {expected} operations of the OpenAPI document")
    page.context.close()


def read_only(browser):
    page = watch(browser.new_context().new_page())
    sign_in_with_key(page, CONFIG["reader_key"])
    page.goto(BASE + "/console/agents/" + CONFIG["agent_id"])
    expect(page.get_by_role("heading", name=CONFIG["agent_name"])).to_be_visible()
    assert page.get_by_role("button", name="Block").count() == 0
    assert page.get_by_role("button", name="Quarantine").count() == 0
    page.goto(BASE + "/console/approvals")
    assert page.get_by_role("button", name="Approve").count() == 0
    check(page, "approvals-read-only")
    csrf = page.locator("input[name=csrf]").first.input_value()
    forged = page.request.post(
        BASE + "/console/agents/" + CONFIG["agent_id"] + "/block",
        headers={"origin": BASE},
        form={"csrf": csrf, "reason": "x", "confirm": CONFIG["agent_name"]},
    )
    assert forged.status == 403, forged.status
    assert agent_asks("gpt-4o-mini") == 200
    step("a read-only person sees no action, and a post made by hand is refused")
    page.context.close()


with sync_playwright() as playwright:
    chromium = playwright.chromium.launch(executable_path=CONFIG["chromium"], args=["--no-sandbox"])
    passwords(chromium)
    approvals_and_kill_switch(chromium)
    keys(chromium)
    records(chromium)
    compliance(chromium)
    policies(chromium)
    administration(chromium)
    reference(chromium)
    read_only(chromium)
    chromium.close()

if PROBLEMS:
    print("\n".join(PROBLEMS), file=sys.stderr)
    sys.exit(1)
print("all console browser checks passed", flush=True)
