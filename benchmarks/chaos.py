"""Chaos benchmark: distributed training while actor processes are SIGKILLed or SIGSTOPped every N seconds.

Not a test: `python -m benchmarks.chaos [--config CFG] [--steps S] [--every SECONDS] [--lags 0,2]
[--replicas 1,2] [--standby 0,1]` from the repository root, with the config's dataset and index
built. For each replica count (serving replicas of every stage pool and every retrieval shard),
each count of standby replicas (`pools.standby_replicas`, and as many spare processes per learner
rank, `learner.spare_ranks`) and each lag, trains with the same
config (a checkpoint every step at lag > 0) once undisturbed and, for each fault interval of
`--every`, once with a killer thread (after one untimed warm-up run for the whole invocation:
worker start-up and first imports) that every interval picks one process at random among this
run's stage actors and learner ranks, of each stage actor class only as many as serve (those that used the most CPU
in the last half interval: an idle standby is spared, as a fault there would cost nothing and
flatter the standby runs) and SIGKILLs it, or, every third
time (the first included), SIGSTOPs such a generator or retrieval shard for twice the call
deadline (`--deadline`, `pools.call_timeout_s`), so the deadline has to find it: the tighter
deadline of a replica that has answered since it started (`pools.call_timeout_factor` times its
pool's median recent answer, at least `--min-deadline`, `pools.min_call_timeout_s`); with a
second serving replica a hedge (`pools.hedge_factor`) usually answers first. Reports
steps/s of both runs and their ratio (`chaos_over_calm`, target >= 0.8) with the fault rate at
which the ratio would be 0.8 given what a fault cost on average (`break_even_faults_per_minute`),
for standby runs also
their chaos steps/s over the calm steps/s of the same serving replicas without standbys
(`chaos_over_plain_calm`: the same serving capacity, so the calm side is not slowed by the
standbys' share of the cores), the faults by kind, the calls re-dispatched, timed out and
hedged, the standbys promoted, the restores and steps redone, whether the chaos run trained the
undisturbed run's rollout numbers, and where each fault's time went (`fault_costs`: detection,
promotion of a standby, restart, load, first answer, calls and seconds lost); writes its section
of benchmarks/RESULTS.md and benchmarks/results/chaos.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import random
import signal
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import psutil
import ray

from benchmarks.results import config_in_words, machine, markdown_table, publish_figures
from benchmarks.throughput import with_sections
from mmrag.cluster.connect import connect
from mmrag.cluster.resources import local_ray_cpus
from mmrag.training.metrics_log import step_records
from mmrag.pipelines.arguments import add_config_options
from mmrag.pipelines.options import config_from_args
from mmrag.pipelines.train import train_distributed

VICTIMS = ("TranslatorActor", "EncoderActor", "RetrievalShard", "RerankerActor", "GeneratorActor", "RewardActor",
           "LearnerRank")
HANGABLE = ("GeneratorActor", "RetrievalShard")
"""What the killer SIGSTOPs: a wedged generator and a stuck shard are the hangs a cluster sees most."""
RESULTS_JSON = Path(__file__).with_name("results") / "chaos.json"
TARGET = 0.8
"""The issue's target for chaos / calm steps/s."""
WARMUP_STEPS = 2
"""Steps of the untimed run before the measured ones."""
WATCH_POLL_S = 0.1
"""How often a fault's watcher looks for its victim's successor process (the precision of respawn and load times)."""
POOL_OF = {"TranslatorActor": "translate", "EncoderActor": "retrieve", "RetrievalShard": "retrieval_shard",
           "RerankerActor": "rerank", "GeneratorActor": "answer", "RewardActor": "score"}
"""The pool (name prefix) whose outage a fault of each actor class opens."""


def actor_processes(root: psutil.Process | None = None) -> dict[int, str]:
    """pid -> actor class of the Ray actors that descend from `root`: this process by default (its local Ray's
    workers run under the raylet it started), or a node's raylet (`benchmarks.private_cluster`)."""
    found = {}
    for process in (root or psutil.Process(os.getpid())).children(recursive=True):
        try:
            title = " ".join(process.cmdline())
        except psutil.Error:
            continue
        kind = next((k for k in VICTIMS if title.startswith(f"ray::{k}")), None)
        if kind:
            found[process.pid] = kind
    return found


def cpu_seconds(pids) -> dict[int, float]:
    """pid -> CPU seconds it has used, of those still running."""
    used = {}
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
        except psutil.Error:
            continue
        used[pid] = times.user + times.system
    return used


def busiest_share(processes: dict[int, str], worked: dict[int, float], share: float, rank_share: float = 1.0
                  ) -> set[int]:
    """Of each stage actor class in `processes` (pid -> class), the `share` of its processes (rounded up) that did
    the most work (`worked`: pid -> CPU seconds); of the learner's rank processes, the `rank_share` (the ranks, not
    the spares standing by)."""
    chosen = set()
    for kind in set(processes.values()):
        pids = sorted((p for p, k in processes.items() if k == kind), key=lambda p: -worked[p])
        chosen.update(pids[:math.ceil((rank_share if kind == "LearnerRank" else share) * len(pids))])
    return chosen


class Killer(threading.Thread):
    """Every `every` seconds, SIGKILL one random actor process among the serving ones (`serving_share` of each stage
    actor class: those that worked most in the last half interval), or (every third fault, from the first) SIGSTOP
    such a generator or shard for `stop_s` seconds; records each fault (`Fault`) and watches its victim come back."""

    def __init__(self, every: float, seed: int, stop_s: float, serving_share: float = 1.0, rank_share: float = 1.0):
        super().__init__(daemon=True)
        self.every, self.rng, self.stop_s = every, random.Random(seed), stop_s
        self.serving_share, self.rank_share = serving_share, rank_share
        self.stop, self.faults = threading.Event(), Counter()
        self.records: list[Fault] = []
        self.idle_spared = 0
        """Actor processes left out of a draw as the least busy of their class (standbys), summed over faults."""

    def run(self) -> None:
        while not self.stop.wait(self.every / 2):
            before = cpu_seconds(actor_processes())
            if self.stop.wait(self.every / 2):
                return
            now = cpu_seconds(actor_processes())
            processes = {p: kind for p, kind in actor_processes().items() if p in before and p in now}
            worked = busiest_share(processes, {p: now[p] - before[p] for p in processes}, self.serving_share,
                                   self.rank_share)
            hang = sum(self.faults.values()) % 3 == 0  # the first fault a hang: short runs see one too
            candidates = sorted(p for p in worked if not hang or processes[p] in HANGABLE)
            if not candidates:
                continue
            pid = self.rng.choice(candidates)
            at = time.monotonic()
            try:
                os.kill(pid, signal.SIGSTOP if hang else signal.SIGKILL)
            except ProcessLookupError:
                continue
            fault = Fault(processes[pid], "SIGSTOP" if hang else "SIGKILL", pid, at, set(processes))
            self.idle_spared += len(processes) - len(worked)
            self.faults[fault.name] += 1
            self.records.append(fault)
            threading.Thread(target=fault.watch, args=(self.stop,), daemon=True).start()
            if hang:
                threading.Timer(self.stop_s, _continue, args=(pid,)).start()


class Fault:
    """One signal sent, and when its victim's successor appeared and finished its constructor (from the process
    titles Ray sets: `ray::Class.__init__` while constructing, `ray::Class[.method]` after)."""

    def __init__(self, kind: str, signal_name: str, pid: int, at: float, pids_before: set[int]):
        self.kind, self.signal, self.pid, self.at, self.pids_before = kind, signal_name, pid, at, pids_before
        self.respawned: float | None = None
        self.constructed: float | None = None

    @property
    def name(self) -> str:
        return f"{self.kind} {self.signal}"

    def watch(self, stop: threading.Event) -> None:
        """Poll the actor processes until a new one of the victim's class has finished its constructor."""
        while not stop.wait(WATCH_POLL_S) and self.constructed is None:
            for process in psutil.Process(os.getpid()).children(recursive=True):
                if process.pid in self.pids_before:
                    continue
                try:
                    title = " ".join(process.cmdline())
                except psutil.Error:
                    continue
                if title.startswith(f"ray::{self.kind}"):
                    now = time.monotonic()
                    self.respawned = self.respawned or now
                    if not title.startswith(f"ray::{self.kind}.__init__"):
                        self.constructed = now
                    break


def _continue(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:  # the deadline killed it, as it should
        pass


def fault_costs(faults: list[Fault], outages: list[dict], within_s: float) -> list[dict]:
    """Each fault's timeline, in seconds from the signal: when its pool noticed (`detect`), when a standby took the
    replica's place (`promote`; None without one), when Ray started the
    successor process (`restart`, from the notice for a hang, which the pool's kill ends, from the signal for a
    SIGKILL), when its constructor finished (`load`: imports, model or shard), when the replica answered a call
    again (`first_answer`); and the calls lost with the seconds they had run (work redone). None: not seen (a
    learner rank has no pool; a replica no call reached before it was back, e.g. one hit while the run was
    starting; a replica the run ended before it answered again). An outage is a fault's if its pool's name fits
    and it was noticed within `within_s` of the signal (as long as a SIGSTOP lasts)."""
    costs, unmatched = [], sorted(outages, key=lambda o: o["noticed"])
    for fault in faults:
        prefix = POOL_OF.get(fault.kind)
        outage = next((o for o in unmatched if prefix and o["pool"].startswith(prefix)
                       and fault.at <= o["noticed"] <= fault.at + within_s), None)
        if outage:
            unmatched.remove(outage)
        noticed = outage["noticed"] if outage else None
        restart_from = noticed if fault.signal == "SIGSTOP" else fault.at
        answered = outage and outage["answered_again"]
        costs.append({
            "fault": fault.name,
            "pool": outage["pool"] if outage else None,
            "detect_s": _since(fault.at, noticed),
            "promote_s": _since(fault.at, outage and outage.get("promoted")),
            "restart_s": _since(restart_from, fault.respawned),
            "load_s": _since(fault.respawned, fault.constructed),
            "first_answer_s": _since(fault.constructed, answered),
            "outage_s": _since(fault.at, answered),
            "calls_lost": outage["calls_lost"] if outage else 0,
            "work_lost_s": outage["work_lost_s"] if outage else 0.0,
        })
    return costs


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _since(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else end - start


def seconds_in_steps(run_dir: str) -> float:
    """What a run's steps themselves took (metrics.jsonl's `step_seconds`, a redone step counted each time): the
    rest of its wall time is start-up (actors constructed, models loaded), the untrained evaluation, the export."""
    return sum(r["step_seconds"] for r in step_records(run_dir))


def measure(cfg, run_dir: str, killer: Killer | None) -> dict:
    if killer:
        killer.start()
    start = time.perf_counter()
    try:
        summary = train_distributed(with_sections(cfg, train={"run_dir": run_dir}), progress=False)
    finally:
        if killer:
            killer.stop.set()
    seconds = time.perf_counter() - start
    return {"steps_per_s": cfg.train.steps / seconds, "seconds": seconds, "stepping_seconds": seconds_in_steps(run_dir),
            "ledger": summary["ledger"],
            "trained_rollouts": summary["trained_rollouts"], "redispatched": summary["redispatched_calls"],
            "timed_out": summary["timed_out_calls"], "hedged": summary["hedged_calls"],
            "probed_alive": summary["probed_alive_calls"],
            "promoted": sum(outage.get("promoted") is not None for outage in summary["outages"]),
            "fault_costs": fault_costs(killer.records, summary["outages"], killer.stop_s) if killer else []}


def measure_lag(cfg, lag: int, args, tmp: str) -> list[dict]:
    """One calm run at `lag`, then a chaos run at each fault interval of `args.every` compared with it: a record
    per interval."""
    cfg = with_sections(cfg, train={"max_policy_lag": lag, "checkpoint_every": 1 if lag else 5},
                        pools={"call_timeout_s": args.deadline, "min_call_timeout_s": args.min_deadline})
    calm = measure(cfg, str(Path(tmp) / f"calm_{lag}"), None)
    serving = cfg.translator.num_replicas  # every stage and shard alike (`with_replicas`)
    records = []
    for every in args.every:
        ranks = cfg.learner.num_workers
        killer = Killer(every, args.seed, 2 * args.deadline, serving / (serving + cfg.pools.standby_replicas),
                        ranks / (ranks + cfg.learner.spare_ranks))
        chaos = measure(cfg, str(Path(tmp) / f"chaos_{lag}_every_{every:g}"), killer)
        record = {
            "lag": lag, "fault_every_s": every, "faults_per_minute": 60 / every,
            "steps_per_s": calm["steps_per_s"], "steps_per_s_chaos": chaos["steps_per_s"],
            "chaos_over_calm": chaos["steps_per_s"] / calm["steps_per_s"], "faults": dict(killer.faults),
            "seconds_calm": calm["seconds"], "seconds_chaos": chaos["seconds"],
            "stepping_seconds_calm": calm["stepping_seconds"], "stepping_seconds_chaos": chaos["stepping_seconds"],
            "fault_costs": chaos["fault_costs"],
            "redispatched_calls": chaos["redispatched"], "timed_out_calls": chaos["timed_out"],
            "hedged_calls_calm": calm["hedged"], "hedged_calls": chaos["hedged"],
            "probed_alive_calls_calm": calm["probed_alive"], "probed_alive_calls": chaos["probed_alive"],
            "promoted_standbys": chaos["promoted"], "idle_processes_spared": killer.idle_spared,
            "ledger": chaos["ledger"], "same_rollouts": chaos["trained_rollouts"] == calm["trained_rollouts"]}
        record["extra_s_per_fault"] = seconds_lost_per_fault([record])
        record["break_even_faults_per_minute"] = break_even_rate(record["extra_s_per_fault"])
        records.append(record)
    return records


def seconds_lost_per_fault(records: list[dict]) -> float:
    """What the chaos runs of `records` lost to their faults, in seconds per fault (each against its calm run)."""
    faults = sum(sum(r["faults"].values()) for r in records)
    return sum(r["seconds_chaos"] - r["seconds_calm"] for r in records) / max(faults, 1)


def break_even_rate(extra_s_per_fault: float, target: float = TARGET) -> float | None:
    """Faults per minute at which chaos / calm would be `target`, if each fault costs the run `extra_s_per_fault`:
    a run of T chaos seconds meets T / every faults, so calm / chaos = 1 - extra / every (None: faults cost
    nothing measurable)."""
    return 60 * (1 - target) / extra_s_per_fault if extra_s_per_fault > 0 else None


def with_replicas(cfg, n: int, standby: int):
    """`cfg` with `n` serving replicas of every stage pool and `n` serving actors per retrieval shard, and `standby`
    more of each standing by, and as many spare processes per learner rank (`learner.spare_ranks`)."""
    replicas = {"num_replicas": n}
    return with_sections(cfg, translator=replicas, encoder=replicas, reranker=replicas, generator=replicas,
                         reward=replicas, index={"shard_replicas": n}, pools={"standby_replicas": standby},
                         learner={"spare_ranks": standby * cfg.learner.num_workers})


def with_plain_calm(runs: list[dict]) -> None:
    """Give every standby run `chaos_over_plain_calm`: its chaos steps/s over the calm steps/s of the run with the
    same serving replicas and lag but no standbys (None: that run was not measured)."""
    plain = {(r["replicas"], r["lag"]): r["steps_per_s"] for r in runs if not r["standby"]}
    for r in runs:
        calm = plain.get((r["replicas"], r["lag"])) if r["standby"] else None
        r["chaos_over_plain_calm"] = r["steps_per_s_chaos"] / calm if calm else None


def headline_figures(runs: list[dict], last_deployment: tuple[int, int], first_every: float) -> dict:
    """The figures by name: `chaos_over_calm_lag_N_replicas_R` (no standby) and `..._standby_S` with
    `chaos_over_plain_calm_...`, each suffixed `_every_Es` per fault interval; unsuffixed, those of the first interval
    (`--every`'s first); `chaos_over_calm_lag_N` of the last deployment at the first interval, and its
    `break_even_faults_per_minute_lag_N` from the seconds lost per fault over all its chaos runs at lag N."""
    figures = {}
    for r in runs:
        name = f"lag_{r['lag']}_replicas_{r['replicas']}" + (f"_standby_{r['standby']}" if r["standby"] else "")
        keys = ("chaos_over_calm", "chaos_over_plain_calm") if r["standby"] else ("chaos_over_calm",)
        for key in keys:
            if r.get(key) is None:
                continue
            figures[f"{key}_{name}_every_{r['fault_every_s']:g}s"] = r[key]
            if r["fault_every_s"] == first_every:
                figures[f"{key}_{name}"] = r[key]
    last = [r for r in runs if (r["replicas"], r["standby"]) == last_deployment]
    for r in last:
        if r["fault_every_s"] == first_every:
            figures[f"chaos_over_calm_lag_{r['lag']}"] = r["chaos_over_calm"]
    for lag in sorted({r["lag"] for r in last}):
        same = [r for r in last if r["lag"] == lag]  # one calm run, a chaos run per interval: their faults pooled
        figures[f"break_even_faults_per_minute_lag_{lag}"] = break_even_rate(seconds_lost_per_fault(same))
    return figures


def seconds_list(text: str) -> list[float]:
    """`--every`'s value: positive seconds, comma-separated."""
    values = [float(part) for part in text.split(",")]
    if any(value <= 0 for value in values):
        raise argparse.ArgumentTypeError(f"--every: seconds between faults must be positive, got {text}")
    return values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_config_options(parser)
    parser.add_argument("--steps", type=int, default=40, help="optimiser steps per run (default 40)")
    parser.add_argument("--every", type=seconds_list, default=[30.0, 15.0],
                        help="seconds between faults, comma-separated: a chaos run at each, all compared with one calm "
                             "run per deployment and lag (default 30,15); the first gives chaos_over_calm_lag_N")
    parser.add_argument("--deadline", type=float, default=10.0, help="pools.call_timeout_s (default 10)")
    parser.add_argument("--min-deadline", type=float, default=2.0,
                        help="pools.min_call_timeout_s, the tighter deadline's floor (default 2: calls here take "
                             "well under a second)")
    parser.add_argument("--lags", default="0,2", help="train.max_policy_lag values, comma-separated (default 0,2)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the killer's choices (default 0)")
    parser.add_argument("--replicas", default="1",
                        help="serving replicas of every stage pool and of every retrieval shard, in the calm and the "
                             "chaos runs alike, comma-separated to measure several (default 1; the learner's ranks "
                             "are not replicas); each gives chaos_over_calm_lag_N_replicas_R (without standbys)")
    parser.add_argument("--standby", default="0,1",
                        help="standby replicas of every stage pool and of every retrieval shard "
                             "(pools.standby_replicas), and as many spare processes per learner rank "
                             "(learner.spare_ranks), comma-separated, each measured with every --replicas "
                             "(default 0,1); each above 0 gives chaos_over_calm_lag_N_replicas_R_standby_S and "
                             "chaos_over_plain_calm_lag_N_replicas_R_standby_S (over the calm run without standbys); "
                             "the last pair measured gives chaos_over_calm_lag_N")
    parser.add_argument("--print-only", action="store_true", help="print only; leave RESULTS.md and the JSON alone")
    args = parser.parse_args()
    cfg = with_sections(config_from_args(args), train={"steps": args.steps, "eval_every": 10**9,
                                                        "mode": "distributed"})
    deployments = [(int(n), int(s)) for n in args.replicas.split(",") for s in args.standby.split(",")]
    connect(cfg.ray.address, local_ray_cpus([with_replicas(cfg, n, s) for n, s in deployments]))
    with tempfile.TemporaryDirectory() as tmp:
        # Untimed: the first run on a fresh Ray pays for worker start-up and first imports, which would flatter
        # every chaos run compared with it.
        measure(with_sections(with_replicas(cfg, *deployments[0]), train={"steps": WARMUP_STEPS}),
                str(Path(tmp) / "warm-up"), None)
        runs = []
        for n, standby in deployments:
            for lag in args.lags.split(","):
                run_dir = str(Path(tmp) / f"replicas_{n}_standby_{standby}")
                for record in measure_lag(with_replicas(cfg, n, standby), int(lag), args, run_dir):
                    runs.append({"replicas": n, "standby": standby, **record})
                    print(json.dumps(runs[-1]), flush=True)  # each run as it ends: a later run's failure keeps it
    ray.shutdown()
    with_plain_calm(runs)
    results = {"machine": machine(), "date": datetime.date.today().isoformat(), "steps": args.steps,
               "fault_every_s": args.every, "faults_per_minute": [60 / every for every in args.every],
               "call_timeout_s": args.deadline, "min_call_timeout_s": args.min_deadline,
               "hedge_factor": cfg.pools.hedge_factor, "probe_timeout_s": cfg.pools.probe_timeout_s,
               "target": TARGET, "runs": runs,
               **headline_figures(runs, deployments[-1], args.every[0])}
    report = "\n\n".join([
        f"## Chaos ({results['date']})",
        f"Machine: {machine(with_load=True)} (the load includes the run's own actors). Config "
        f"{config_in_words(args.config, args.overrides)}; {args.steps} steps per run; "
        f"{' or '.join(map(str, sorted({n for n, _ in deployments})))} serving replica(s) of every stage pool and of "
        f"every retrieval shard (`replicas`) and {' or '.join(map(str, sorted({s for _, s in deployments})))} "
        f"standby replica(s) of each (`standby`, `pools.standby_replicas`: loaded, sent no call until one takes a "
        f"lost or hung replica's place) and as many spare processes per learner rank (`learner.spare_ranks`: "
        f"imported, idle until a restore takes them as its ranks), the same in a calm run and the chaos run it is "
        f"compared with (the learner's ranks are not replicas; a call unanswered after {cfg.pools.hedge_factor:g} x "
        f"its pool's median answer is hedged to a second serving replica, never to a standby, `pools.hedge_factor`); "
        f"in the chaos runs every {' or '.join(f'{e:g}' for e in args.every)} s "
        f"({' or '.join(f'{60 / e:.1f}' for e in args.every)} faults per minute; each chaos run is compared with "
        f"the one calm run of its deployment and lag) one random actor process "
        f"among the learner ranks and, of each stage actor class, as many as serve (those that used the most CPU in "
        f"the half interval before: an idle standby is spared, a fault there would cost nothing) is "
        f"SIGKILLed, every third fault (the first included) instead "
        f"such a generator or shard SIGSTOPped for {2 * args.deadline:g} s (call deadline {args.deadline:g} s, "
        f"{args.min_deadline:g} s at least for a replica that has answered since it started, then a probe given "
        f"{cfg.pools.probe_timeout_s:g} s, `pools.probe_timeout_s`; seed {args.seed}); a "
        f"checkpoint every step at lag > 0, every 5 at lag 0.",
        markdown_table(["replicas", "standby", "lag", "faults / min", "steps/s calm", "steps/s chaos",
                        "chaos / calm", "chaos / calm without standby", "stepping chaos / calm",
                        "outside steps s calm / chaos", f"faults / min at {TARGET:g}", "faults",
                        "idle spared", "re-dispatched", "timed out", "probed alive calm / chaos",
                        "hedged calm / chaos", "promoted", "restores",
                        "steps redone", "same rollouts"], [
            [str(r["replicas"]), str(r["standby"]), str(r["lag"]), f"{r['faults_per_minute']:.1f}",
             f"{r['steps_per_s']:.3f}", f"{r['steps_per_s_chaos']:.3f}", f"{r['chaos_over_calm']:.2f}",
             "-" if r["chaos_over_plain_calm"] is None else f"{r['chaos_over_plain_calm']:.2f}",
             f"{r['stepping_seconds_calm'] / r['stepping_seconds_chaos']:.2f}",
             f"{r['seconds_calm'] - r['stepping_seconds_calm']:.0f} / "
             f"{r['seconds_chaos'] - r['stepping_seconds_chaos']:.0f}",
             "-" if r["break_even_faults_per_minute"] is None else f"{r['break_even_faults_per_minute']:.1f}",
             ", ".join(f"{k} {n}" for k, n in sorted(r["faults"].items())) or "0", str(r["idle_processes_spared"]),
             str(sum(r["redispatched_calls"].values())), str(sum(r["timed_out_calls"].values())),
             f"{sum(r['probed_alive_calls_calm'].values())} / {sum(r['probed_alive_calls'].values())}",
             f"{sum(r['hedged_calls_calm'].values())} / {sum(r['hedged_calls'].values())}",
             str(r["promoted_standbys"]),
             ", ".join(f"{k} {n}" for k, n in r["ledger"]["restores"].items() if n) or "0",
             str(r["ledger"]["steps_redone"]), "yes" if r["same_rollouts"] else "no"] for r in runs]),
        "Ratios are of two runs measured one after the other in one invocation; on a shared, loaded machine "
        "the calm run's speed varies too (a chaos run may even come out faster than its calm run), and a chaos "
        "run that faults slow meets more faults, so a ratio moves by far more than 0.1 between invocations. "
        f"`faults / min at {TARGET:g}`: the rate at which chaos / calm would be {TARGET:g} if every fault cost "
        "what this run's did on average (`extra / fault` below; a run of T seconds meets T / interval faults, so "
        "chaos / calm = 1 - extra / interval). `stepping chaos / calm`: the same ratio over the seconds the steps "
        "themselves took (metrics.jsonl's `step_seconds`), and `outside steps`: the rest of each run (actors "
        "started and loaded, the untrained evaluation, the export), which a run of 40 steps pays as a large share "
        "and a long run does not. `chaos / calm without standby` divides a standby run's chaos "
        "steps/s by the calm steps/s of the run with the same serving replicas and no standby: the same serving "
        "capacity, so it is the honest figure of what standbys buy (on these 2 cores the standbys' memory and "
        "start-up share the machine; idle, they use no CPU). A learner rank is no replica: a rank fault costs a "
        "restore from the latest checkpoint with or without standbys; with spares its new ranks need not import "
        "(a learner fault's `restart` is then when a new spare started). `idle spared`: processes left out of the "
        "draws, summed over the faults, as the least busy of their class (standbys, mostly; a replica Ray is "
        "restarting counts as busy while it imports). `probed alive`: probes sent past a call's tight deadline "
        "that the replica answered (busy, not hung: it kept its call; without probes each would have been a "
        "kill and a restart). `promoted`: standbys that took a lost or hung "
        "replica's place. What each fault cost, in seconds from its signal: `detect` until its pool "
        "noticed (the actor-death error for a SIGKILL, the call deadline or a hedge for a SIGSTOP), `promote` "
        "until a standby served in its place, `restart` until Ray started the successor process (from the pool's "
        "notice for a SIGSTOP), `load` its constructor (imports, model or shard), `first answer` until the "
        "replica answered a call again (or, standing by, its readiness check), `outage` the whole span; the calls "
        "lost and the seconds they had run (redone elsewhere or after the restart); `extra / fault` is (chaos "
        "seconds - calm seconds) / faults, what the run as a whole lost per fault.",
        markdown_table(["replicas", "standby", "lag", "faults / min", "fault", "pool", "detect", "promote", "restart",
                        "load", "first answer", "outage", "calls lost", "work lost", "extra / fault"], [
            [str(r["replicas"]), str(r["standby"]), str(r["lag"]), f"{r['faults_per_minute']:.1f}", c["fault"],
             c["pool"] or "-",
             *(_seconds(c[key]) for key in ("detect_s", "promote_s", "restart_s", "load_s", "first_answer_s",
                                            "outage_s")),
             str(c["calls_lost"]), f"{c['work_lost_s']:.2f}", f"{r['extra_s_per_fault']:.2f}"]
            for r in runs for c in r["fault_costs"]]),
    ])
    publish_figures(report, results, RESULTS_JSON, write=not args.print_only)


if __name__ == "__main__":
    main()
