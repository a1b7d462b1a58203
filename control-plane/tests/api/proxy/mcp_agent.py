"""An agent's MCP client (the official Python SDK, `mcp` from PyPI) against Warden's
gateway, authenticated with a proxy key.

Usage: mcp_agent.py URL KEY SCENARIO [TOOL ARGUMENTS_JSON [TRACEPARENT]]; prints one
JSON object. With TRACEPARENT, the agent's requests carry it (W3C trace context).
  list   the tools listed: {"tools": [names], "descriptions": {name: description}}
  call   calls TOOL with ARGUMENTS_JSON: {"text": ..., "is_error": bool} or, when
         Warden refuses, {"error": {"code": ..., "message": ..., "data": ...}}
"""

import asyncio
import json
import sys

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

url, key, scenario = sys.argv[1], sys.argv[2], sys.argv[3]


async def main():
    headers = {"Authorization": f"Bearer {key}"}
    if len(sys.argv) > 6:
        headers["traceparent"] = sys.argv[6]
    http = httpx2.AsyncClient(headers=headers, timeout=30)
    async with http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            if scenario == "list":
                listed = await client.list_tools()
                return {
                    "tools": sorted(tool.name for tool in listed.tools),
                    "descriptions": {tool.name: tool.description for tool in listed.tools},
                }
            if scenario == "call":
                tool, arguments = sys.argv[4], json.loads(sys.argv[5])
                try:
                    result = await client.call_tool(tool, arguments)
                except MCPError as error:
                    data = error.error
                    return {"error": {"code": data.code, "message": data.message, "data": data.data}}
                text = "".join(getattr(block, "text", "") for block in result.content)
                return {"text": text, "is_error": bool(result.is_error)}
            raise SystemExit(f"unknown scenario {scenario}")


print(json.dumps(asyncio.run(main())))
