-- charge.lua: charge one call's cost to every window of every pool it names,
-- atomically: all windows fit and the call is logged once per pool, or nothing
-- is written anywhere.
--
-- KEYS[1]      quota:{C}:state    hash: per pool the log's head and tail sequence
--                                 numbers; per window a running sum, a pointer to
--                                 its oldest entry and that entry's time; tags,
--                                 upstream block, serial, latest decision time
-- KEYS[2]      quota:{C}:id:ID    marker of a recorded charge id (unused when
--                                 ARGV[2] is ""); expires after the horizon
-- KEYS[3..]    quota:{C}:log:P    list per pool, in ARGV pool order: flat triples
--                                 (time µs, cost, tag id), oldest first
-- ARGV[1]      now in µs, or "" to read the Redis server clock (TIME)
-- ARGV[2]      charge id, or "" for none: a charge id already recorded is not
--              recorded again (the client resends a charge whose reply was lost)
-- ARGV[3]      the tag's state field, "tag:" .. tag, where the tag names who
--              spends ("endpoint<TAB>job"), for usage reports
-- ARGV[4]      idempotency horizon in ms (how long a charge id is remembered)
-- ARGV[5]      number of pools n
-- ARGV[6..]    per pool: name, cost, number of windows m, the pool's head and
--              tail state fields, then per window: length µs, budget units, and
--              its sum, pointer and first-entry-time state fields
--              (state field names come from the client: building strings in
--              Lua costs more than passing them)
--
-- Returns one of:
--   {1, now, serial, duplicate(0|1), remaining...}   allowed; remaining units per
--                                                    window, in ARGV order
--   {0, now, serial, pool_no, window_no, retry_us}  rejected by that window; the
--                                                    call fits again in retry_us
--   {2, now, serial, blocked_until_us, reason}       credential blocked upstream
-- and raises "COST_EXCEEDS_BUDGET" for a cost that can never fit.
--
-- An entry at time t is inside a window of length L at time now iff t > now - L.
-- Time never runs backwards for a credential: now is clamped to the latest
-- decision that recorded or slid anything, which can only make entries look
-- younger (more conservative), never older.
--
-- Every redis.call costs time on the server's one thread, so the common path
-- makes five, however many windows: TIME, HMGET, SET NX, RPUSH per pool, HSET.
-- The log is read only when an entry leaves a window or a call is rejected.

local state, id_key = KEYS[1], KEYS[2]

local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[1])
end
local charge_id, tag_field = ARGV[2], ARGV[3]

-- Parse the pools and windows, and name every state field this call reads.
local fields = { 'last', 'serial', 'blocked_until', 'blocked_reason', 'retain', 'exp', tag_field }
local pools, i, longest = {}, 6, 0
for p = 1, tonumber(ARGV[5]) do
  local pool = { name = ARGV[i], cost = tonumber(ARGV[i + 1]), log = KEYS[2 + p], windows = {} }
  local m = tonumber(ARGV[i + 2])
  pool.head_name, pool.tail_name, pool.field = ARGV[i + 3], ARGV[i + 4], #fields + 1
  fields[#fields + 1] = pool.head_name
  fields[#fields + 1] = pool.tail_name
  i = i + 5
  for w = 1, m do
    local len, budget = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
    if pool.cost > budget then
      return redis.error_reply('COST_EXCEEDS_BUDGET pool ' .. pool.name)
    end
    local win = { len = len, budget = budget, field = #fields + 1 }
    win.names = { ARGV[i + 2], ARGV[i + 3], ARGV[i + 4] }
    fields[#fields + 1] = ARGV[i + 2]
    fields[#fields + 1] = ARGV[i + 3]
    fields[#fields + 1] = ARGV[i + 4]
    pool.windows[w] = win
    if len > longest then longest = len end
    i = i + 5
  end
  pools[p] = pool
end

local v = redis.call('HMGET', state, unpack(fields))
local last = tonumber(v[1]) or 0
local serial = tonumber(v[2]) or 0
local blocked_until = tonumber(v[3]) or 0
local stored_retain = tonumber(v[5]) or 0
local retain = math.max(stored_retain, longest)
local expires = tonumber(v[6]) -- µs at which the keys were last set to expire
local tag_id = v[7]
if now < last then now = last end

local duplicate = false
if charge_id ~= '' then
  duplicate = not redis.call('SET', id_key, '1', 'NX', 'PX', ARGV[4])
end
local function forget_id()
  if charge_id ~= '' and not duplicate then redis.call('DEL', id_key) end
end

if not duplicate and blocked_until > now then
  forget_id()
  return { 2, now, serial, blocked_until, v[4] or '' }
end

-- Slide window w of pool: drop from its running sum the entries with time at
-- or before cutoff. Returns false when the log is not where the state says.
local CHUNK = 16
local function advance(pool, w, cutoff)
  while w.ptr < pool.tail and (w.first == nil or w.first <= cutoff) do
    local idx = (w.ptr - pool.head) * 3
    local e = redis.call('LRANGE', pool.log, idx, idx + 3 * CHUNK - 1)
    if #e == 0 then return false end
    w.first = nil
    for j = 1, #e, 3 do
      local t = tonumber(e[j])
      if t > cutoff then
        w.first = t
        return true
      end
      w.sum = w.sum - tonumber(e[j + 1])
      w.ptr = w.ptr + 1
    end
  end
  return true
end

-- Count every window of pool afresh from its log (first use of a window, or
-- state and log out of step after an expiry).
local function rebuild(pool)
  pool.tail = pool.head + redis.call('LLEN', pool.log) / 3
  local total = 0
  local all = redis.call('LRANGE', pool.log, 0, -1)
  for j = 2, #all, 3 do total = total + tonumber(all[j]) end
  for _, w in ipairs(pool.windows) do
    w.sum, w.ptr, w.first = total, pool.head, nil
    advance(pool, w, now - w.len)
  end
end

for _, pool in ipairs(pools) do
  pool.head = tonumber(v[pool.field]) or 0
  pool.tail = tonumber(v[pool.field + 1])
  local fresh = pool.tail == nil
  for _, w in ipairs(pool.windows) do
    w.sum, w.ptr, w.first = tonumber(v[w.field]), tonumber(v[w.field + 1]), tonumber(v[w.field + 2])
    if w.sum == nil or w.ptr == nil or pool.tail == nil or w.ptr < pool.head or w.ptr > pool.tail then
      fresh = true
    end
  end
  if fresh then
    rebuild(pool)
  else
    for _, w in ipairs(pool.windows) do
      if not advance(pool, w, now - w.len) then
        -- The log is shorter than the state says: it vanished (expired,
        -- evicted, or a Redis without persistence restarted). Say so.
        pool.lost = true
        rebuild(pool)
        break
      end
    end
  end
end

local updates = {}
local function save_windows()
  for _, pool in ipairs(pools) do
    updates[#updates + 1] = pool.tail_name
    updates[#updates + 1] = pool.tail
    for _, w in ipairs(pool.windows) do
      updates[#updates + 1] = w.names[1]
      updates[#updates + 1] = w.sum
      updates[#updates + 1] = w.names[2]
      updates[#updates + 1] = w.ptr
      updates[#updates + 1] = w.names[3]
      updates[#updates + 1] = w.first or 0
    end
  end
end

-- Does the call fit every window? If not, it fits again at the latest of the
-- times at which each short window has shed enough units.
if not duplicate then
  local worst = nil
  for p, pool in ipairs(pools) do
    for k, w in ipairs(pool.windows) do
      local need = w.sum + pool.cost - w.budget
      if need > 0 then
        local freed, at, ptr = 0, nil, w.ptr
        while at == nil and ptr < pool.tail do
          local idx = (ptr - pool.head) * 3
          local e = redis.call('LRANGE', pool.log, idx, idx + 3 * CHUNK - 1)
          if #e == 0 then break end
          for j = 1, #e, 3 do
            freed = freed + tonumber(e[j + 1])
            ptr = ptr + 1
            if freed >= need then
              at = tonumber(e[j]) + w.len
              break
            end
          end
        end
        local retry = (at or (now + w.len)) - now
        if worst == nil or retry > worst[3] then worst = { p, k, retry } end
      end
    end
  end
  if worst ~= nil then
    forget_id()
    -- The slid sums are exact; keep them so the next call starts here, and
    -- with them the time they were slid to, which later calls never go below.
    save_windows()
    updates[#updates + 1] = 'last'
    updates[#updates + 1] = now
    redis.call('HSET', state, unpack(updates))
    return { 0, now, serial, worst[1], worst[2], worst[3] }
  end
end

-- Record the call once per pool and add its cost to every window.
if not duplicate then
  if not tag_id then
    tag_id = redis.call('HINCRBY', state, 'tags', 1)
    updates[#updates + 1] = tag_field
    updates[#updates + 1] = tag_id
    updates[#updates + 1] = 'tagname:' .. tag_id
    updates[#updates + 1] = string.sub(tag_field, 5)
  end
  serial = serial + 1
  for _, pool in ipairs(pools) do
    local len = redis.call('RPUSH', pool.log, now, pool.cost, tag_id)
    pool.tail = pool.tail + 1
    pool.created = len == 3
    if len ~= (pool.tail - pool.head) * 3 then
      -- The log is not what the state says (a key expired or was evicted):
      -- the pool's state is rebuilt from what the log holds on the next call.
      pool.lost, pool.rebuild_next = true, true
    end
    for _, w in ipairs(pool.windows) do
      if w.ptr == pool.tail - 1 then w.first = now end -- the window was empty
      w.sum = w.sum + pool.cost
    end
  end
end
save_windows()

-- Entries older than the longest window ever seen are out of every window:
-- trim them. The pointer of a window that long already says how many.
for _, pool in ipairs(pools) do
  local oldest = nil
  for _, w in ipairs(pool.windows) do
    if w.len == retain then oldest = w end
  end
  if oldest == nil then
    oldest = { ptr = pool.head, sum = 0 }
    advance(pool, oldest, now - retain)
  end
  local drop = oldest.ptr - pool.head
  if drop > 0 then
    redis.call('LTRIM', pool.log, drop * 3, -1)
    updates[#updates + 1] = pool.head_name
    updates[#updates + 1] = pool.head + drop
  end
end

-- Idle keys expire a little past the longest window (or the block). Setting
-- the expiry on every charge would cost calls, so it is set 1/8 window ahead
-- and renewed only when it no longer covers the newest entry.
local keep = retain + 60000000
if blocked_until - now + 60000000 > keep then keep = blocked_until - now + 60000000 end
local refresh = expires == nil or expires < now + keep
if refresh then
  expires = now + keep + math.floor(retain / 8)
  updates[#updates + 1] = 'exp'
  updates[#updates + 1] = expires
end
local ttl_ms = math.floor((expires - now) / 1000)

updates[#updates + 1] = 'last'
updates[#updates + 1] = now
updates[#updates + 1] = 'serial'
updates[#updates + 1] = serial
if retain ~= stored_retain then
  updates[#updates + 1] = 'retain'
  updates[#updates + 1] = retain
end
for _, pool in ipairs(pools) do
  if pool.lost then
    updates[#updates + 1] = 'log_lost'
    updates[#updates + 1] = now
    break
  end
end
redis.call('HSET', state, unpack(updates))
for _, pool in ipairs(pools) do
  if pool.rebuild_next then redis.call('HDEL', state, pool.tail_name) end
  if refresh or pool.created then redis.call('PEXPIRE', pool.log, ttl_ms) end
end
if refresh then redis.call('PEXPIRE', state, ttl_ms) end

local reply = { 1, now, serial, duplicate and 1 or 0 }
for _, pool in ipairs(pools) do
  for _, w in ipairs(pool.windows) do reply[#reply + 1] = w.budget - w.sum end
end
return reply
