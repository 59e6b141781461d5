-- llmops.serving gateway (roles/gateway, docs/gateway.md "Token usage and quotas").
-- Counts the tokens vLLM reports in its own `usage` object, per key NAME (the
-- key map's name of the line the key matched, never the key) and model:
--   filter lua.llmops_usage         (frontend) reads each answered response's
--     body as it passes (nothing is buffered or changed): the last complete
--     `"usage":{...}` of a JSON body, or of an SSE stream (the last chunk, which
--     vLLM sends with --enable-force-include-usage), gives prompt and
--     completion tokens (input/output on /v1/messages).
--   http-request lua.llmops_usage_pending   moves the tokens this gateway
--     counted for the request's quota entry (txn.qk: digest:scope@period) since
--     the key's last request into txn.tok_new; the frontend adds them to the
--     shared quota table (sc-set-gpt0, peers) before checking the quota.
--   http-request use-service lua.llmops_usage_metrics   serves the counters
--     in Prometheus' text format (a private bind).
-- Counters live in this HAProxy process: a reload or restart starts them at 0
-- (Prometheus' rate()/increase() see a counter reset).
-- A JSON string escapes its quotes, so text a model generates can never form an
-- unescaped "usage":{ ... }: only vLLM's own object matches.

local CARRY = 1024          -- bytes kept between chunks (a usage object split by them)
local counters = {}         -- "name\0model" -> {name, model, prompt, completion, requests}
local pending = {}          -- quota entry -> tokens not yet in the shared table

local function parse(text)
  local found
  local from = 1
  while true do
    local s, e = text:find('"usage"%s*:%s*{', from)
    if not s then return found end
    local close = text:find("}", e + 1, true)
    if close then
      local obj = text:sub(e, close)
      local p = obj:match('"prompt_tokens"%s*:%s*(%d+)') or obj:match('"input_tokens"%s*:%s*(%d+)')
      local c = obj:match('"completion_tokens"%s*:%s*(%d+)') or obj:match('"output_tokens"%s*:%s*(%d+)')
      if p or c then
        found = { tonumber(p) or 0, tonumber(c) or 0 }
      end
    end
    from = e + 1
  end
end

local Usage = {}
Usage.id = "llmops usage"
Usage.flags = filter.FLT_CFG_FL_HTX
Usage.__index = Usage

function Usage:new()
  return setmetatable({ carry = "" }, Usage)
end

function Usage:start_analyze(txn, chn)
  if chn:is_resp() and txn:get_var("txn.uname") ~= nil then
    filter.register_data_filter(self, chn)
  end
end

function Usage:http_payload(txn, msg)
  local data = msg:body()
  if data == nil or #data == 0 then return end
  local text = self.carry .. data
  local found = parse(text)
  if found then self.usage = found end
  self.carry = text:sub(-CARRY)
end

function Usage:http_end(txn, msg)
  if not msg.channel:is_resp() or self.usage == nil then return end
  local name, model = txn:get_var("txn.uname"), txn:get_var("txn.model") or ""
  local id = name .. "\0" .. model
  local c = counters[id]
  if c == nil then
    c = { name = name, model = model, prompt = 0, completion = 0, requests = 0 }
    counters[id] = c
  end
  c.prompt = c.prompt + self.usage[1]
  c.completion = c.completion + self.usage[2]
  c.requests = c.requests + 1
  local qk = txn:get_var("txn.qk")
  if qk ~= nil then
    pending[qk] = (pending[qk] or 0) + self.usage[1] + self.usage[2]
  end
end

core.register_filter("llmops_usage", Usage, function(usage, args)
  return usage
end)

core.register_action("llmops_usage_pending", { "http-req" }, function(txn)
  local qk = txn:get_var("txn.qk")
  if qk == nil then return end
  local n = pending[qk] or 0
  pending[qk] = nil
  txn:set_var("txn.tok_new", n)
  -- entries of past periods (their keys end in @PERIOD) are dropped with their period
  local base = qk:match("^(.*)@")
  for k in pairs(pending) do
    if k:match("^(.*)@") == base and k ~= qk then pending[k] = nil end
  end
end, 0)

local function label(v)
  return (tostring(v):gsub("\\", "\\\\"):gsub('"', '\\"'):gsub("\n", "\\n"))
end

local METRICS = {
  { "llmops_gateway_prompt_tokens_total", "prompt", "Prompt (input) tokens vLLM reported for the key's requests." },
  { "llmops_gateway_completion_tokens_total", "completion", "Completion (output) tokens vLLM reported for the key's requests." },
  { "llmops_gateway_usage_requests_total", "requests", "Answered requests whose usage the gateway counted." },
}

core.register_service("llmops_usage_metrics", "http", function(applet)
  local ids = {}
  for id in pairs(counters) do ids[#ids + 1] = id end
  table.sort(ids)
  local out = {}
  for _, m in ipairs(METRICS) do
    out[#out + 1] = "# HELP " .. m[1] .. " " .. m[3]
    out[#out + 1] = "# TYPE " .. m[1] .. " counter"
    for _, id in ipairs(ids) do
      local c = counters[id]
      out[#out + 1] = string.format('%s{key="%s",model="%s"} %d', m[1], label(c.name), label(c.model), c[m[2]])
    end
  end
  local body = table.concat(out, "\n") .. "\n"
  applet:set_status(200)
  applet:add_header("content-type", "text/plain; version=0.0.4")
  applet:add_header("content-length", tostring(#body))
  applet:start_response()
  applet:send(body)
end)
