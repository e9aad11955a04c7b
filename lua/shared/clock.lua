-- shared/clock.lua: the clock, for the scripts that read it (after the
-- constants, CLOCK: the argument that carries it). now in µs: ARGV[CLOCK],
-- or the Redis server's clock (TIME) when that is ""; now_text: the same
-- as the text the log stores (made once: Redis turns a Lua number into
-- text with a slow %.17g on every redis.call). (Text turns into a number
-- by arithmetic, `s + 0`: tonumber(s) parses it twice, and parsing is
-- most of what a charge costs in Lua.) With the globals every script
-- reads as locals: a global's lookup costs more on every use.
local KEYS, ARGV, call, tonumber = KEYS, ARGV, redis.call, tonumber
local now, now_text
if ARGV[CLOCK] == '' then
  local t = call('TIME')
  local us = t[2]
  now = t[1] * 1000000 + us
  if #us < 6 then us = string.rep('0', 6 - #us) .. us end
  now_text = t[1] .. us
else
  now, now_text = ARGV[CLOCK] + 0, ARGV[CLOCK]
end
