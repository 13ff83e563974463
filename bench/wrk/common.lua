-- Shared wrk driver for the bench (bench/throughput.py writes the data files and reads the
-- JSON line that done() prints). Configuration comes from the environment, because wrk runs
-- this file once per thread plus once in its main state, before any callback:
--   BENCH_DATA      requests file, one per line: METHOD \t PATH \t API_KEY \t BODY
--                   ("%d" in the name is replaced by the thread number: one file per thread)
--   BENCH_HARVEST   what to keep from 2xx bodies: "lurl", "deal", "offer" (or empty)
--   BENCH_QUOTA     a thread stops once it harvested this many (0 = no limit)
--   BENCH_ONCE      "1": each request line is used once; afterwards the thread stops
--   BENCH_DELAY_MS  mean think time per connection in ms (paced runs; exponential gaps)
--   BENCH_OUT       file that done() writes the harvested lines to

local data_path = os.getenv("BENCH_DATA") or ""
local harvest = os.getenv("BENCH_HARVEST") or ""
local quota = tonumber(os.getenv("BENCH_QUOTA") or "0") or 0
local once = os.getenv("BENCH_ONCE") == "1"
local delay_ms = tonumber(os.getenv("BENCH_DELAY_MS") or "0") or 0
local out_path = os.getenv("BENCH_OUT") or ""

local threads = {}
local thread_count = 0

-- main state: number the threads, so each one takes its own share of the request lines
function setup(thread)
  thread_count = thread_count + 1
  thread:set("tid", thread_count)
  table.insert(threads, thread)
end

statuses = {}
harvested = {}
exhausted = 0

local requests = {}
local index = 0
local api_key = ""

local function load(path)
  local lines = {}
  if path == "" then return lines end
  for line in io.lines(path) do
    local method, target, key, body = line:match("^([^\t]*)\t([^\t]*)\t([^\t]*)\t?(.*)$")
    if method then
      local headers = {}
      if key ~= "" then headers["Authorization"] = "Bearer " .. key end
      if body ~= "" then
        headers["Content-Type"] = "application/json"
      else
        body = nil
      end
      table.insert(lines, {wrk.format(method, target, headers, body), key})
    end
  end
  return lines
end

function init(args)
  local path = data_path
  if path:find("%%d") then path = string.format(path, tid) end
  local all = load(path)
  -- one shared file: thread n takes lines n, n + threads, ...; a file per thread: all of it
  local first, step = 1, 1
  if not data_path:find("%%d") then
    first, step = tid, tonumber(os.getenv("BENCH_THREADS") or "1")
  end
  for i = first, #all, step do table.insert(requests, all[i]) end
  if #requests == 0 then requests = {{wrk.format(nil, nil, nil, nil), ""}} end
  math.randomseed(tid * 7919)
  index = math.random(#requests) - 1
  if once then index = 0 end
end

function request()
  index = index + 1
  if index > #requests then
    if once then
      exhausted = exhausted + 1
      wrk.thread:stop()
    end
    index = 1
  end
  api_key = requests[index][2]
  return requests[index][1]
end

if delay_ms > 0 then
  -- exponential gaps: each connection sends like a Poisson source of rate 1/delay_ms
  function delay()
    return math.floor(-delay_ms * math.log(1 - math.random()) + 0.5)
  end
end

local patterns = {
  lurl = '"lurl":"([^"]*)"',
  deal = '"deal_id":"([^"]*)"',
}

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
  if harvest == "" or status >= 300 or body == nil then return end
  local value
  if harvest == "offer" then
    local offer_id = body:match('"offer_id":"([^"]*)"')
    local price = body:match('"bid_price_cents":([-%d%.eE+]+)')
    if offer_id and price then value = api_key .. "\t" .. offer_id .. "\t" .. price end
  else
    value = body:match(patterns[harvest])
  end
  if value then
    table.insert(harvested, value)
    if quota > 0 and #harvested >= quota then wrk.thread:stop() end
  end
end

local function json_statuses(all)
  local parts = {}
  for status, count in pairs(all) do
    table.insert(parts, string.format('"%d":%d', status, count))
  end
  return "{" .. table.concat(parts, ",") .. "}"
end

function done(summary, latency, _)
  local all = {}
  local kept = 0
  local out = nil
  if out_path ~= "" then out = io.open(out_path, "w") end
  local exhausted_threads = 0
  for _, thread in ipairs(threads) do
    for status, count in pairs(thread:get("statuses") or {}) do
      all[status] = (all[status] or 0) + count
    end
    if (thread:get("exhausted") or 0) > 0 then exhausted_threads = exhausted_threads + 1 end
    for _, value in ipairs(thread:get("harvested") or {}) do
      kept = kept + 1
      if out then out:write(value, "\n") end
    end
  end
  if out then out:close() end
  local e = summary.errors
  io.write(string.format(
    'BENCH_JSON {"duration_us":%d,"requests":%d,"bytes":%d,' ..
    '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
    '"latency_us":{"min":%d,"mean":%.1f,"max":%d,"p50":%d,"p90":%d,"p99":%d,"p999":%d},' ..
    '"statuses":%s,"harvested":%d,"exhausted_threads":%d}\n',
    summary.duration, summary.requests, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.min, latency.mean, latency.max,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency:percentile(99.9),
    json_statuses(all), kept, exhausted_threads))
end
