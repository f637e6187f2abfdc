#!/usr/bin/env bash
# Mutants of the client: each one a bug that lock libraries have shipped, built into a
# copy of this tree's distlock-core (or of the facade's tower layers), and run through the simulation (distlock-sim) on
# the kinds whose promise it breaks, seed by seed from 0, until a seed catches it.
# Each must be caught within the budget (SIM_MUTANT_SEEDS, 10,000 by default: what
# CI's simulation run covers); the script prints each mutant's first catching seed,
# the promise that seed broke, and fails if a mutant survived the budget.
#
# The copy is the tree's tracked files (git ls-files) in a temporary folder, at the
# same path each time; its builds share target/mutants, so only the mutated crate and
# those above it rebuild per mutant, incrementally and lightly optimised (the
# workspace's `mutants` profile): the simulation is deterministic by seed, so a
# mutant's first catching seed is the same whatever the optimisation.
set -euo pipefail
cd "$(dirname "$0")/.."

budget="${SIM_MUTANT_SEEDS:-10000}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export CARGO_TARGET_DIR="$PWD/target/mutants"
# The profile's incremental builds, whatever the caller set (CI turns them off).
export CARGO_INCREMENTAL=1

# name|file|kinds, then the line to find (exactly once) and what replaces it.
mutants() {
  cat <<'MUTANTS'
validity-from-reply|distlock-core/src/backend/ext.rs|mutex,efficiency,run-once
    settle(backend, request, grant, sent_at).await
    settle(backend, request, grant, Instant::now()).await
least-hold-only-at-release|distlock-core/src/client/options.rs|run-once
            .map_or(self.ttl, |least| least.max(self.ttl))
            .map_or(self.ttl, |_least| self.ttl)
leader-work-kept-on-loss|distlock-core/src/kinds/leader.rs|leader-loop
            Some(reason) = lost => TermEnd::Lost(reason),
            Some(reason) = lost, if false => TermEnd::Lost(reason),
leader-term-kept-on-shutdown|distlock-core/src/kinds/leader.rs|leader-loop
                if let Err(error) = leadership.resign().await {
                if let Err(error) = async { if matches!(ended, TermEnd::Shutdown) { std::mem::forget(leadership); Ok(()) } else { leadership.resign().await } }.await {
wait-past-its-deadline|distlock-core/src/client/lock_client.rs|mutex,fair-mutex,semaphore,rw-lock,sets
    now.checked_add(wait.min(CENTURY))
    now.checked_add(wait.min(CENTURY) + Duration::from_millis(50))
inner-hold-releases-the-lease|distlock-core/src/client/guard.rs|mutex
        self.hold.count.fetch_sub(1, Ordering::AcqRel) == 1
        self.hold.count.fetch_sub(1, Ordering::AcqRel) >= 1
clock-drift-left-out-of-validity|distlock-core/src/backend/ext.rs|mutex,efficiency,semaphore,sets
    let drift = backend.capabilities().clock_drift.allowance(ttl);
    let drift = Duration::ZERO;
bound-counted-from-first-renewal|distlock-core/src/client/guard.rs|bounded
        let limit = options.hold_at_most().map(|most| granted + most);
        let limit = options.hold_at_most().map(|most| granted + most + options.ttl() / 3);
least-hold-without-drift|distlock-core/src/client/lock_client.rs|run-once
    let drift = backend.capabilities().clock_drift.allowance(least);
    let drift = Duration::ZERO;
renewal-on-every-change|distlock-core/src/client/guard.rs|semaphore,rw-lock,limit-layer
    options.renew_interval() / 4
    options.renew_interval() * 0
bounded-hold-renews-to-its-end|distlock-core/src/client/guard.rs|bounded
        let renews = options.auto_renew() && !status.limited;
        let renews = options.auto_renew();
stopped-leading-unheard-on-loss|distlock-core/src/kinds/leader.rs|leader-loop
                warn!(election = %name, %reason, "the term was lost; campaigning again");
                warn!(election = %name, %reason, "the term was lost; campaigning again"); return None;
handler-kept-on-loss|distlock/src/tower.rs|limit-layer,lock-layer
    let lost = Box::pin(guard.lost());
    let lost = Box::pin({ let lost = guard.lost(); async move { let reason = lost.await; std::future::pending::<()>().await; reason } });
MUTANTS
}

survived=0
while IFS='|' read -r name file kinds; do
  IFS= read -r old
  IFS= read -r new
  rm -rf "$work/tree"
  mkdir -p "$work/tree"
  git ls-files -z | xargs -0 tar -cf - | tar -xf - -C "$work/tree"
  python3 - "$work/tree/$file" "$old" "$new" <<'PY'
import sys
path, old, new = sys.argv[1:]
text = open(path).read()
if text.count(old) != 1:
    sys.exit(f"sim-mutants: {path} holds {text.count(old)} copies of the line to mutate, not 1:\n{old}")
open(path, "w").write(text.replace(old, new))
PY
  (cd "$work/tree" && cargo build --profile mutants --locked --quiet -p distlock-sim </dev/null 2>/dev/null) || {
    echo "sim-mutants: $name did not build" >&2
    exit 1
  }
  if out=$("$CARGO_TARGET_DIR/mutants/distlock-sim" --first --seeds "$budget" --kinds "$kinds" </dev/null); then
    echo "sim-mutants: $name SURVIVED $budget seeds of $kinds"
    survived=$((survived + 1))
  else
    seed=$(sed -n 's/^first failing seed: \([0-9]*\).*/\1/p' <<<"$out")
    promise=$(sed -n '3p' <<<"$out" | sed 's/^ *//')
    echo "sim-mutants: $name caught by seed $seed of $kinds: $promise"
  fi
done < <(mutants)
if [ "$survived" -gt 0 ]; then
  echo "sim-mutants: $survived mutant(s) survived" >&2
  exit 1
fi
