-- settle.lua: settle one pool's reservation (an estimate charged by
-- lua/charge.lua before the call) to the actual cost the response reported,
-- on the same log entry at its original time, so that every sliding window
-- stays exact: a refund, or a further debit that no budget check may refuse
-- (the upstream spent it).
--
-- KEYS[1]   portion:{C}:state    hash of the credential
-- KEYS[2]   portion:{C}:log:P    the prefix of the pool's log segments
-- KEYS[3]   portion:{C}:index:P  that of its index's segments
-- ARGV[1]   the pool's state field, "pool:" .. name
-- ARGV[2]   the entry's call number (the charge's reply)
-- ARGV[3]   the charge's id, as charge.lua logged it
-- ARGV[4]   the estimate charged
-- ARGV[5]   the actual cost
-- ARGV[6]   the idempotency horizon in µs (the least retention)
-- ARGV[7]   now in µs, or "" to read the Redis server clock (TIME)
-- KEYS[4..], ARGV[8..]  shares (src/ledger/shares.rs): per share pool that
--           holds the same call, its log's and index's prefixes, and its
--           state field, entry's call number and actual (capped at its
--           own budgets): settled alike, first, in the same step (their
--           results are not returned)
--
-- Returns {1} settled on the entry; {2} the entry lies more than REACH calls
-- behind the pool's newest, so an actual above the estimate was added to
-- the newest call instead (later than it was spent: conservative) and a
-- refund was dropped; {0} the entry is gone (it left the retention, or the
-- log was lost or restarted): nothing to settle; or the debit would carry
-- a window's sum past what a double counts exactly: the pool counts as lost
-- (below).
--
-- Whatever the outcome, the call's reservation leaves the state field
-- reserved:P (see charge.lua): it is settled, or there is nothing to settle.
--
-- Bounded work: the entry is one positional read in its segment; its
-- block's record and the records after it (at most REACH / BLOCK + 1) carry
-- running totals that move with it.

local floor, max = math.floor, math.max
local spack, sunpack = struct.pack, struct.unpack
-- (after the layout's constants, lua/shared/layout.lua and the clock,
-- lua/shared/clock.lua, ARGV[7]'s: src/ledger/redis/scripts.rs)
local id, estimate = ARGV[3], tonumber(ARGV[4])
-- (the state's meta: the latest decision's time and the retention)
local meta = call('HGET', KEYS[1], 'meta')
local last, _, retain = 0, 0, 0
if meta then last, _, retain = sunpack('<ddd', meta) end

-- Settle call s of the pool whose state field is `pf`, log prefix `lk`
-- and index prefix `ik`, to `actual`.
local function settle(pf, lk, ik, s, actual)
  local delta = actual - estimate
  -- (the reservation goes: at most charge.lua's RESERVED triples to look at)
  local field = 'reserved:' .. string.sub(pf, 6)
  local held = call('HGET', KEYS[1], field)
  if held then
    for j = 1, #held, 24 do
      if sunpack('<d', held, j) == s then
        local rest = string.sub(held, 1, j - 1) .. string.sub(held, j + 24)
        if rest == '' then call('HDEL', KEYS[1], field) else call('HSET', KEYS[1], field, rest) end
        break
      end
    end
  end

  local packed = call('HGET', KEYS[1], pf)
  -- (only this build's layout: a multiple of 4 fields, see charge.lua)
  if not packed or (#packed / 8) % $WIN ~= 0 then return { 0 } end
  local fields = '<' .. string.rep('d', #packed / 8)
  local pv = { sunpack(fields, packed) }
  local head, tail, m = pv[$HEAD], pv[$TAIL], pv[$M]
  if s < head or s >= tail then return { 0 } end

  -- Call c's entry: its key, its position, and the entry.
  local function entry(c)
    local k = floor(c / SEG)
    local key, pos = lk .. ':' .. k, (c - max(head, k * SEG)) * ENTRY
    return key, pos, call('LRANGE', key, pos, pos + ENTRY - 1)
  end

  local key, pos, e = entry(s)
  -- An entry at or before the pool's dead mark, or past the retention now,
  -- counts in no window (see charge.lua; now never before the latest decision).
  local cutoff = max(pv[$WIN * m + $DEAD], max(now, last) - max(retain, tonumber(ARGV[6])))
  -- (a Late settle sent again after a lost reply finds its mark, below)
  if #e == ENTRY and e[4] == id .. 'L' then return { 2 } end
  if #e ~= ENTRY or e[4] ~= id or tonumber(e[1]) <= cutoff then return { 0 } end
  -- (a settle sent again after a lost reply finds it done)
  if tonumber(e[2]) == actual then return { 1 } end
  if tonumber(e[2]) ~= estimate then return { 0 } end
  local result = 1
  if tail - 1 - s > REACH then
    if delta <= 0 then return { 2 } end
    -- Too far behind to move the running totals after it: the excess goes
    -- on the newest call, and the entry is marked as settled so.
    call('LSET', key, pos + 3, id .. 'L')
    s, result = tail - 1, 2
    key, pos, e = entry(s)
    if #e ~= ENTRY then return { 0 } end
  end
  if delta == 0 then return { result } end
  -- A debit that would carry a window's sum past EXACT is not recorded: the
  -- pool counts as spent until its longest window has passed, as a lost log
  -- does (lua/charge.lua), by when every call it held has left every window.
  -- (The caller caps an actual at the pool's largest budget plus one, so
  -- this takes 2^53 units recorded in one window.)
  for w = 1, m do
    if pv[$WIN * w + $PTR] <= s and pv[$WIN * w + $SUM] + delta > EXACT then
      pv[$WIN * m + $LOST] = max(now, last)
      call('HSET', KEYS[1], pf, spack(fields, unpack(pv, 1, #packed / 8)))
      return { 0 }
    end
  end
  call('LSET', key, pos + 1, tonumber(e[2]) + delta)

  -- Every window that still counts the entry (its oldest call is at or
  -- before it) moves its sum.
  for w = 1, m do
    if pv[$WIN * w + $PTR] <= s then pv[$WIN * w + $SUM] = pv[$WIN * w + $SUM] + delta end
  end
  call('HSET', KEYS[1], pf, spack(fields, unpack(pv, 1, #packed / 8)))

  -- The entry's block record, if its block is complete, and the running
  -- totals of the records after it that count it (those whose origin is at
  -- or before its block: see charge.lua).
  local b, top = floor(s / BLOCK), floor(tail / BLOCK) - 1
  for j = b, top do
    local k = floor(j / IXSEG)
    local ikey = ik .. ':' .. k
    local ipos = j - (math.min(top, (k + 1) * IXSEG - 1) - call('LLEN', ikey) + 1)
    local r = ipos >= 0 and call('LINDEX', ikey, ipos)
    local f = r and { sunpack(RECORD, r) }
    if f and f[6] == j and f[7] <= b then
      local rest = string.sub(r, 57)
      if j == b then
        -- (the block's cost, and its tag's share in the (tag, cost) pairs)
        f[4] = f[4] + delta
        local shares = {}
        for t = 1, #rest, 16 do
          local tag, c = sunpack('<dd', rest, t)
          if tag == tonumber(e[3]) then c = c + delta end
          shares[#shares + 1] = spack('<dd', tag, c)
        end
        rest = table.concat(shares)
      end
      f[3] = f[3] + delta
      -- (a running total past EXACT counts from an origin of its own: no
      -- other record is ever paired with it, see charge.lua's search)
      if f[3] > EXACT then f[7] = -1 - j end
      call('LSET', ikey, ipos, spack(RECORD, f[1], f[2], f[3], f[4], f[5], f[6], f[7]) .. rest)
    end
  end
  return { result }
end

-- (a share's pool holds the same call: settled in the same step)
for j = 4, #KEYS - 1, 2 do
  local at = 8 + 3 * (j - 4) / 2
  settle(ARGV[at], KEYS[j], KEYS[j + 1], tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2]))
end
return settle(ARGV[1], KEYS[2], KEYS[3], tonumber(ARGV[2]), tonumber(ARGV[5]))
