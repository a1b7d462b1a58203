"""The official OpenAI Python SDK against Warden's proxy, as an agent uses it.

Usage: openai_sdk.py BASE_URL KEY SCENARIO [ARGUMENTS_JSON]; prints one JSON object.
  responses  responses.create plain and with stream=True: text, event types, usage
  refused    one responses.create that the proxy refuses: the SDK's typed error
  models     models.list: the ids
  chat       chat.completions.create with ARGUMENTS_JSON (model, messages, metadata, ...):
             the x-warden-guardrail header, or the typed error and its message
  agent      an agent of the OpenAI Agents SDK (`openai-agents`), on its defaults (the
             Responses API), run once: its final output, or the error a refusal raised
"""

import json
import sys

import openai


def usage_of(usage):
    return {
        "input_tokens": usage.input_tokens,
        "cached_tokens": usage.input_tokens_details.cached_tokens,
        "output_tokens": usage.output_tokens,
        "reasoning_tokens": usage.output_tokens_details.reasoning_tokens,
    }


def responses(client):
    plain = client.responses.create(model="gpt-4o-mini", input="Say hello")
    streamed_text, types, streamed_usage = "", [], None
    for event in client.responses.create(model="gpt-4o-mini", input="Say hello", stream=True):
        types.append(event.type)
        if event.type == "response.output_text.delta":
            streamed_text += event.delta
        elif event.type == "response.completed":
            streamed_usage = usage_of(event.response.usage)
    return {
        "plain_text": plain.output_text,
        "plain_usage": usage_of(plain.usage),
        "stream_text": streamed_text,
        "stream_types": types,
        "stream_usage": streamed_usage,
    }


def refused(client):
    try:
        # A large output bound: a budget with little room refuses it up front.
        client.responses.create(model="gpt-4o-mini", input="Say hello", max_output_tokens=100000)
    except openai.APIStatusError as error:
        return {"error": type(error).__name__, "status": error.status_code, "code": error.code}
    return {"error": None}


def guarded(client):
    # A prompt with an e-mail address, for a guardrail to block or redact.
    try:
        raw = client.chat.completions.with_raw_response.create(
            model="gpt-4o-mini",
            messages=[{"role": "user", "content": "Mail the report to ana.lopez@example.com"}],
        )
    except openai.APIStatusError as error:
        return {"error": type(error).__name__, "status": error.status_code, "code": error.code}
    completion = raw.parse()
    return {"guardrail": raw.headers.get("x-warden-guardrail"),
            "content": completion.choices[0].message.content}


def chat(client, arguments):
    try:
        raw = client.chat.completions.with_raw_response.create(**arguments)
    except openai.APIStatusError as error:
        return {"error": type(error).__name__, "status": error.status_code, "code": error.code,
                "message": error.message}
    raw.parse()
    return {"status": raw.status_code, "guardrail": raw.headers.get("x-warden-guardrail")}


def models(client):
    return {"ids": [model.id for model in client.models.list()]}


def agent(base_url, key):
    # Imported here: only the `openai-agents` environment has it.
    from agents import Agent, Runner, set_default_openai_client, set_tracing_disabled

    set_tracing_disabled(True)
    set_default_openai_client(
        openai.AsyncOpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=20),
        use_for_tracing=False,
    )
    support = Agent(name="support", instructions="Answer briefly.", model="gpt-4o-mini")
    try:
        return {"final_output": Runner.run_sync(support, "Say hello").final_output}
    except openai.APIStatusError as error:
        return {"error": type(error).__name__, "status": error.status_code, "code": error.code}


def main():
    base_url, key, scenario = sys.argv[1:4]
    if scenario == "agent":
        print(json.dumps(agent(base_url, key)))
        return
    client = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=20)
    if scenario == "chat":
        print(json.dumps(chat(client, json.loads(sys.argv[4]))))
        return
    scenarios = {"responses": responses, "refused": refused, "models": models, "guarded": guarded}
    print(json.dumps(scenarios[scenario](client)))


if __name__ == "__main__":
    main()
