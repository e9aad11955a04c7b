-- charge/open.lua: the general opening (after charge/fast.lua's function):
-- the arguments read, the credential's state read in one HMGET, an older
-- layout refused, the clock clamped, the fast path tried; then the
-- general path's pool state and the names of a pool's keys.

-- (KEYS, ARGV, call, tonumber and now: lua/shared/clock.lua, just before)
local spack, sunpack, floor, min, max = struct.pack, struct.unpack, math.floor, math.min, math.max
local state = KEYS[1]

local flag = ARGV[3] == '0' and 0 or tonumber(ARGV[3]) or 0
local id, resend, horizon = ARGV[2], flag % 2 == 1, ARGV[4] + 0
local force, reserve, shares = floor(flag / 4) % 2 == 1, floor(flag / 8) % 2 == 1, flag >= 16
local tag_field, min_serial, npools = ARGV[5], ARGV[6] + 0, ARGV[7] + 0

-- (then each pool's state field, then its front, for the fast path; one
-- pool, the common charge, without a table)
local v
if npools == 1 then
  v = call('HMGET', state, 'meta', 'blocked_until', tag_field, ARGV[8], 'front:' .. ARGV[8])
else
  local fields = { 'meta', 'blocked_until', tag_field }
  for p = 1, npools do fields[3 + p], fields[3 + npools + p] = ARGV[7 + p], 'front:' .. ARGV[7 + p] end
  v = call('HMGET', state, unpack(fields))
end
local last, serial, stored_retain, expires, lost_all = 0, 0, 0, nil, 0
-- Keys written by an older build would be misread: refuse them before
-- writing anything (a meta of four numbers, a build before 2026-11-23;
-- log triples and a 'serial' field, before 2026-11-22; an older pool
-- state, below).
if v[1] and #v[1] ~= 8 * $META_FIELDS then return redis.error_reply('OLDER_LAYOUT keys written by an older build') end
if v[1] then
  last, serial, stored_retain, expires, lost_all = sunpack(META, v[1])
elseif call('HEXISTS', state, 'serial') == 1 then
  return redis.error_reply('OLDER_LAYOUT keys written by an older build')
end
local blocked_until = v[2] and tonumber(v[2]) or 0
if now < last then now, now_text = last, string.format('%d', last) end
-- The caller saw more charges than the store holds: the log was lost.
local visible = max(stored_retain, horizon) -- R, above
-- A loss older than R is over for every window charged so far: forget it,
-- so that a window lengthened later does not bring it back.
if lost_all > 0 and lost_all + visible <= now then lost_all = 0 end
if serial < min_serial then lost_all = now end

local fast = (flag == 0 or flag == 16) and lost_all == 0 and blocked_until <= now
  and fast_charge(v, now, now_text, npools, horizon, visible, expires, serial, shares,
    ENTRY, SEG, BLOCK, FRONT, REACH, SLOT, META, TRIM_EVERY, MINUTE, layout)
if fast then return fast end
-- (the general path: a pool state of an older build, a number of fields
-- that is not a multiple of 4, is refused before anything is written)
for p = 1, npools do
  if v[3 + p] and #v[3 + p] % (8 * $WIN) ~= 0 then return redis.error_reply('OLDER_LAYOUT keys written by an older build') end
end

-- (observe mode: the pool, window and retry of what would have refused it)
local observed = { 0, 0, 0 }

-- A pool's state (pool:P unpacked, in its array part) with every named
-- field this script sets made at once: a table grown field by field is
-- rehashed at every power of two.
local function pool_state(...)
  return {
    expires = 0, lost = 0, dead = 0, others = 0, others_until = 0, lost_any = 0, longest = 0,
    dead_cut = 0, lw = 1, extra = 0, renew_all = false, rebuild = false, ix = false, held = false, ...
  }
end

-- The keys of segment k of pool p's log and of its index.
local function log_seg(p, k) return KEYS[1 + p] .. ':' .. k end
local function ix_seg(p, k) return KEYS[1 + npools + p] .. ':' .. k end
