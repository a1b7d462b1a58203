"""The official Anthropic Python SDK against Warden's proxy, as an agent uses it.

Usage: anthropic_sdk.py BASE_URL KEY SCENARIO [ARGUMENTS_JSON]; prints one JSON object.
  messages  messages.create, messages.stream and messages.count_tokens
  refused   one messages.create that the proxy refuses: the SDK's typed error
  models    models.list: the ids
  create    messages.create with ARGUMENTS_JSON: the x-warden-guardrail header, or the
            typed error and its code
"""

import json
import sys

import anthropic

MESSAGES = [{"role": "user", "content": "Say hello"}]
MODEL = "claude-sonnet-4-5"


def usage_of(usage):
    return {
        "input_tokens": usage.input_tokens,
        "cache_creation_input_tokens": usage.cache_creation_input_tokens,
        "cache_read_input_tokens": usage.cache_read_input_tokens,
        "output_tokens": usage.output_tokens,
    }


def messages(client):
    plain = client.messages.create(model=MODEL, max_tokens=64, messages=MESSAGES)
    with client.messages.stream(model=MODEL, max_tokens=64, messages=MESSAGES) as stream:
        streamed_text = "".join(stream.text_stream)
        final = stream.get_final_message()
    counted = client.messages.count_tokens(model=MODEL, messages=MESSAGES)
    return {
        "plain_text": plain.content[0].text,
        "plain_usage": usage_of(plain.usage),
        "stream_text": streamed_text,
        "stream_usage": usage_of(final.usage),
        "counted": counted.input_tokens,
    }


def refused(client):
    try:
        # A large output bound: a budget with little room refuses it up front.
        client.messages.create(model=MODEL, max_tokens=100000, messages=MESSAGES)
    except anthropic.APIStatusError as error:
        body = error.body if isinstance(error.body, dict) else {}
        inner = body.get("error", {})
        return {
            "error": type(error).__name__,
            "status": error.status_code,
            "type": inner.get("type"),
            "code": inner.get("code"),
        }
    return {"error": None}


def create(client, arguments):
    try:
        raw = client.messages.with_raw_response.create(**arguments)
    except anthropic.APIStatusError as error:
        body = error.body if isinstance(error.body, dict) else {}
        inner = body.get("error", {})
        return {"error": type(error).__name__, "status": error.status_code,
                "code": inner.get("code"), "message": inner.get("message")}
    raw.parse()
    return {"status": raw.status_code, "guardrail": raw.headers.get("x-warden-guardrail")}


def models(client):
    return {"ids": [model.id for model in client.models.list()]}


def main():
    base_url, key, scenario = sys.argv[1:4]
    client = anthropic.Anthropic(base_url=base_url, api_key=key, max_retries=0, timeout=20)
    if scenario == "create":
        print(json.dumps(create(client, json.loads(sys.argv[4]))))
        return
    print(json.dumps({"messages": messages, "refused": refused, "models": models}[scenario](client)))


if __name__ == "__main__":
    main()
