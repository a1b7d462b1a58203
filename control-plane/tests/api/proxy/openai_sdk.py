"""The official OpenAI Python SDK against Warden's proxy, as an agent uses it.

Usage: openai_sdk.py BASE_URL KEY SCENARIO; prints one JSON object.
  responses  responses.create plain and with stream=True: text, event types, usage
  refused    one responses.create that the proxy refuses: the SDK's typed error
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
        client.responses.create(model="gpt-4o-mini", input="Say hello")
    except openai.APIStatusError as error:
        return {"error": type(error).__name__, "status": error.status_code, "code": error.code}
    return {"error": None}


def main():
    base_url, key, scenario = sys.argv[1:4]
    client = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=20)
    print(json.dumps({"responses": responses, "refused": refused}[scenario](client)))


if __name__ == "__main__":
    main()
