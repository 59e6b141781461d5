-- llmops.serving gateway (roles/gateway, docs/gateway.md "The model list").
--   http-request use-service lua.llmops_models   answers GET /v1/models at the
--     gateway itself: every model name and LoRA adapter it routes (models.map),
--     in OpenAI's list shape, and only those the request's key may use (the
--     keys.map line SHA256:* or SHA256:MODEL, by the digest the frontend put in
--     txn.kd; the key itself never reaches Lua). A vLLM server lists only its own
--     models: passed to one backend, a client saw one model of the fleet.
-- Both maps are read once, at load (before the chroot), from the directory this
-- file is in (the role writes all three into gateway_config_dir); a reload
-- (the role's handler after either map changed) reads them again. Without any
-- key line every client sees every model, as the frontend lets every client in.

local dir = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."

local function entries(path)
  local out = {}
  local f = io.open(path, "r")
  if f == nil then
    core.Alert("llmops models.lua: cannot read " .. path)
    return out
  end
  for line in f:lines() do
    local name = line:match("^%s*([^%s#]%S*)")
    if name then
      out[#out + 1] = name
    end
  end
  f:close()
  return out
end

local models = entries(dir .. "/models.map")
table.sort(models)
local open = #entries(dir .. "/keys.map") == 0
local keys = (not open) and Map.new(dir .. "/keys.map", Map._str) or nil
-- vLLM's "created" is the time of the answer; the gateway's list is the time it was loaded.
local created = os.time()

local function allowed(digest, model)
  if open then
    return true
  end
  if digest == nil then
    return false
  end
  return keys:lookup(digest .. ":*") ~= nil or keys:lookup(digest .. ":" .. model) ~= nil
end

local function quoted(text)
  local escaped = text:gsub('[%c"\\]', function(c) return string.format("\\u%04x", c:byte()) end)
  return '"' .. escaped .. '"'
end

core.register_service("llmops_models", "http", function(applet)
  local digest = applet:get_var("txn.kd")
  local items = {}
  for _, model in ipairs(models) do
    if allowed(digest, model) then
      items[#items + 1] = string.format('{"id":%s,"object":"model","created":%d,"owned_by":"vllm"}',
                                        quoted(model), created)
    end
  end
  local body = '{"object":"list","data":[' .. table.concat(items, ",") .. "]}"
  applet:set_status(200)
  applet:add_header("content-type", "application/json")
  applet:add_header("content-length", tostring(#body))
  applet:start_response()
  applet:send(body)
end)
