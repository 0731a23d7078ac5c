-- 10,000 distinct clients for wrk: each request names one in X-Forwarded-For
-- (the server trusts 127.0.0.0/8 as its proxy) and in x-api-key.
local n = 0
request = function()
  n = (n + 1) % 10000
  local ip = "198.18." .. math.floor(n / 256) .. "." .. (n % 256)
  return wrk.format("GET", "/v1/items", { ["X-Forwarded-For"] = ip, ["x-api-key"] = "key-" .. n })
end
