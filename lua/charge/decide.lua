-- charge/decide.lua: the general path's decisions before anything is
-- recorded, in order: a resent charge found in the log, observe mode's word
-- from the upstream, a block, a lost log, and whether the call fits every
-- window (if not, when it fits again).

-- A resent charge already in the log (of its first pool, among its last
-- RESEND calls) is answered as it was, and not recorded again. Only
-- resends pay for the search.
if resend then
  local pv, found, done = pools[1], false, false
  local from, stop = pv[$TAIL], max(pv[$HEAD], pv[$TAIL] - RESEND)
  while not (found or done) and from > stop do
    local lo = max(stop, floor((from - 1) / BLOCK) * BLOCK)
    local e = calls(1, pv, lo, from)
    from, done = lo, #e == 0
    for j = #e - ENTRY + 1, 1, -ENTRY do
      if tonumber(e[j]) <= now - horizon then
        done = true
        break
      end
      if e[j + 3] == id then
        found = true
        break
      end
    end
  end
  if found then
    save_slid()
    return remaining({ 1, now, serial, 1 }, false)
  end
end

-- Observe: the upstream says `rem` units of its `limit` are left in the
-- pool: what it counts beyond the ledger's own usage (in the pool's longest
-- window, slid to now above) was spent by others, and counts as such until
-- the upstream's count resets. Never less than the ledger's own count.
-- Within one period (resets within SAME_PERIOD of each other) the units
-- only grow: a lower count is a stale one (Others::after_count in
-- src/ledger/decision.rs decides the same).
if flag == 2 then
  local pv, rest = pools[1], cal_end
  local rem, limit = tonumber(ARGV[rest]), tonumber(ARGV[rest + 1])
  local at, after = tonumber(ARGV[rest + 2]), tonumber(ARGV[rest + 3])
  local others = max(limit - pv[$WIN * pv.lw + $SUM] - rem, 0)
  local untl = at > 0 and at or now + (after >= 0 and after or pv.longest)
  local from_reset = at > 0 or after >= 0
  if pv.others > 0 and pv.others_until > now and not (from_reset and untl > pv.others_until + SAME_PERIOD) then
    if others >= pv.others then pv.others, pv.others_until = others, max(untl, pv.others_until) end
  elseif others > 0 then
    pv.others, pv.others_until = others, untl
  else
    pv.others, pv.others_until = 0, 0
  end
  -- (the state lives at least until others' units leave)
  if pv.others_until - now + MINUTE > keep then
    keep = pv.others_until - now + MINUTE
    renew_to = now + keep + floor(retain / 8)
  end
  save_slid()
  return { 4, now, serial, pv.others, pv.others_until }
end

if blocked_until > now then
  return { 2, now, serial, blocked_until, call('HGET', state, 'blocked_reason') or '' }
end

-- A pool whose log was lost counts as spent until its longest window passed.
for p = 1, npools do
  local pv = pools[p]
  if pv.lost_any > 0 and force then
    if observed[1] == 0 then observed = { p, 0, pv.lost_any + pv.longest - now } end
  elseif pv.lost_any > 0 then
    save_slid()
    return { 3, now, serial, p, pv.lost_any, pv.lost_any + pv.longest }
  end
end

-- Does the call fit every window? If not, it fits again at the latest of the
-- times at which each short window has shed enough units.
local worst_p, worst_w, worst_retry
local lost_short = false -- (observe mode: a log found shorter than its state)
a = 8 + npools
-- (other shares' pools, past nrec, are only read: they keep no call out)
for p = 1, nrec do
  local pv = pools[p]
  for w = 1, pv[$M] do
    local b = $WIN * w
    local extra = w == pv.lw and pv.extra or 0
    local need = pv[b + $SUM] + extra + tonumber(ARGV[a]) - tonumber(ARGV[a + 2 * w + 1])
    local cal = cals[p][w]
    if need > 0 and cal then
      -- A calendar window frees its units at once, when its period ends
      -- (or when others' units leave, if that is enough and sooner).
      local at = cal[2]
      if extra > 0 and need <= extra then at = math.min(at, math.max(now, pv.others_until)) end
      if worst_retry == nil or at - now > worst_retry then
        worst_p, worst_w, worst_retry = p, w, at - now
      end
    elseif need > 0 then
      local at = extra == 0 and freed_at(p, pv, b, need)
      if extra > 0 then
        -- Others' units leave at once when the upstream resets; until
        -- then, the ledger's own calls must free all that is needed.
        local mine = need - extra
        at = now
        if mine > 0 then at = freed_at(p, pv, b, mine) end
        if at then at = math.max(at, pv.others_until) end
        if at and need <= pv[b + $SUM] then
          local sooner = freed_at(p, pv, b, need)
          if sooner == nil or sooner < at then at = sooner end
        end
      end
      if at == nil and force then
        -- (observe mode: a lost log is reported, and recorded through; no
        -- window of a log that is gone says anything)
        pv.lost, pv.rebuild = now, true
        observed, lost_short = { p, 0, pv.longest }, true
      elseif at == nil then
        -- The entries the state counts are gone: the log was lost.
        pv.lost, pv.rebuild = now, true
        save_slid()
        return { 3, now, serial, p, now, now + pv.longest }
      end
      local retry = at and at - now
      if retry and (worst_retry == nil or retry > worst_retry) then
        worst_p, worst_w, worst_retry = p, w, retry
      end
    end
  end
  a = a + 2 + 2 * pv[$M]
end
-- Shares (src/ledger/shares.rs), once every window fits: in every window
-- of the charge's own pools, the units left after it must cover what every
-- other share still holds: its unused reserve (its reserve less its pool's
-- window sum), and in a calendar window past its lending point no more
-- than its reserve times the part of the period left after now (rounded
-- down: the last unit opens before the period's last instant). If not, it may fit when enough of the window has left (sliding),
-- or when enough has opened (calendar: at the latest, the period's end);
-- the share that holds most is named. All exact in doubles: no product
-- passes 2^53 (units can be near it, a period's length ~2^37 µs).
local kept_q, kept = 0, 0
if shares and worst_retry == nil then
  local fmod = math.fmod
  -- floor(x * y / z) for 0 <= y < z < 2^52: x = qx z + rx (fmod is
  -- exact), then rx y / z a bit of y at a time, remainders below 2z.
  local function mul_div_down(x, y, z)
    local rx, n = fmod(x, z), y
    local q, r, bit = 0, 0, 1
    while bit * 2 <= n do bit = bit * 2 end
    while bit >= 1 do
      q, r = q * 2, r * 2
      if r >= z then q, r = q + 1, r - z end
      if n >= bit then
        n, r = n - bit, r + rx
        if r >= z then q, r = q + 1, r - z end
      end
      bit = bit / 2
    end
    return (x - rx) / z * y + q
  end
  -- What the reserves of `rows` (reserve, unused) hold at `t` in the
  -- period `cal`, lending from `lend_at` (false: never).
  local function held(rows, cal, lend_at, t)
    local sum, most, most_at = 0, 0, 0
    for j = 1, #rows, 3 do
      local h = rows[j + 1]
      if lend_at and t >= lend_at then
        local left = cal[2] - 1 - t
        h = left > 0 and math.min(h, mul_div_down(rows[j], left, cal[2] - cal[1])) or 0
      end
      sum = sum + h
      if h > most then most, most_at = h, rows[j + 2] end
    end
    return sum, most, most_at
  end
  local sh = cal_end + (reserve and 1 or 0)
  local nbase, lend = tonumber(ARGV[sh]), tonumber(ARGV[sh + 2])
  local i = sh + 3
  a = 8 + npools
  for p = 1, nbase do
    local pv, k, cost = pools[p], tonumber(ARGV[i]), tonumber(ARGV[a])
    local m = pv[$M]
    for w = 1, m do
      local b, cal = $WIN * w, cals[p][w]
      local lend_at = false
      if cal and lend >= 0 then
        -- (lend hundredths of a percent of the period, rounded down)
        local len = cal[2] - cal[1]
        local rl = fmod(len, 10000)
        lend_at = cal[1] + (len - rl) / 10000 * lend + floor(rl * lend / 10000)
      end
      local rows = {}
      for r = 0, k - 1 do
        local at_r = i + 1 + r * (1 + m)
        local q = tonumber(ARGV[at_r])
        local reserve_w = tonumber(ARGV[at_r + w])
        local left = reserve_w - pools[q][b + $SUM]
        rows[#rows + 1], rows[#rows + 2], rows[#rows + 3] = reserve_w, left > 0 and left or 0, q
      end
      local extra = w == pv.lw and pv.extra or 0
      local room = tonumber(ARGV[a + 2 * w + 1]) - pv[b + $SUM] - extra - cost
      local unused, most, most_q = held(rows, cal, lend_at, now)
      if unused > room then
        local at
        if cal then
          -- The first instant at which what is held fits in the room left
          -- (if no one else charges first): nothing is held at the end.
          local lo, hi = now, cal[2]
          if lend_at and lend_at > now then
            lo = lend_at - 1
            if lo >= hi then lo = hi - 1 end
          end
          if not lend_at then lo = hi - 1 end
          while hi - lo > 1 do
            local mid = floor((lo + hi) / 2)
            if held(rows, cal, lend_at, mid) <= room then hi = mid else lo = mid end
          end
          at = hi
        else
          at = freed_at(p, pv, b, unused - room) or now + pv[b]
        end
        if worst_retry == nil or at - now > worst_retry then
          worst_p, worst_w, worst_retry, kept_q, kept = p, w, at - now, most_q, most
        end
      end
    end
    i = i + 1 + k * (1 + m)
    a = a + 2 + 2 * m
  end
end
if worst_retry ~= nil and force then
  if not lost_short then observed = { worst_p, worst_w, worst_retry } end
elseif worst_retry ~= nil then
  -- The slid sums are exact; keep them so the next call starts here.
  save_slid()
  return { 0, now, serial, worst_p, worst_w, worst_retry, kept_q, kept }
end
if observed[1] > 0 then
  -- Observe mode: counted, with its time, for status.
  local name = string.sub(ARGV[7 + observed[1]], 6)
  call('HINCRBY', state, 'observed:' .. name, 1)
  call('HSET', state, 'observed_at:' .. name, now_text)
end
