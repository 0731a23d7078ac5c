-- wrk script: POST /v1/check for one of 1000 users, as the gRPC load does.
local n = 0
request = function()
  n = n + 1
  local body = '{"domain":"bench","descriptors":[{"entries":[{"key":"user","value":"u' .. (n % 1000) .. '"}]}]}'
  return wrk.format("POST", "/v1/check", { ["Content-Type"] = "application/json" }, body)
end
