#!/usr/bin/env python3
# test_ddp.py: one trace per data-parallel rank (divtrace._dist) and
# `divtrace diff` / `divtrace explain` given the ranks of one job. Real
# DistributedDataParallel jobs on the gloo backend, each rank a process of
# this file started with torchrun's variables, a DistributedSampler giving
# each rank its own batches, every rank recording to its rank_path:
#   clean      replicas agree (exit 0, "identical"), every replicated record
#              of every step compared
#   flip       rank 1 xors the lowest bit of one fc1.weight element after
#              step 3: step 4, rank 1, fc1.weight, changed between steps,
#              1 element 1 ulp apart, steps 4 to 7 affected (exit 1)
#   flip0      the same in rank 0: named from the update that agreed, not
#              by being the higher rank (two ranks have no majority)
#   grad       rank 1 halves fc2.weight's reduced gradient in step 5:
#              another gradient (exit 1)
#   lr0        rank 0 steps with lr 0 in step 5: another update, one that
#              left the parameter as it was (a skipped step)
#   state      rank 1 flips a bit of fc2.bias's momentum buffer after step 3,
#              which no record holds: the checkpoint at step 4 names it
#   bf16       every rank rounds fc2.weight to bfloat16 after each step: the
#              replicas agree (diff exits 0), but explain finds the carry
#              fault in each rank (exit 1)
#   nosampler  every rank reads every batch: replicas agree, with a note
# and a job of three ranks in which rank 0 halves its gradient (the odd one
# out by majority), plus traces of different jobs mixed (two compare as two
# runs; three are trouble). Run by tests/cli_torch.sh (make check).
import json
import os
import re
import socket
import subprocess
import sys

import torch
import torch.nn.functional as F

from torch_testlib import DT, MLP, Checks, divtrace, run_dt, show_json, tmpdir

from divtrace import _dist

STEPS = 8
SAMPLES = 96            # 12 batches of 4 per rank with 2 ranks, 8 with 3
JOB2 = ("clean", "flip", "flip0", "grad", "lr0", "state", "bf16", "nosampler")
JOB3 = ("clean", "grad0")
FLIP_AFTER, FLIP_INDEX = 3, 7
FAULT_STEP, FAULT3_STEP = 5, 2
# the records a step holds of MLP's 6 parameters: each at the step's start,
# its gradient and its update
REPLICATED = 3 * 6


# ---- a rank (a process of its own) ----

def rank_main(out, scenarios):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    torch.set_num_threads(1)
    dist.init_process_group("gloo")          # env://: torchrun's variables
    rank, world = dist.get_rank(), dist.get_world_size()
    g = torch.Generator().manual_seed(1234)  # one data set, the same in every rank
    data = TensorDataset(torch.randn(SAMPLES, 8, generator=g), torch.randn(SAMPLES, 4, generator=g))
    for sc in scenarios:
        torch.manual_seed(100 + rank)        # unlike initial weights: DDP broadcasts rank 0's
        model = MLP()
        ddp = DDP(model)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
        sampler = None if sc == "nosampler" else DistributedSampler(data, num_replicas=world, rank=rank, seed=7)
        loader = DataLoader(data, batch_size=4, sampler=sampler, drop_last=True)
        cfg = dict(_dist.config())
        cfg["scenario"] = sc
        with divtrace.record(model, _dist.rank_path(os.path.join(out, sc + ".dtr")), config=cfg,
                             optimizer=opt, checkpoint_every=2, strict=True) as rec:
            for step, (x, y) in zip(range(STEPS), loader):
                opt.zero_grad()
                loss = F.mse_loss(ddp(x), y)
                loss.backward()              # DDP's all-reduce of the gradients
                if (sc, rank, step) in (("grad", 1, FAULT_STEP), ("grad0", 0, FAULT3_STEP)):
                    with torch.no_grad():
                        model.fc2.weight.grad.mul_(0.5)
                skip = (sc, rank, step) == ("lr0", 0, FAULT_STEP)
                for group in opt.param_groups:
                    group["lr"] = 0.0 if skip else 0.05
                opt.step()
                rec.step(loss)
                if (sc, rank, step) in (("flip", 1, FLIP_AFTER), ("flip0", 0, FLIP_AFTER)):
                    with torch.no_grad():
                        model.fc1.weight.view(torch.int32).view(-1)[FLIP_INDEX] ^= 1
                if sc == "bf16":
                    with torch.no_grad():
                        model.fc2.weight.copy_(model.fc2.weight.bfloat16().float())
                if (sc, rank, step) == ("state", 1, FLIP_AFTER):
                    buf = opt.state[model.fc2.bias]["momentum_buffer"]
                    buf.view(torch.int32).view(-1)[FLIP_INDEX] ^= 1 << 20
        dist.barrier()
    dist.destroy_process_group()


# ---- the jobs ----

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_job(out, world, scenarios):
    """Start `world` ranks of one job and wait for every one to exit (a
    deadline, not a sleep: a hung job fails the test); another port when
    the one picked was taken meanwhile. Each rank's exit status and stderr."""
    for attempt in range(3):
        port = str(free_port())
        procs = []
        for r in range(world):
            env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=str(r), LOCAL_RANK=str(r),
                       WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world))
            with open(os.path.join(out, "rank%d.err" % r), "w") as err:
                procs.append(subprocess.Popen([sys.executable, "-W", "ignore::UserWarning",
                                               os.path.abspath(__file__), "--rank", out] + list(scenarios),
                                              env=env, stdout=subprocess.DEVNULL, stderr=err))
        res = []
        for r, p in enumerate(procs):
            try:
                rc = p.wait(timeout=600)
            except subprocess.TimeoutExpired:
                for q in procs:
                    if q.poll() is None:
                        q.kill()
                        q.wait()
                rc = "timed out"
            with open(os.path.join(out, "rank%d.err" % r)) as f:
                res.append((rc, f.read()))
        if all(rc == 0 for rc, _ in res) or not any("ddress already in use" in e for _, e in res):
            break
    return res


C = Checks()
T = J2 = J3 = None      # the test's folder and its jobs' (set by the main program)


def rank_file(job, sc, r):
    return os.path.join(job, "%s.rank%d.dtr" % (sc, r))


def explain(*paths, json_out=False):
    rc, out, err = run_dt("explain", *(("--json",) if json_out else ()) + paths)
    return rc, (json.loads(out) if json_out and out else out), err


def last_line(text):
    lines = text.strip().splitlines()
    return lines[-1] if lines else ""


def diff_ranks_json(*paths):
    rc, out, err = run_dt("diff", "--json", *paths)
    return rc, json.loads(out) if out else None, err


# ---- the checks ----

def test_dist_outside_a_job():
    saved = {k: os.environ.pop(k) for k in ("RANK", "WORLD_SIZE") if k in os.environ}
    try:
        C.ok(_dist.config() == {}, "config() outside a job: {}", repr(_dist.config()))
        C.ok(_dist.rank_path("out/run.dtr") == "out/run.dtr", "rank_path outside a job: unchanged",
             _dist.rank_path("out/run.dtr"))
        C.ok(_dist.rank_path("r{rank}.dtr") == "r0.dtr", "rank_path outside a job: {rank} is 0")
        os.environ.update(RANK="3", WORLD_SIZE="4")  # torchrun's, before init_process_group
        C.ok(_dist.rank_path("out/run.dtr") == os.path.join("out", "run.rank3.dtr"),
             "rank_path from RANK/WORLD_SIZE: run.rank3.dtr", _dist.rank_path("out/run.dtr"))
        C.ok(_dist.rank_path("out/run") == os.path.join("out", "run.rank3"), "rank_path without an extension")
        C.ok(_dist.rank_path(_dist.rank_path("run.dtr")) == "run.rank3.dtr", "rank_path twice: once")
        C.ok(_dist.rank_path("out/{rank}/run.dtr") == "out/3/run.dtr", "rank_path: {rank} replaced")
    finally:
        for k in ("RANK", "WORLD_SIZE"):
            os.environ.pop(k, None)
        os.environ.update(saved)


def test_jobs_ran():
    for job, world, scs in ((J2, 2, JOB2), (J3, 3, JOB3)):
        os.makedirs(job)
        res = run_job(job, world, scs)
        for r, (rc, err) in enumerate(res):
            C.ok(rc == 0, "job of %d ranks: rank %d exits 0" % (world, r), "%s: %s" % (rc, err.strip()[-600:]))
        for sc in scs:
            for r in range(world):
                C.ok(os.path.exists(rank_file(job, sc, r)), "%s: rank %d wrote %s" % (sc, r,
                     os.path.basename(rank_file(job, sc, r))))


def test_headers():
    c0 = show_json(rank_file(J2, "clean", 0))["config"]
    c1 = show_json(rank_file(J2, "clean", 1))["config"]
    c3 = show_json(rank_file(J3, "clean", 2))["config"]
    C.ok((c0.get("rank"), c1.get("rank"), c0.get("world_size"), c3.get("world_size")) == ("0", "1", "2", "3"),
         "headers: rank and world_size", "%r %r" % (c0, c3))
    C.ok(c1.get("local_rank") == "1" and c0.get("dist_backend") == "gloo", "headers: local_rank, dist_backend")
    C.ok(re.fullmatch(r"[0-9a-f]{16}", c0.get("dist_job", "")) is not None and c0["dist_job"] == c1["dist_job"],
         "headers: one dist_job in both ranks of a job", "%r %r" % (c0.get("dist_job"), c1.get("dist_job")))
    C.ok(c3.get("dist_job") not in (None, c0.get("dist_job")), "headers: another job, another dist_job")


def test_clean():
    a, b = rank_file(J2, "clean", 0), rank_file(J2, "clean", 1)
    rc, out, err = run_dt("diff", a, b)
    C.ok(rc == 0, "clean: diff of the ranks exits 0", "exit %d %s %s" % (rc, err, out[-800:]))
    C.ok("replicas agree" in out and "note:" not in out, "clean: diff says the replicas agree", out[-800:])
    rc, js, err = diff_ranks_json(a, b)
    C.ok(rc == 0 and js and js["identical"] and js["records_compared"] == STEPS * REPLICATED
         and js["checkpoints_compared"] == STEPS // 2 + 1 and js["same_inputs"] is False,
         "clean: every replicated record of every step and every checkpoint compared",
         "%d %r" % (rc, js and {k: js[k] for k in ("records_compared", "checkpoints_compared", "same_inputs")}))
    rc, out, err = explain(a, b)
    C.ok(rc == 0 and last_line(out) == "identical", "clean: explain says identical, exit 0",
         "exit %d %r %s" % (rc, last_line(out), err))
    rc, out, err = run_dt("diff", "-q", a, b)
    C.ok(rc == 0 and out == "", "clean: diff -q of the ranks exits 0 and prints nothing")


def test_flip():
    a, b = rank_file(J2, "flip", 0), rank_file(J2, "flip", 1)
    step = FLIP_AFTER + 1
    rc, out, err = run_dt("diff", a, b)
    C.ok(rc == 1, "flip: diff exits 1", "exit %d %s" % (rc, err))
    C.ok("replicas part: step %d, op 0 fc1.weight (param, at the start of the step)" % step in out,
         "flip: diff names step %d and fc1.weight" % step, out[-1200:])
    C.ok("elements differ: 1 of 128, max ULP distance 1 " in out, "flip: one element, one ulp", out[-1200:])
    C.ok("steps affected: %d of %d (the first %d, the last %d)" % (STEPS - step, STEPS, step, STEPS - 1) in out,
         "flip: steps %d to %d affected" % (step, STEPS - 1), out[-1200:])
    rc, js, err = diff_ranks_json(a, b)
    fd = js and js["first_divergence"]
    C.ok(rc == 1 and fd and fd["cause"] == "changed_between_steps" and fd["odd_ranks"] == [1]
         and fd["step"] == step and fd["name"] == "fc1.weight" and fd["basis"] == "evidence"
         and fd["elements_differ"] == 1 and fd["max_ulp"] == 1 and js["steps_affected"] == STEPS - step
         and js["first_checkpoint_differs"] == {"step": step, "tensor": "fc1.weight"},
         "flip: --json says so", json.dumps(js)[:1500])
    want = ("bug in B: rank 1's fc1.weight is not rank 0's at the start of step %d: it changed between steps "
            "%d and %d, after an update that agreed across ranks" % (step, step - 1, step))
    for order, label in (((a, b), "B"), ((b, a), "A")):
        rc, out, err = explain(*order)
        line = last_line(out)
        C.ok(rc == 1 and line.startswith(want.replace("bug in B", "bug in " + label))
             and "silent data corruption" in line and "%d of %d steps affected" % (STEPS - step, STEPS) in line,
             "flip: explain names rank 1 (%s), step %d, fc1.weight, exit 1" % (label, step),
             "exit %d %r %s" % (rc, line, err))
    C.ok("B: carry faults in 1 step; the first: step %d: fc1.weight is not what fc1.weight.update wrote" % step
         in explain(a, b)[1], "flip: rank 1's carry fault reported")
    rc, js, err = explain(a, b, json_out=True)
    C.ok(rc == 1 and js["verdict"] == "bug" and js["first_divergence"]["odd_ranks"] == [1]
         and js["line"] == last_line(explain(a, b)[1]), "flip: explain --json", json.dumps(js)[:800])
    rc, out, err = explain(rank_file(J2, "flip0", 0), rank_file(J2, "flip0", 1))
    C.ok(rc == 1 and last_line(out).startswith("bug in A: rank 0's fc1.weight is not rank 1's at the start of "
                                               "step %d: it changed between steps" % step),
         "flip0: explain names rank 0, whose fc1.weight is not what its update wrote", last_line(out))


def test_grad():
    a, b = rank_file(J2, "grad", 0), rank_file(J2, "grad", 1)
    rc, out, err = explain(a, b)
    line = last_line(out)
    C.ok(rc == 1 and line.startswith("bug in B: rank 1's fc2.weight.grad is not rank 0's in step %d: rank 1 "
                                     "computed another gradient" % FAULT_STEP)
         and "%d of %d steps affected" % (STEPS - FAULT_STEP, STEPS) in line,
         "grad: explain names rank 1's fc2.weight.grad in step %d, exit 1" % FAULT_STEP, "exit %d %r" % (rc, line))
    rc, js, err = diff_ranks_json(a, b)
    C.ok(rc == 1 and js["first_divergence"]["cause"] == "another_gradient"
         and js["first_divergence"]["basis"] == "lowest_rank", "grad: diff --json: another gradient",
         json.dumps(js and js["first_divergence"]))


def test_skipped_update():
    a, b = rank_file(J2, "lr0", 0), rank_file(J2, "lr0", 1)
    for order, label in (((a, b), "A"), ((b, a), "B")):
        rc, out, err = explain(*order)
        line = last_line(out)
        C.ok(rc == 1 and line.startswith("bug in %s: rank 0's fc1.weight.update is not rank 1's in step %d: rank 0 "
                                         "computed another update, one that left fc1.weight as it was"
                                         % (label, FAULT_STEP)),
             "lr0: explain names rank 0's update in step %d as a skipped step (%s)" % (FAULT_STEP, label),
             "exit %d %r" % (rc, line))
    rc, out, err = run_dt("diff", "-q", a, b)
    C.ok(rc == 1 and out == "", "lr0: diff -q exits 1 and prints nothing")


def test_state():
    a, b = rank_file(J2, "state", 0), rank_file(J2, "state", 1)
    step = FLIP_AFTER + 1
    rc, out, err = explain(a, b)
    line = last_line(out)
    C.ok(rc == 1 and line.startswith("bug in B: rank 1's checkpoint tensor fc2.bias.momentum_buffer is not rank 0's "
                                     "at the start of step %d (the records agree up to there; 1 of 16 elements "
                                     "differ)" % step),
         "state: explain names rank 1's momentum buffer at step %d from the checkpoint" % step,
         "exit %d %r" % (rc, line))
    rc, js, err = diff_ranks_json(a, b)
    C.ok(rc == 1 and js["first_divergence"]["cause"] == "checkpoint" and js["first_affected"] == step,
         "state: the records part in step %d too (the update)" % step, json.dumps(js)[:1200])


def test_carry_in_every_rank():
    a, b = rank_file(J2, "bf16", 0), rank_file(J2, "bf16", 1)
    rc, out, err = run_dt("diff", a, b)
    C.ok(rc == 0 and "replicas agree" in out, "bf16: the replicas agree (diff exits 0)", "exit %d %s" % (rc, err))
    rc, out, err = explain(a, b)
    want = ("fc2.weight changed between steps 0 and 1 in rank %d: it is not what fc2.weight.update wrote "
            "(%d steps began with a changed leaf)")
    C.ok(rc == 1 and last_line(out) == "bug in A: %s; bug in B: %s" % (want % (0, STEPS - 1), want % (1, STEPS - 1)),
         "bf16: explain finds the carry fault in each rank, exit 1", "exit %d %r" % (rc, last_line(out)))


def test_same_inputs():
    a, b = rank_file(J2, "nosampler", 0), rank_file(J2, "nosampler", 1)
    rc, out, err = run_dt("diff", a, b)
    C.ok(rc == 0 and "note: every rank read the same inputs" in out, "nosampler: replicas agree, with a note",
         "exit %d %s" % (rc, out[-600:]))


def test_three_ranks():
    clean = [rank_file(J3, "clean", r) for r in range(3)]
    rc, out, err = run_dt("diff", *clean)
    C.ok(rc == 0 and "replicas agree" in out, "3 ranks: clean, diff exits 0", "exit %d %s %s" % (rc, err, out))
    rc, out, err = explain(*clean)
    C.ok(rc == 0 and last_line(out) == "identical", "3 ranks: clean, explain identical")
    bad = [rank_file(J3, "grad0", r) for r in range(3)]
    rc, out, err = explain(*bad)
    line = last_line(out)
    C.ok(rc == 1 and line.startswith("bug in A: rank 0's fc2.weight.grad is not that of ranks 1 and 2 in step %d"
                                     % FAULT3_STEP), "3 ranks: rank 0 is the odd one out by majority",
         "exit %d %r" % (rc, line))
    rc, js, err = diff_ranks_json(bad[2], bad[0], bad[1])
    fd = js and js["first_divergence"]
    C.ok(rc == 1 and fd["odd_ranks"] == [0] and fd["reference_ranks"] == [1, 2] and fd["basis"] == "majority",
         "3 ranks: the majority in any order", json.dumps(fd))


def test_mixed():
    a, other = rank_file(J2, "clean", 0), rank_file(J3, "clean", 1)
    rc, out, err = run_dt("diff", a, other)
    C.ok(rc == 1 and "dist_job" in out and "ranks of job" not in out and "first divergence: step 0" in out,
         "two jobs: compared as two runs", "exit %d %s" % (rc, out[:600]))
    for args, why in (((a, rank_file(J2, "clean", 1), other), "more than two traces compare only as the ranks"),
                      ((a, a, rank_file(J2, "clean", 1)), "are both rank 0 of job")):
        for cmd in ("diff", "explain"):
            rc, out, err = run_dt(cmd, *args)
            C.ok(rc == 2 and out == "" and len(err.strip().splitlines()) == 1 and why in err,
                 "%s of three traces not of one job's distinct ranks: one line, exit 2" % cmd,
                 "exit %d %r %r" % (rc, out[:200], err))
    # a trace of no job among ranks
    solo = os.path.join(T, "solo.dtr")
    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with divtrace.record(model, solo, optimizer=opt) as rec:
        for _ in range(2):
            opt.zero_grad()
            loss = F.mse_loss(model(torch.ones(4, 8)), torch.zeros(4, 4))
            loss.backward()
            opt.step()
            rec.step(loss)
    rc, out, err = run_dt("diff", a, rank_file(J2, "clean", 1), solo)
    C.ok(rc == 2 and "solo.dtr is not a rank of a torch.distributed job" in err, "a trace of no job: exit 2",
         err)
    rc, out, err = run_dt("diff", a, solo)
    C.ok(rc == 1 and "configurations differ" in out and "ranks of job" not in out, "rank and no job: two runs")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--rank":
        rank_main(sys.argv[2], sys.argv[3:])
        # Every trace is closed and the process group destroyed: leave
        # without the interpreter's teardown, where gloo's threads once
        # aborted a rank that had done all its work ("terminate called
        # without an active exception", CI). A failure before this point
        # still exits non-zero.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    if not (torch.distributed.is_available() and torch.distributed.is_gloo_available()):
        print("test_ddp.py: this torch has no torch.distributed with gloo; skipping")
        sys.exit(77)
    T = tmpdir()
    J2, J3 = os.path.join(T, "job2"), os.path.join(T, "job3")
    print("# divtrace %s" % DT)
    rc = C.run([test_dist_outside_a_job, test_jobs_ran, test_headers, test_clean, test_flip, test_grad,
                test_skipped_update, test_state, test_carry_in_every_rank, test_same_inputs, test_three_ranks,
                test_mixed])
    if rc == 0:
        import shutil
        shutil.rmtree(T, ignore_errors=True)
    else:
        print("traces kept in %s" % T)
    sys.exit(rc)
