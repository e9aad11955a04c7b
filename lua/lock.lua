-- lock.lua: take, renew or release the run lock of one job, so that only one
-- run of a job is active at a time across hosts. The TTL runs on Redis's
-- clock; a run renews it while it works, and a killed run's lock expires.
--
-- KEYS[1]  the job's lock key (portion:job:{J}:lock)
-- ARGV[1]  "take", "renew" or "release"
-- ARGV[2]  the holder: who asks (host, pid, run)
-- ARGV[3]  the TTL in ms (take, renew)
--
-- Returns {1, holder, ttl_ms} when the caller holds the lock after a take or
-- renew, or has just released it; else {0, current holder or "", its ttl_ms}.

local op, me = ARGV[1], ARGV[2]
local current = redis.call('GET', KEYS[1])

if op == 'release' then
  if current == me then
    redis.call('DEL', KEYS[1])
    return {1, me, 0}
  end
  return {0, current or '', 0}
end

local ttl = tonumber(ARGV[3])
if current == me or (op == 'take' and not current) then
  redis.call('SET', KEYS[1], me, 'PX', ttl)
  return {1, me, ttl}
end
if not current then
  return {0, '', 0}
end
return {0, current, redis.call('PTTL', KEYS[1])}
