-- llmops.serving gateway (roles/gateway, docs/gateway.md "Held, not failed").
-- A request for a model none of whose servers can take it now (its only instance
-- restarting: drained by the role, or DOWN for the health checks) waits here, up
-- to the hold given to the action, instead of getting a 503 at once; it goes on
-- as soon as one server is UP again. The request's backend is in txn.be; the
-- milliseconds held go to txn.held_ms, and txn.hold_expired is set when the
-- hold ran out with no server back (the frontend answers 503 then).
--   http-request lua.llmops_hold <max ms>
-- core.msleep yields: a held request costs no CPU and no Lua time
-- (tune.lua.session-timeout counts Lua runtime only, not sleeps).

local STEP_MS = 200

local function usable(backend)
  for _, server in pairs(backend.servers) do
    local status = server:get_stats()["status"] or ""
    -- "UP", "UP 1/2" (failing checks, still up), "no check"; not DOWN, DRAIN, NOLB or MAINT.
    if status == "UP" or status:sub(1, 3) == "UP " or status == "no check" then
      return true
    end
  end
  return false
end

core.register_action("llmops_hold", { "http-req" }, function(txn, max_ms)
  local name = txn:get_var("txn.be")
  local backend = name and core.backends[name]
  if backend == nil or usable(backend) then
    return
  end
  local limit, waited = tonumber(max_ms) or 0, 0
  while waited < limit do
    core.msleep(STEP_MS)
    waited = waited + STEP_MS
    if usable(backend) then
      txn:set_var("txn.held_ms", waited)
      return
    end
  end
  txn:set_var("txn.held_ms", waited)
  txn:set_var("txn.hold_expired", 1)
end, 1)
