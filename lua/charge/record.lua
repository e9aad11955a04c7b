-- charge/record.lua: the call recorded (the general path): its tag's id,
-- the log trimmed past the retention, the call appended once per pool and
-- added to every window, a completed block's record appended to the index,
-- a reservation kept; then the state saved and the reply.

-- Record the call once per pool and add its cost to every window.
local tag_id = v[3]
if not tag_id then
  tag_id = call('HINCRBY', state, 'tags', 1)
  u[1], u[2], u[3], u[4] = tag_field, tag_id, 'tagname:' .. tag_id, string.sub(tag_field, 5)
  n = 4
end
serial = serial + 1

-- Trim pool p (state pv) up to call `oldest`: whole segments before
-- oldest's are unlinked with their index; then calls of the head's
-- segment. One budget a charge, UNLINKS segments and TRIM calls, for every
-- log it records in (a charge as a share records in its pool's log and the
-- share's: each trimmed on its own budget, such a charge did twice the
-- work). The logs take it in turn, the first chosen by the charge's serial
-- (nothing stored). Not a strict alternation: a log without a window as
-- long as the retention counts its dead calls only every TRIM_EVERY calls,
-- and when a share's charges are its pool's only ones those counting
-- charges fall on serials of one parity, so one log goes first each time
-- and the other gets what is left. Still bounded: each charge appends one
-- call a log and a budget trims thousands, so the first log's backlog is
-- gone within a few turns and then the other's is trimmed.
local unlinks_left, trims_left = UNLINKS, TRIM
local function trim(p, pv, oldest)
  local kh, ko = floor(pv[$HEAD] / SEG), floor(oldest / SEG)
  if oldest >= pv[$TAIL] then ko = floor((pv[$TAIL] - 1) / SEG) + 1 end
  if ko > kh and unlinks_left > 0 then
    local keys, upto = {}, min(ko, kh + unlinks_left)
    for k = kh, upto - 1 do
      keys[#keys + 1], keys[#keys + 2] = log_seg(p, k), ix_seg(p, k)
    end
    call('UNLINK', unpack(keys))
    unlinks_left = unlinks_left - (upto - kh)
    pv[$HEAD] = min(pv[$TAIL], upto * SEG)
  end
  if oldest > pv[$HEAD] and floor(pv[$HEAD] / SEG) == ko and trims_left > 0 then
    local to = min(oldest, pv[$HEAD] + trims_left)
    call('LTRIM', log_seg(p, ko), (to - pv[$HEAD]) * ENTRY, -1)
    trims_left = trims_left - (to - pv[$HEAD])
    pv[$HEAD] = to
  end
  pv.ix = nil
end

-- Calls at or before now - R (the retention stored before this call, at
-- least the horizon) count in no window, from now on even if R grows (the
-- dead mark): trim them, a bounded number at a time (the rest on later
-- calls), as the embedded store deletes them. The pointer of a window that
-- long already says how many; otherwise count them, once every TRIM_EVERY
-- calls (with the call that closes a block, which comes here anyway) or
-- when the longest window is empty (a read of the log on every call of a
-- busy pool costs more than the rest of the charge; calls not trimmed yet
-- are dead all the same). (Only pools recorded in: a pool only read keeps
-- its dead mark, as in a decision that records nothing.)
for i = 0, nrec - 1 do
  local p = (serial + i) % nrec + 1
  local pv = pools[p]
  local oldest
  for w = 1, pv[$M] do
    if now - pv[$WIN * w] <= pv.dead_cut then oldest = pv[$WIN * w + $PTR] end
  end
  if oldest == nil and ((pv[$TAIL] + 1) % TRIM_EVERY == 0 or pv[$WIN * pv.lw + $PTR] >= pv[$TAIL]) then
    local b = $WIN * pv[$M] + $SCRATCH -- (a scratch window: src/ledger/redis/scripts.rs)
    pv[b], pv[b + $SUM], pv[b + $PTR], pv[b + $OLDEST] = visible, 0, pv[$HEAD], 0
    if not slide(p, pv, b, pv.dead_cut) then
      -- (the head's segment expired before a trim reached it: passed when
      -- the next one's first call is dead too, see past_expired; else the
      -- head stays, and the pool is found lost where it matters)
      pv[b + $PTR] = past_expired(p, pv[$HEAD], pv[$TAIL], pv.dead_cut)
    end
    oldest = pv[b + $PTR]
  end
  pv.dead = pv.dead_cut
  if oldest and oldest > pv[$HEAD] then trim(p, pv, oldest) end
end

-- Append the record of pool p's block that the call just logged completed.
local function append_record(p, pv)
  local b = pv[$TAIL] / BLOCK - 1
  pv.ix = { top = b - 1, len = {} }
  local e = calls(p, pv, max(pv[$HEAD], b * BLOCK), pv[$TAIL])
  local cost, by_tag, tags = 0, {}, {}
  for j = 1, #e, ENTRY do
    local c, t = tonumber(e[j + 1]), e[j + 2]
    cost = cost + c
    if by_tag[t] then
      by_tag[t] = by_tag[t] + c
    else
      by_tag[t], tags[#tags + 1] = c, t
    end
  end
  local key = ix_seg(p, floor(b / IXSEG))
  -- (the predecessor's cumulative cost, or a new origin; a segment whose
  -- last record is not the predecessor's starts again, so that positions
  -- stay those of consecutive blocks)
  -- (a block of more than EXACT units: no record, the log is read instead)
  if cost > EXACT then
    pv.ix = nil
    return
  end
  local cum, origin = cost, b
  local _, _, pcum, _, _, _, porigin = record_of(p, pv, b - 1)
  if b % IXSEG == 0 or not pcum then call('UNLINK', key) end
  -- (a running total that would pass EXACT starts a new origin)
  if pcum and pcum + cost <= EXACT then cum, origin = pcum + cost, porigin end
  local r = { spack(RECORD, tonumber(e[1]), tonumber(e[#e - 3]), cum, cost, #e / ENTRY, b, origin) }
  for j, t in ipairs(tags) do r[j + 1] = spack('<dd', tonumber(t), by_tag[t]) end
  if call('RPUSH', key, table.concat(r)) == 1 then
    call('PEXPIRE', key, floor((pv.expires - now) / 1000))
  end
  pv.ix = nil
end

-- Add call s of pool p (state pv) at now, of `cost` units, to the pool's
-- reservations, dropping those at or before its retention's cutoff (they
-- count in no window) and all but the RESERVED newest.
local function add_reservation(p, pv, s, cost)
  local field = 'reserved:' .. string.sub(ARGV[7 + p], 6)
  local held = call('HGET', state, field) or ''
  local from = max(1, #held - 24 * (RESERVED - 1) + 1)
  while from <= #held and sunpack('<d', held, from + 8) <= pv.dead_cut do from = from + 24 end
  u[n + 1], u[n + 2] = field, string.sub(held, from) .. spack('<ddd', s, now, cost)
  n = n + 2
end
local reserved = reserve and ARGV[cal_end] or ''

-- Record the call once per pool and add its cost to every window (other
-- shares' pools, past nrec, last: only read).
a = 8 + npools
for p = 1, nrec do
  local pv, cost = pools[p], tonumber(ARGV[a])
  -- (observe mode: a window that would pass EXACT counts as lost, above)
  for w = 1, pv[$M] do
    if pv[$WIN * w + $SUM] + cost > EXACT then pv.lost, pv.rebuild = now, true end
  end
  local len = call('RPUSH', log_seg(p, floor(pv[$TAIL] / SEG)), now_text, ARGV[a], tag_id, id)
  pv[$TAIL] = pv[$TAIL] + 1
  if len ~= (pv[$TAIL] - max(pv[$HEAD], floor((pv[$TAIL] - 1) / SEG) * SEG)) * ENTRY then
    -- The log is not what the state says (a key expired or was evicted
    -- since the slide above): count it afresh, and as spent for a while.
    pv.lost, pv.rebuild = now, true
  end
  -- Each log (and its index) keeps its own expiry, renewed when it no
  -- longer covers keep. A call that opens a segment gives it that expiry,
  -- and the segment before its last (see past_expired).
  if pv.expires < now + keep or pv.renew_all then
    pv.expires = max(pv.expires, renew_to)
    renew(p, pv, pv.renew_all)
    pv.renew_all = nil
  end
  if len == ENTRY then
    local k, ms = floor((pv[$TAIL] - 1) / SEG), floor((pv.expires - now) / 1000)
    call('PEXPIRE', log_seg(p, k), ms)
    if k > floor(pv[$HEAD] / SEG) then
      call('PEXPIRE', log_seg(p, k - 1), ms)
      call('PEXPIRE', ix_seg(p, k - 1), ms)
    end
  end
  if pv[$TAIL] % BLOCK == 0 and not pv.rebuild then append_record(p, pv) end
  if string.sub(reserved, p, p) == '1' then add_reservation(p, pv, pv[$TAIL] - 1, cost) end
  for w = 1, pv[$M] do
    local b = $WIN * w
    if pv[b + $PTR] == pv[$TAIL] - 1 then pv[b + $OLDEST] = now end -- the window was empty
    pv[b + $SUM] = pv[b + $SUM] + cost
  end
  a = a + 2 + 2 * pv[$M]
end

-- (a pool only read keeps the windows it held, as save_slid does)
swap(nrec + 1)
save_state(retain)
swap(nrec + 1)

return remaining({ 1, now, serial, 0 }, true)
