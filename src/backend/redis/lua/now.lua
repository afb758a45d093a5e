-- tower-ratelimit: the first part of every decision (the script declares
-- `now` and `slack_ms`). `now` in microseconds: ARGV[1] when given (tests
-- replaying a trace), else Redis's own TIME, so application servers'
-- clocks never matter (in a batch, TIME once: each decision after the
-- first is a microsecond after the one before, never ahead of the clock,
-- as a decision takes longer than that). Keys live `slack_ms` longer
-- than their state matters: a minute with an explicit `now` (virtual time
-- is not real time; expired state is ignored anyway), else not at all.

now = {{number}}(ARGV[1])
slack_ms = 0
if now then
  slack_ms = 60000
else
  {{server_time}}
end
