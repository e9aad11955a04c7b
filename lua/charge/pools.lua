-- charge/pools.lua: each pool's state, brought up to now (the general
-- path): calendar periods found, a pool new or changed counted afresh from
-- its log, a lost log noticed, every window slid; then the retention and
-- the keys' expiry.

-- Each pool's state, brought up to now. A pool seen for the first time, or
-- whose windows changed, or whose state and log are out of step, is counted
-- afresh from its log.
-- Calendar windows: the period that holds now, [start, stop), among the
-- midnights at ARGV[from..], stepped by per from each and the day's last
-- running to the next midnight (as src/ledger/calendar.rs period_in).
local CAL = 6
local function period(from, per)
  for d = from, from + CAL - 2 do
    local day, next_day = tonumber(ARGV[d]), tonumber(ARGV[d + 1])
    if day <= now and now < next_day then
      local last = math.max(floor(DAY / per) - 1, 0)
      local k = math.min(floor((now - day) / per), last)
      local start = day + k * per
      return start, k == last and next_day or math.min(start + per, next_day)
    end
  end
end
local cal_at = 8 + npools -- (past every pool's layout: the midnights)
for _ = 1, npools do cal_at = cal_at + 2 + 2 * tonumber(ARGV[cal_at + 1]) end
local cal_end = cal_at -- (past the midnights: observe's or reserve's arguments)
-- Per pool, per calendar window: its period's {start, stop}.
local cals = {}

local pools, longest = {}, horizon
local a = 8 + npools -- where the pool's layout starts in ARGV
for p = 1, npools do
  local cost, m = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  local pv = v[3 + p]
  -- (unpacked as stored: the configuration may have changed its windows;
  -- an older build's, charge/open.lua refused)
  if pv and pv ~= '' then
    pv = pool_state(sunpack(layout((#pv / 8 - $FIXED) / $WIN), pv))
    -- (the expiry, loss time, dead mark and others' units, past the windows)
    local t = $WIN * pv[$M]
    pv.expires, pv.lost, pv.dead = pv[t + $EXPIRES], pv[t + $LOST], pv[t + $DEAD]
    pv.others, pv.others_until = pv[t + $OTHERS], pv[t + $OTHERS_UNTIL]
  else
    pv = nil
  end
  local fresh = not pv or pv[$M] ~= m
  -- (the stored windows' longest reach: a pool whose longest grew renews
  -- every segment's expiry, made for the shorter)
  local plong_was = 0
  for w = 1, pv and pv[$M] or 0 do
    local len = pv[$WIN * w]
    if len < 0 then len = -len + HOUR end
    if len > plong_was then plong_was = len end
  end
  local plong, lw = 0, 1
  cals[p] = {}
  for w = 1, m do
    local len, budget = tonumber(ARGV[a + 2 * w]), tonumber(ARGV[a + 2 * w + 1])
    if cost > budget then return redis.error_reply('COST_EXCEEDS_BUDGET pool ' .. p) end
    -- (how long an entry counts: a calendar period can run an hour long)
    local reach = len
    if len < 0 then
      local start, stop = period(cal_end, -len)
      if not start then return redis.error_reply('CLOCK_SKEW the store clock is days from the caller\'s') end
      cals[p][w], cal_end, reach = { start, stop }, cal_end + CAL, -len + HOUR
    end
    if reach > longest then longest = reach end
    if reach > plong then plong, lw = reach, w end
    if not fresh and pv[$WIN * w] ~= len then fresh = true end
  end
  -- (the pool's own loss is stored with it; a loss of the whole log, in meta)
  local expires_p, lost_p, dead_p = pv and pv.expires or 0, pv and pv.lost or 0, pv and pv.dead or 0
  local others_p, others_until_p = pv and pv.others or 0, pv and pv.others_until or 0
  -- A log past its expiry held only calls that count in no window: it
  -- starts afresh at its tail (its keys may not be gone yet).
  if pv and expires_p > 0 and now >= expires_p and pv[$TAIL] > pv[$HEAD] then
    restart(p, pv[$TAIL])
    pv[$HEAD], fresh = pv[$TAIL], true
  end
  -- (no window reaches back past the retention, nor past the dead mark;
  -- a calendar window counts its period's entries only)
  local dead_cut = max(now - visible, dead_p)
  local cuts, cut_min, own = {}, now, nil
  for w = 1, m do
    local cal = cals[p][w]
    local start = cal and cal[1] - 1 or now - tonumber(ARGV[a + 2 * w])
    cuts[w] = max(start, dead_cut)
    if cuts[w] < cut_min then cut_min = cuts[w] end
    -- (a window longer than the retention, cut by the retention's cutoff
    -- only, for this decision: see save_slid)
    if cuts[w] > max(start, dead_p) then own = own or {}; own[w] = true end
  end
  local held = nil
  for attempt = 1, 2 do
    if fresh then
      local head, tail, skipped = 0, 0, false
      if pv then
        head, tail = past_expired(p, pv[$HEAD], pv[$TAIL], cut_min), pv[$TAIL]
        skipped = head > pv[$HEAD]
      elseif call('EXISTS', log_seg(p, 0)) == 1 then
        -- No state, but a log: the state was lost alone (evicted). Where
        -- the log's live calls are is unknown: start afresh, counted as
        -- spent for a while.
        restart(p, 0)
        lost_p = now
      end
      -- (on the second attempt the slide found calls missing)
      local gone = pv and ((attempt == 2 and not skipped) or not intact(p, head, tail))
      if gone then
        -- The log is not what the state says: it vanished (evicted, or a
        -- Redis without persistence restarted). Start it afresh, and count
        -- the pool as spent for a while.
        restart(p, tail)
        head, lost_p = tail, now
      end
      pv = pool_state(head, tail, m)
      local total = cost_between(p, pv, head, tail)
      for w = 1, m do
        local b = $WIN * w
        pv[b], pv[b + $SUM], pv[b + $PTR], pv[b + $OLDEST] = tonumber(ARGV[a + 2 * w]), total, head, 0
      end
    end
    if own then
      held = {}
      for w in pairs(own) do held[w] = { pv[$WIN * w + $SUM], pv[$WIN * w + $PTR], pv[$WIN * w + $OLDEST] } end
    end
    local ok = true
    for w = 1, m do ok = slide(p, pv, $WIN * w, cuts[w]) and ok end
    if ok or fresh then break end
    -- The log is shorter than the state says: count afresh (above).
    fresh = true
  end
  -- A loss is over once the pool's longest window has passed since (or
  -- R, the longest of every window charged before).
  if lost_p > 0 and (lost_p + plong <= now or lost_p + visible <= now) then lost_p = 0 end
  local lost_any = max(lost_p, lost_all)
  if lost_any + plong <= now then lost_any = 0 end
  pv.expires, pv.lost, pv.lost_any, pv.longest = expires_p, lost_p, lost_any, plong
  pv.dead, pv.dead_cut, pv.held = dead_p, dead_cut, held or false
  pv.renew_all = plong > plong_was and plong_was > 0
  -- Others' units count in the longest window until the upstream's reset.
  pv.lw, pv.others, pv.others_until = lw, others_p, others_until_p
  pv.extra = others_until_p > now and others_p or 0
  pools[p] = pv
  a = a + 2 + 2 * m
end
local retain = max(visible, longest)
-- Every key lives until its newest entry counts in no window (and the block
-- is over), plus a minute. Renewed 1/8 window ahead, so not on every call.
local keep = retain + MINUTE
if blocked_until - now + MINUTE > keep then keep = blocked_until - now + MINUTE end
-- (and others' units, until the upstream's reset)
for p = 1, npools do
  if pools[p].others_until - now + MINUTE > keep then keep = pools[p].others_until - now + MINUTE end
end
local renew_to = now + keep + floor(retain / 8)
-- (shares: pools past the first nrec are other shares', only read)
local nrec = shares and tonumber(ARGV[cal_end + (reserve and 1 or 0) + 1]) or npools
