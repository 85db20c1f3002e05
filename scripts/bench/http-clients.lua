-- wrk script of scripts/bench-http: requests come from many clients, and their answers are
-- counted by status.
--
-- Each request carries X-Forwarded-For with the next of BENCH_IPS client addresses in turn
-- (10.x.y.z; the server trusts loopback's forwarded address), and an x-user-id never used
-- before in the run (BENCH_TAG, the thread, a counter), so a per-user limit never binds.
-- With BENCH_API_KEYS set, each request carries instead x-api-key with the next of that
-- many keys in turn (key-0, key-1, ...): a few busy programs.
-- At the end, one line: STATUS ok=<200s> limited=<429s> other=<anything else>.

local ips = tonumber(os.getenv("BENCH_IPS") or "10000")
local tag = os.getenv("BENCH_TAG") or "w"
local api_keys = tonumber(os.getenv("BENCH_API_KEYS") or "0")
local threads = {}

function setup(thread)
    thread:set("id", #threads)
    table.insert(threads, thread)
end

local n = 0
ok, limited, other = 0, 0, 0

function request()
    n = n + 1
    if api_keys > 0 then
        return wrk.format(nil, nil, { ["x-api-key"] = "key-" .. (n % api_keys) })
    end
    local a = n % ips
    return wrk.format(nil, nil, {
        ["X-Forwarded-For"] = string.format("10.%d.%d.%d",
            math.floor(a / 65536) % 256, math.floor(a / 256) % 256, a % 256),
        ["x-user-id"] = tag .. "-" .. id .. "-" .. n,
    })
end

function response(status)
    if status == 200 then
        ok = ok + 1
    elseif status == 429 then
        limited = limited + 1
    else
        other = other + 1
    end
end

function done(summary, latency, requests)
    local o, l, x = 0, 0, 0
    for _, t in ipairs(threads) do
        o = o + t:get("ok")
        l = l + t:get("limited")
        x = x + t:get("other")
    end
    io.write(string.format("STATUS ok=%d limited=%d other=%d\n", o, l, x))
end
