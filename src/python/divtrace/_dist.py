# _dist.py: the ranks of a torch.distributed job, one trace per rank: the
# header keys that say which rank of which job a trace is (config()), and a
# trace path of its own for each rank (rank_path()). `divtrace diff` and
# `divtrace explain` given the traces of one job's ranks compare them as
# replicas (divtrace-diff(1), RANKS).
#
# What must stay true: dist_job is equal in every rank of one job and
# different between jobs, and computing it never waits for another rank
# (a rank that records while another does not must not hang).
import os

import torch

__all__ = ["config", "rank_path"]


def _dist():
    """torch.distributed when a default process group is initialized, else None."""
    d = getattr(torch, "distributed", None)
    if d is None or not d.is_available() or not d.is_initialized():
        return None
    return d


def _job(d):
    """The job's identity: a random token that the first rank to ask writes
    into the process group's store (compare_set writes it only where the key
    is absent and returns what the store holds, so every rank gets the first
    writer's token and none waits for another). The key carries torchelastic's
    restart count, so a restarted job gets a new one. Without the store (a
    PyTorch without the private accessor), MASTER_ADDR:MASTER_PORT and
    TORCHELASTIC_RUN_ID, which two jobs on one port at different times share."""
    key = "divtrace/dist_job/" + os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    try:
        store = d.distributed_c10d._get_default_store()
        v = store.compare_set(key, "", os.urandom(8).hex())
        return v.decode("ascii") if isinstance(v, bytes) else str(v)
    except (AttributeError, RuntimeError, ValueError, UnicodeDecodeError):
        return "env:%s:%s:%s" % (os.environ.get("MASTER_ADDR", "?"), os.environ.get("MASTER_PORT", "?"),
                                 os.environ.get("TORCHELASTIC_RUN_ID", "-"))


def config():
    """The header keys of this process's rank when a torch.distributed
    process group is initialized: rank, world_size, local_rank (when the
    LOCAL_RANK variable that torchrun sets says it), dist_backend and
    dist_job (equal in every rank of one job, different between jobs); {}
    otherwise. Values are strings."""
    d = _dist()
    if d is None:
        return {}
    cfg = {"rank": str(d.get_rank()), "world_size": str(d.get_world_size())}
    local = os.environ.get("LOCAL_RANK")
    if local is not None and local.strip().isdigit():
        cfg["local_rank"] = local.strip()
    cfg["dist_backend"] = str(d.get_backend())
    cfg["dist_job"] = _job(d)
    return cfg


def _rank_world():
    """(rank, world size): the process group's, else the RANK and WORLD_SIZE
    that torchrun sets before the group exists, else (0, 1)."""
    d = _dist()
    if d is not None:
        return d.get_rank(), d.get_world_size()
    try:
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    except (KeyError, ValueError):
        return 0, 1


def rank_path(path):
    """This rank's own trace path: "{rank}" in path replaced by the rank
    (0 outside a distributed job), else, when the world size is above 1,
    ".rankN" put before the extension ("run.dtr" -> "run.rank1.dtr",
    "out/run" -> "out/run.rank1") unless it is there already, so that a
    path passed twice stays this rank's; otherwise path unchanged. A str."""
    s = os.fspath(path)
    rank, world = _rank_world()
    if "{rank}" in s:
        return s.replace("{rank}", str(rank))
    head, tail = os.path.split(s)
    stem, ext = os.path.splitext(tail)
    mark = ".rank%d" % rank
    if world <= 1 or stem.endswith(mark):   # already this rank's: a path given twice stays
        return s
    return os.path.join(head, stem + mark + ext)
