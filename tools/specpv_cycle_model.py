#!/usr/bin/env python3
"""Predicts exact SpecPV's decode speed against full-verify speculation from measured
round costs and a per-position disagreement rate d (issue 17's 2x goal; BENCHMARKS 7,
"Why 130K rolls back", and 7b).

Two schedules of the same exact rule (a provisional token is kept only where a full
verification agrees, so the output is plain decoding's whatever d is):

- serial: what the engine runs. `refresh` partial rounds, then a full round that judges
  their provisional tokens (and its own drafts) and refreshes the view.
- overlapped (not built): full rounds run back to back on a second stream, each judging
  every provisional token the partial rounds made before it started, while partial rounds
  keep extending the newest provisional text. A rollback throws away the partial rounds
  built on the refused token; the next full round starts after `restart` partial rounds.
  Over the host tier a full round is PCIe-bound and a partial one is not, which is why
  the two could share the card; `slowdown` scales partial rounds run beside a full one.

The bound column: with any schedule of one provisional text, a full round keeps at most
the tokens before its first disagreement plus the target's, 1/d on average, in a full
round's time; more needs fewer disagreements (a target trained for the context) or full
rounds that judge alternatives too (a tree of provisional texts), not a better schedule.

The model: a partial round yields a+1 provisional tokens, a drawn from the full-verify
row's accepted-draft histogram (the draft acceptance under a partial view is close to it:
63.9% vs 69.9% at 130K); every provisional token disagrees with the full verification
independently with probability d. A full round that finds the first disagreement at
provisional token i keeps i tokens plus the target's own; one that finds none keeps them
all plus its drafts' a+1 (serial); overlapped full rounds judge no drafts of their own. Costs come from one `specpipe bench` JSON (specpv_long_e2e.sh)
or from the flags. Monte Carlo, a fixed seed: the same inputs give the same figures.

  python3 tools/specpv_cycle_model.py --json bench/results/specpv_long_128k_h200_2026-11-26.json
  python3 tools/specpv_cycle_model.py --json ... --row exact-2048 --d 0.03,0.1 --refresh 4
"""
import argparse
import json
import random
import sys


def row_by_name(results, name):
    for r in results:
        if r.get("drafter") == name:
            return r
    sys.exit(f"specpv_cycle_model: no row '{name}' in the JSON (rows: "
             + ", ".join(r.get("drafter", "?") for r in results) + ")")


def costs_from_json(path, row_name):
    """Round costs (ms) and the draft-acceptance histogram from a bench JSON."""
    with open(path) as f:
        bench = json.load(f)["bench"]
    full = row_by_name(bench["results"], "draft model")
    spec = row_by_name(bench["results"], row_name)
    view = spec.get("verify_view")
    if not view or not view.get("partial_rounds") or not view.get("full_rounds"):
        sys.exit(f"specpv_cycle_model: row '{row_name}' has no partial and full rounds")
    hist = full["accepted_hist"]
    return {
        "full_verify_round_ms": full["verify_ms"] / full["rounds"]
        + full["draft_ms"] / full["rounds"],
        "partial_ms": (view["partial_verify_ms"] + spec["draft_ms"] * view["partial_rounds"]
                       / spec["rounds"]) / view["partial_rounds"],
            # the refresh of the view after a full round is in the row's messaging time
        "full_ms": (view["full_verify_ms"] + spec["messaging_ms"] + spec["draft_ms"]
                    * view["full_rounds"] / spec["rounds"]) / view["full_rounds"],
        "hist": hist,
        "measured": spec["tok_per_s"] / full["tok_per_s"],
        "rollbacks": f'{view["rollbacks"]} of {view["full_rounds"]} full rounds',
    }


def drafts_accepted(rng, hist):
    return rng.choices(range(len(hist)), weights=hist)[0]


def judge(rng, provisional, d, hist):
    """(tokens kept, rolled back?) for a full round over `provisional` tokens."""
    for i in range(provisional):
        if rng.random() < d:
            return i + 1, True
    return provisional + drafts_accepted(rng, hist) + 1, False


def serial(c, d, refresh, tokens, rng):
    """Tokens per ms of the engine's schedule."""
    made = spent = 0.0
    while made < tokens:
        provisional = sum(drafts_accepted(rng, c["hist"]) + 1 for _ in range(refresh))
        kept, _ = judge(rng, provisional, d, c["hist"])
        made += kept
        spent += refresh * c["partial_ms"] + c["full_ms"]
    return made / spent


def overlapped(c, d, restart, slowdown, tokens, rng):
    """Tokens per ms with full rounds back to back beside the partial rounds."""
    partial_ms = c["partial_ms"] * slowdown
    rounds_beside = max(1, int(c["full_ms"] / partial_ms))
    made = spent = 0.0
    ready = 0  # provisional tokens the next full round judges
    while made < tokens:
        if ready == 0:  # after a rollback: `restart` partial rounds before a full one
            ready = sum(drafts_accepted(rng, c["hist"]) + 1 for _ in range(restart))
            spent += restart * c["partial_ms"]
        # the partial rounds beside this full round extend the text past what it judges
        beside = sum(drafts_accepted(rng, c["hist"]) + 1 for _ in range(rounds_beside))
        for i in range(ready):
            if rng.random() < d:  # refused: keep i tokens and the target's, drop the rest
                made += i + 1
                ready = 0
                break
        else:  # all agree; the target's next token is judged with `beside` next time
            made += ready
            ready = beside
        spent += c["full_ms"]
    return made / spent


def full_verify(c):
    mean = sum(i * w for i, w in enumerate(c["hist"])) / sum(c["hist"])
    return (mean + 1) / c["full_verify_round_ms"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="a specpipe bench JSON (specpv_long_e2e.sh)")
    ap.add_argument("--row", default="exact-2048", help="the SpecPV row to take costs from")
    ap.add_argument("--partial-ms", type=float, help="a partial round, drafting included")
    ap.add_argument("--full-ms", type=float, help="a full round with its refresh")
    ap.add_argument("--full-verify-ms", type=float, help="a full-verify speculation round")
    ap.add_argument("--hist", help="accepted drafts histogram, e.g. 5,5,3,0,21")
    ap.add_argument("--d", default="0,0.01,0.02,0.03,0.045,0.06,0.08,0.1,0.125,0.15",
                    help="per-position disagreement rates to predict")
    ap.add_argument("--refresh", type=int, default=4, help="partial rounds a full round")
    ap.add_argument("--restart", type=int, default=2,
                    help="overlapped: partial rounds before the full round after a rollback")
    ap.add_argument("--slowdown", type=float, default=1.0,
                    help="overlapped: partial rounds' cost beside a full round, x alone")
    ap.add_argument("--tokens", type=int, default=200000, help="simulated tokens a point")
    ap.add_argument("--seed", type=int, default=17)
    a = ap.parse_args()

    if a.json:
        c = costs_from_json(a.json, a.row)
    else:
        c = {"measured": None, "rollbacks": None}
    for key, flag in (("partial_ms", a.partial_ms), ("full_ms", a.full_ms),
                      ("full_verify_round_ms", a.full_verify_ms)):
        if flag is not None:
            c[key] = flag
    if a.hist:
        c["hist"] = [float(x) for x in a.hist.split(",")]
    missing = [k for k in ("partial_ms", "full_ms", "full_verify_round_ms", "hist") if k not in c]
    if missing:
        sys.exit("specpv_cycle_model: give --json or " + ", ".join(missing))

    base = full_verify(c)
    print(f"partial round {c['partial_ms']:.2f} ms, full round {c['full_ms']:.2f} ms, "
          f"full-verify round {c['full_verify_round_ms']:.2f} ms "
          f"({base * 1000:.1f} tok/s), {a.refresh} partial rounds a full one")
    if c.get("measured"):
        print(f"measured ({a.row}): {c['measured']:.2f}x full-verify, rollbacks {c['rollbacks']}")
    print("d      serial   overlapped  bound (x full-verify speculation)")
    rng = random.Random(a.seed)
    for d in (float(x) for x in a.d.split(",")):
        s = serial(c, d, a.refresh, a.tokens, rng) / base
        o = overlapped(c, d, a.restart, a.slowdown, a.tokens, rng) / base
        # any schedule of one provisional text: a full round keeps at most the tokens
        # before the first disagreement and the target's, 1/d of them on average
        bound = f"{1 / d / c['full_ms'] / base:6.2f}x" if d > 0 else "     -"
        print(f"{d:<6.3f} {s:6.2f}x  {o:6.2f}x     {bound}")


if __name__ == "__main__":
    main()
