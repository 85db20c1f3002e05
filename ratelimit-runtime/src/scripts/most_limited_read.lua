-- The identities of one site with the most refusals over some minutes
-- (limiter/most_limited.rs, most_limited_add.lua).
--
-- KEYS     the minutes' sets, {prefix}limited:{site}:minute (one hash slot: the site is
--          the hash tag)
-- ARGV[1]  how many to answer
-- Returns  {identity, refusals, ...}, most first (ties: in byte order)
--
-- Defines `sums`, `names`, `answer`; may return the answer.
local sums, names = {}, {}
for _, key in ipairs(KEYS) do
    local members = redis.call('ZRANGE', key, '0', '-1', 'WITHSCORES')
    for i = 1, #members, 2 do
        local name = members[i]
        local sum = sums[name]
        if not sum then
            names[#names + 1] = name
            sum = 0
        end
        sums[name] = sum + tonumber(members[i + 1])
    end
end
table.sort(names, function(a, b)
    if sums[a] ~= sums[b] then
        return sums[a] > sums[b]
    end
    return a < b
end)
local answer = {}
for i = 1, math.min(#names, tonumber(ARGV[1])) do
    answer[2 * i - 1] = names[i]
    answer[2 * i] = string.format('%d', sums[names[i]])
end
return answer
