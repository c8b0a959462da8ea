# shellcheck shell=bash
# Sourced by the cluster tests that run meshrun-trainer (recovery_test.sh, memory_test.sh): reading how far a
# job got from rank 0's metrics.jsonl, and waiting for its agents. They use the caller's SCENARIO (messages),
# STEPS (the job's length) and A (agent pid per node).

# step OUT: the last step whose loss rank 0 logged (0 before any).
step() { grep -o '"step":[0-9]*' "$1/metrics.jsonl" 2> /dev/null | tail -1 | cut -d: -f2 | grep . || echo 0; }
# wait_step OUT N: until rank 0 logged step N (<= 60 s).
wait_step() {
  for _ in $(seq 1200); do [ "$(step "$1")" -ge "$2" ] && return 0; sleep 0.05; done
  mc_fail "$SCENARIO: step $2 not reached (at $(step "$1"))"; return 1
}
# final_loss OUT: the loss logged for the last step.
final_loss() { grep "\"step\":${STEPS}[,}]" "$1/metrics.jsonl" | grep -o '"loss":[-0-9.e]*' | tail -1 | cut -d: -f2; }
# expect_exit NODE RC: node NODE's meshrun ends (<= 120 s) with RC.
expect_exit() {
  mc_wait_exit "${A[$1]}" 120
  [ "$MC_RC" = "$2" ] || mc_fail "$SCENARIO: node$1's meshrun exited $MC_RC, expected $2"
}
# run_reference OUT: the caller's job (its agent function) on nodes 0-2 without a fault, in run "ref"; its final
# loss in REF_LOSS (not in a subshell: the agents' pids and mc_fail's count stay the caller's).
run_reference() {
  local i
  mkdir -p "$1"
  for i in 0 1 2; do agent "$i" ref "$1"; done
  for i in 0 1 2; do expect_exit "$i" 0; done
  REF_LOSS=$(final_loss "$1")
}
