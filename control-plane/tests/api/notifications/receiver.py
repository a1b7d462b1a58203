"""Receivers that check what Warden's notification channels send, for the tests.

One process serves, on an HTTP port:
  POST /slack      a Slack incoming webhook: the Block Kit rules Slack applies
  POST /pagerduty  PagerDuty's Events API v2: the event rules it documents
  POST /webhook    a Standard Webhooks receiver verifying with the `standardwebhooks`
                   library (the secret is set with POST /_secret)
  POST /redirect   answers 302 to the cloud metadata address
  POST /hang       answers after 60 s
  GET  /received   everything received so far, as JSON
and, on an SMTP port, an aiosmtpd server that keeps each message; with --starttls, a
second one that requires STARTTLS before it accepts mail.

Usage: python receiver.py HTTP_PORT SMTP_PORT [--secret WHSEC]
                          [--starttls PORT CERT_PEM KEY_PEM]
A port of 0 takes any free one; once all serve, the first line of the output is
"listening on ports HTTP SMTP [STARTTLS]".
"""

import argparse

import email
import ssl
import email.policy
import json
import threading
import time
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from aiosmtpd.controller import Controller
from standardwebhooks.webhooks import Webhook

LOCK = threading.Lock()
RECEIVED = {"slack": [], "pagerduty": [], "webhook": [], "email": [], "rejected": []}
SECRET = {"value": None}

BLOCK_TYPES = {"header", "section", "context", "divider", "actions", "image", "rich_text"}
PD_SEVERITIES = {"critical", "error", "warning", "info"}


def slack_errors(body):
    errors = []
    if not isinstance(body.get("text"), str) or not body["text"]:
        errors.append("text: the fallback text is required")
    blocks = body.get("blocks")
    if not isinstance(blocks, list) or not 1 <= len(blocks) <= 50:
        return errors + ["blocks: 1 to 50 blocks"]
    for i, block in enumerate(blocks):
        kind = block.get("type")
        if kind not in BLOCK_TYPES:
            errors.append(f"blocks[{i}].type: unknown {kind!r}")
        if kind == "header":
            text = block.get("text", {})
            if text.get("type") != "plain_text" or not 1 <= len(text.get("text", "")) <= 150:
                errors.append(f"blocks[{i}]: a header is plain_text of 1 to 150 characters")
        if kind == "section":
            text = block.get("text", {})
            if text.get("type") not in ("mrkdwn", "plain_text") or not 1 <= len(text.get("text", "")) <= 3000:
                errors.append(f"blocks[{i}].text: 1 to 3000 characters")
            for j, field in enumerate(block.get("fields", [])):
                if not 1 <= len(field.get("text", "")) <= 2000:
                    errors.append(f"blocks[{i}].fields[{j}]: 1 to 2000 characters")
            if len(block.get("fields", [])) > 10:
                errors.append(f"blocks[{i}].fields: at most 10")
        if kind == "context":
            elements = block.get("elements", [])
            if not 1 <= len(elements) <= 10:
                errors.append(f"blocks[{i}].elements: 1 to 10")
    return errors


def pagerduty_errors(body):
    errors = []
    key = body.get("routing_key")
    if not isinstance(key, str) or len(key) != 32:
        errors.append("routing_key: an integration key of 32 characters")
    action = body.get("event_action")
    if action not in ("trigger", "acknowledge", "resolve"):
        errors.append("event_action: trigger, acknowledge or resolve")
    dedup = body.get("dedup_key")
    if dedup is not None and (not isinstance(dedup, str) or len(dedup) > 255):
        errors.append("dedup_key: at most 255 characters")
    if action in ("acknowledge", "resolve") and not dedup:
        errors.append("dedup_key: required to acknowledge or resolve")
    if action == "trigger":
        payload = body.get("payload") or {}
        if not isinstance(payload.get("summary"), str) or not 1 <= len(payload["summary"]) <= 1024:
            errors.append("payload.summary: 1 to 1024 characters")
        if not payload.get("source"):
            errors.append("payload.source: required")
        if payload.get("severity") not in PD_SEVERITIES:
            errors.append("payload.severity: critical, error, warning or info")
        if "timestamp" in payload:
            try:
                datetime.fromisoformat(payload["timestamp"].replace("Z", "+00:00"))
            except (AttributeError, ValueError):
                errors.append("payload.timestamp: ISO 8601")
    return errors


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def answer(self, status, body, content_type="application/json"):
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/received":
            with LOCK:
                return self.answer(200, RECEIVED)
        self.answer(404, {"error": "no such path"})

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("content-length", 0)))
        if self.path == "/_secret":
            SECRET["value"] = json.loads(raw)["secret"]
            return self.answer(204, "")
        if self.path == "/redirect":
            self.send_response(302)
            self.send_header("location", "http://169.254.169.254/latest/meta-data/")
            self.send_header("content-length", "0")
            self.end_headers()
            return
        if self.path == "/hang":
            time.sleep(60)
            return self.answer(200, "late")
        try:
            body = json.loads(raw)
        except ValueError:
            return self.answer(400, {"error": "not JSON"})
        if self.path == "/slack":
            errors = slack_errors(body)
            if errors:
                self.reject("slack", errors)
                return self.answer(400, "invalid_blocks", "text/plain")
            self.keep("slack", body)
            return self.answer(200, "ok", "text/plain")
        if self.path == "/pagerduty":
            errors = pagerduty_errors(body)
            if errors:
                self.reject("pagerduty", errors)
                return self.answer(400, {"status": "invalid event", "message": "Event object is invalid", "errors": errors})
            self.keep("pagerduty", body)
            return self.answer(202, {"status": "success", "message": "Event processed", "dedup_key": body.get("dedup_key")})
        if self.path == "/webhook":
            headers = {name.lower(): value for name, value in self.headers.items()}
            try:
                payload = Webhook(SECRET["value"]).verify(raw, headers)
            except Exception as error:  # any failure to verify is a rejection
                self.reject("webhook", [str(error)])
                return self.answer(400, {"error": str(error)})
            self.keep("webhook", {"id": headers["webhook-id"], "payload": payload})
            return self.answer(204, "")
        self.answer(404, {"error": "no such path"})

    def keep(self, kind, item):
        with LOCK:
            RECEIVED[kind].append(item)

    def reject(self, kind, errors):
        with LOCK:
            RECEIVED["rejected"].append({"kind": kind, "errors": errors})


class SmtpHandler:
    async def handle_DATA(self, server, session, envelope):
        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        with LOCK:
            RECEIVED["email"].append({
                "mail_from": envelope.mail_from,
                "rcpt_tos": envelope.rcpt_tos,
                "subject": message["subject"],
                "message_id": message["message-id"],
                "from": message["from"],
                "to": message["to"],
                "body": message.get_content(),
                "tls": session.ssl is not None,
            })
        return "250 Message accepted for delivery"


class AnyPortController(Controller):
    """A Controller that may be given port 0: the port its listener got replaces it before
    aiosmtpd connects to the server to check that it is up."""

    def _trigger_server(self):
        self.port = self.server.sockets[0].getsockname()[1]
        super()._trigger_server()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("http_port", type=int)
    parser.add_argument("smtp_port", type=int)
    parser.add_argument("--secret")
    parser.add_argument("--starttls", nargs=3, metavar=("PORT", "CERT", "KEY"))
    args = parser.parse_args()
    SECRET["value"] = args.secret
    smtp = AnyPortController(SmtpHandler(), hostname="127.0.0.1", port=args.smtp_port)
    smtp.start()
    ports = [smtp.port]
    if args.starttls:
        port, cert, key = args.starttls
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
        tls = AnyPortController(SmtpHandler(), hostname="127.0.0.1", port=int(port),
                                tls_context=context, require_starttls=True)
        tls.start()
        ports.append(tls.port)
    server = ThreadingHTTPServer(("127.0.0.1", args.http_port), Handler)
    server.daemon_threads = True
    ports.insert(0, server.server_address[1])
    print("listening on ports", *ports, flush=True)
    try:
        server.serve_forever()
    finally:
        smtp.stop()


if __name__ == "__main__":
    main()
