-- tower-ratelimit: the first part of every decision (the script declares
-- `now` and `slack_ms`). `now` in microseconds: ARGV[1] when given (tests
-- replaying a trace), else Redis's own TIME, so application servers'
-- clocks never matter (in a batch, TIME once, when the call began: a
-- later decision of the batch is decided as if it came with the first,
-- behind the clock by at most the batch's own running time, which can
-- refuse it a moment's refill but never gives it one early). Keys live
-- `slack_ms` longer than their state matters: a minute with an explicit
-- `now` (virtual time is not real time; expired state is ignored
-- anyway), else not at all.

now = {{number}}(ARGV[1])
slack_ms = 0
if now then
  slack_ms = 60000
else
  {{server_time}}
end
