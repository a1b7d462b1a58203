-- wrk script: POST a small chat completion (or, with API=responses or API=messages, the
-- same request to the Responses or Messages API), rotating through the proxy keys in
-- $KEYS (one per line) when given; "STREAM=1" asks for a streamed answer.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local stream = os.getenv("STREAM") == "1" and '"stream":true,' or ''
if os.getenv("API") == "responses" then
  wrk.body = '{"model":"gpt-4o-mini",' .. stream .. '"input":"Say hello"}'
elseif os.getenv("API") == "messages" then
  wrk.headers["anthropic-version"] = "2023-06-01"
  wrk.body = '{"model":"claude-sonnet-4-5","max_tokens":64,' .. stream .. '"messages":[{"role":"user","content":"Say hello"}]}'
else
  wrk.body = '{"model":"gpt-4o-mini",' .. stream .. '"messages":[{"role":"user","content":"Say hello"}]}'
end

local keys = {}
local keyfile = os.getenv("KEYS")
if keyfile and keyfile ~= "" then
  for line in io.lines(keyfile) do
    if #line > 0 then keys[#keys + 1] = line end
  end
end
local next_key = 0

request = function()
  if #keys > 0 then
    next_key = next_key % #keys + 1
    wrk.headers["Authorization"] = "Bearer " .. keys[next_key]
  end
  return wrk.format()
end

-- Count answers that were not 200 (a refused or failed request is not throughput).
local failures = 0
response = function(status, headers, body)
  if status ~= 200 then failures = failures + 1 end
end
done = function(summary, latency, requests)
  io.write(string.format("non_200 %d\n", summary.errors.status))
end
