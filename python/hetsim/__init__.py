"""hetsim from Python: one training iteration replayed on a (heterogeneous) GPU cluster.

    import hetsim
    r = hetsim.simulate("llama2-13b", "mixed-h100-a100", "experiments/default/llama2-13b-mixed.yaml")
    r.iteration_time_s, r.tokens_per_s, r.mfu, r.breakdown_s, r.devices[0]

    best = hetsim.plan("llama2-13b", "mixed-h100-a100", 32, sequence_length=4096).best
    hetsim.simulate("llama2-13b", "mixed-h100-a100", best)

Models, clusters and plans are what `hetsim simulate` takes: built-in names or file paths, or
dicts with the same keys as their YAML files. Keyword arguments the function does not name are
plan overrides (`micro_batch_size=2`, as `--plan-set micro_batch_size=2`). A bad input raises
ValueError naming the file (or "<dict plan>"), the field and what was expected. The figures are
the command line's to the bit: `to_dict()` is what `hetsim simulate --json` prints.
"""
import json as _json

from . import _hetsim

__version__ = _hetsim.__version__
__all__ = ["simulate", "plan", "collective", "export", "sweep", "Result", "Plan", "PlanSearch",
           "Sweep"]


def _pandas():
    try:
        import pandas
    except ImportError as e:
        raise ImportError("hetsim's tables are pandas DataFrames: install pandas (Debian: "
                          "python3-pandas), or read to_dict()") from e
    return pandas


class Result:
    """One replayed iteration: the report's figures as attributes, the whole report as to_dict()."""

    def __init__(self, report, replay=None):
        self._report = report
        self._replay = replay  # replays the same iteration with a trace: f(path)

    def trace(self, path):
        """Write this iteration's Chrome trace (open in https://ui.perfetto.dev), as
        `hetsim simulate --trace` does. The replay is run again with a recorder: it is
        deterministic, so the trace is of this very iteration."""
        if self._replay is None:
            raise ValueError("this result has no inputs to replay")
        self._replay(str(path))

    def to_dict(self):
        """The report as `hetsim simulate --json` prints it."""
        return _json.loads(_json.dumps(self._report))

    @property
    def iteration_time_s(self):
        return self._report["iteration_time_s"]

    @property
    def tokens_per_s(self):
        return self._report["throughput_tokens_per_s"]

    @property
    def samples_per_s(self):
        return self._report["throughput_samples_per_s"]

    @property
    def mfu(self):
        return self._report["mfu"]

    @property
    def oom(self):
        return self._report["oom"]

    @property
    def gpus(self):
        return self._report["gpus"]

    @property
    def breakdown_s(self):
        """Mean over devices: compute, exposed communication (and its parts), pipeline bubble."""
        return dict(self._report["breakdown_s"])

    @property
    def cost_per_iteration_usd(self):
        return self._report["cost_per_iteration_usd"]

    @property
    def cost_per_million_tokens_usd(self):
        return self._report["cost_per_million_tokens_usd"]

    @property
    def devices(self):
        """A pandas DataFrame, one row per GPU: id, gpu, replica, stage, busy_s, peak and
        capacity bytes, each part of its memory (weights_bytes, ...), oom."""
        pd = _pandas()
        rows = []
        for d in self._report["devices"]:
            row = {k: v for k, v in d.items() if k != "memory_bytes"}
            row.update({"%s_bytes" % k: v for k, v in d["memory_bytes"].items()})
            rows.append(row)
        return pd.DataFrame(rows)

    @property
    def kinds(self):
        """A pandas DataFrame of the devices that are alike (the same GPU type, stage, busy time
        and memory), one row per kind with how many devices it has and their ids."""
        frame = self.devices
        alike = [c for c in frame.columns if c not in ("id", "replica")]
        kinds = frame.groupby(alike, sort=False, dropna=False).agg(
            devices=("id", "size"), ids=("id", lambda ids: ",".join(ids))).reset_index()
        return kinds

    def __repr__(self):
        return "<hetsim.Result %s on %s: iteration %.6g s, %.6g tokens/s, MFU %.1f%%%s>" % (
            self._report["model"], self._report["cluster"], self.iteration_time_s,
            self.tokens_per_s, 100 * self.mfu, ", OOM" if self.oom else "")


class Plan:
    """A plan the planner proposed: its policy, label, predicted iteration and the plan file's
    text (YAML). simulate() takes it as its plan; save() writes the file."""

    def __init__(self, candidate):
        self.policy = candidate["policy"]
        self.label = candidate["label"]
        self.iteration_time_s = candidate.get("iteration_time_s")
        self.yaml = candidate["plan"]

    def save(self, path):
        with open(path, "w") as f:
            f.write(self.yaml)

    def __repr__(self):
        return "<hetsim.Plan %s: %s, %s s>" % (self.policy, self.label, self.iteration_time_s)


class PlanSearch:
    """What the planner found (as `hetsim plan --json`): candidates fastest first, the rejected
    proposals with their reasons, and the best plan."""

    def __init__(self, found):
        self._found = found

    def to_dict(self):
        return _json.loads(_json.dumps(self._found))

    @property
    def best(self):
        return Plan(self._found["candidates"][0])

    @property
    def candidates(self):
        """A pandas DataFrame, one row per candidate, fastest first: policy, label,
        iteration_time_s, estimate_s, outcome, mfu, tokens_per_s, plan (YAML text)."""
        rows = []
        for c in self._found["candidates"]:
            row = {k: c[k] for k in ("policy", "label", "iteration_time_s", "estimate_s",
                                     "outcome")}
            report = c.get("report") or {}
            row["mfu"] = report.get("mfu")
            row["tokens_per_s"] = report.get("throughput_tokens_per_s")
            row["plan"] = c["plan"]
            rows.append(row)
        return _pandas().DataFrame(rows)

    @property
    def plans(self):
        return [Plan(c) for c in self._found["candidates"]]

    @property
    def rejected(self):
        """A pandas DataFrame, one row per rejected proposal: policy, label, outcome, reason,
        plan."""
        keys = ("policy", "label", "outcome", "reason", "plan")
        return _pandas().DataFrame([{k: c[k] for k in keys} for c in self._found["rejected"]],
                                   columns=list(keys))

    @property
    def proposed(self):
        return self._found["proposed"]


def _source(what, value):
    # (name, text) of a model or a cluster: a built-in name or a file path and no text, or a
    # dict as YAML text (JSON is YAML) named "<dict model>" / "<dict cluster>".
    if isinstance(value, dict):
        return "<dict %s>" % what, _json.dumps(value)
    if isinstance(value, str):
        return value, ""
    raise TypeError("%s is a built-in name, a file path (str) or a dict of its keys" % what)


def _plan_source(plan):
    # (name, text): a file's path and no text, or a dict's or a Plan's text and its name.
    if isinstance(plan, dict):
        return "<dict plan>", _json.dumps(plan)
    if isinstance(plan, Plan):
        return "<%s plan: %s>" % (plan.policy, plan.label), plan.yaml
    if isinstance(plan, str):
        return plan, ""
    raise TypeError("plan is a file path (str), a dict of plan keys or a hetsim.Plan")


def _setting(key, value):
    # A plan or cluster override as `--plan-set` / `--set` take it: PATH=VALUE, VALUE as YAML
    # (JSON is YAML), so that True, None and lists keep their meaning.
    return "%s=%s" % (key, _json.dumps(value))


def simulate(model, cluster, plan, *, nodes=None, framework=None, calibration=None,
             efficiency=None, cluster_set=None, perturb=None, exact=False,
             free_communication=False, tokens=None, trace=None, **plan_overrides):
    """Replay one training iteration and report it (as `hetsim simulate`).

    model, cluster: a built-in name, a file path, or a dict of the file's keys. plan: a plan
    file's path, a dict of its keys, or a hetsim.Plan from plan(). nodes: the node count of a single-group cluster. framework: the plan's framework
    (as the plan key). calibration: a calibration database (HDF5). cluster_set: a dict of
    cluster overrides (path: value, as --set). perturb: a list of what-ifs as --perturb takes
    them (YAML text or dicts). tokens: a whole run's tokens, for its days and cost. trace: write
    the iteration's Chrome trace (Perfetto) to this file, as --trace does. Other keyword
    arguments override plan keys.
    """
    model, model_text = _source("model", model)
    cluster, cluster_text = _source("cluster", cluster)
    plan_path, plan_text = _plan_source(plan)
    if framework is not None:
        plan_overrides["framework"] = framework
    sets = [_setting(k, v) for k, v in plan_overrides.items()]
    cluster_sets = [_setting(k, v) for k, v in (cluster_set or {}).items()]
    what_ifs = [p if isinstance(p, str) else _json.dumps(p) for p in (perturb or [])]
    args = dict(
        model=model, model_text=model_text, cluster=cluster, cluster_text=cluster_text,
        nodes=int(nodes or 0), cluster_sets=cluster_sets,
        plan=plan_path, plan_text=plan_text, plan_sets=sets, perturbations=what_ifs,
        calibration=calibration or "", efficiency=efficiency or "", exact=bool(exact),
        free_communication=bool(free_communication), tokens=float(tokens or 0))
    text = _hetsim.simulate_json(trace=str(trace or ""), **args)
    return Result(_json.loads(text),
                  replay=lambda path: _hetsim.simulate_json(trace=path, **args))


def plan(model, cluster, global_batch_size, *, sequence_length=None, nodes=None,
         policies="all", framework=None, top=5, search=True, calibration=None, efficiency=None,
         cluster_set=None, **plan_overrides):
    """Search for the fastest plan that fits (as `hetsim plan`): every policy proposes plans, the
    memory model drops those that do not fit, the replay ranks the rest. policies: "all" or one
    policy's name. search: also the one-step changes around the best proposals. Other keyword
    arguments are plan keys every proposal gets (as --plan-set). Returns a PlanSearch."""
    model, model_text = _source("model", model)
    cluster, cluster_text = _source("cluster", cluster)
    text = _hetsim.plan_json(
        model=model, model_text=model_text, cluster=cluster, cluster_text=cluster_text,
        nodes=int(nodes or 0),
        cluster_sets=[_setting(k, v) for k, v in (cluster_set or {}).items()],
        global_batch=int(global_batch_size), sequence=int(sequence_length or 0),
        policies=policies, framework=framework or "",
        plan_sets=[_setting(k, v) for k, v in plan_overrides.items()], top=int(top),
        search=bool(search), calibration=calibration or "", efficiency=efficiency or "")
    return PlanSearch(_json.loads(text))


def collective(cluster, op, bytes, ranks=None, *, nodes=None, algorithm="auto",
               protocol="auto", cluster_set=None):
    """One collective as nccl-tests measures it (as `hetsim collective --json`): a dict with
    time_s, algbw_Bps, busbw_Bps, the algorithm, protocol and channels chosen. op: allreduce,
    allgather, reducescatter, alltoall, broadcast or sendrecv. bytes: a number or a quantity
    ("1GiB"). ranks: a count (the first N GPUs), a list of GPU ids, or None (every GPU)."""
    if isinstance(ranks, int):
        ranks = list(range(ranks))
    cluster, cluster_text = _source("cluster", cluster)
    text = _hetsim.collective_json(
        cluster=cluster, cluster_text=cluster_text, nodes=int(nodes or 0),
        cluster_sets=[_setting(k, v) for k, v in (cluster_set or {}).items()], op=op,
        bytes=str(bytes), ranks=list(ranks or []), algorithm=algorithm, protocol=protocol)
    return _json.loads(text)


def export(model, cluster, plan, framework, *, nodes=None, force=False, cluster_set=None,
           **plan_overrides):
    """A plan as the launch of Megatron-LM, DeepSpeed or torchrun (as `hetsim export --json`):
    a dict with the command (argv), config, env and hosts. Where the framework cannot express
    the plan, a ValueError lists why, unless force=True, which exports the closest uniform plan
    and says what it changed under "unsupported" and "approximation"."""
    model, model_text = _source("model", model)
    cluster, cluster_text = _source("cluster", cluster)
    plan_path, plan_text = _plan_source(plan)
    text = _hetsim.export_json(
        model=model, model_text=model_text, cluster=cluster, cluster_text=cluster_text,
        nodes=int(nodes or 0),
        cluster_sets=[_setting(k, v) for k, v in (cluster_set or {}).items()], plan=plan_path,
        plan_text=plan_text, plan_sets=[_setting(k, v) for k, v in plan_overrides.items()],
        framework=framework, force=bool(force))
    return _json.loads(text)


class Sweep:
    """A study's runs (as `hetsim sweep --json`): runs as a DataFrame, one row per run, and the
    whole document as to_dict() (each run's inputs and simulate report)."""

    def __init__(self, found):
        self._found = found

    def to_dict(self):
        return _json.loads(_json.dumps(self._found))

    @property
    def store(self):
        return self._found["store"]

    @property
    def runs(self):
        """A pandas DataFrame, one row per run: the study's CSV columns."""
        rows = [{k: v for k, v in r.items() if k not in ("inputs", "report")}
                for r in self._found["runs"]]
        return _pandas().DataFrame(rows)


def sweep(study, *, store=None, jobs=None):
    """Run a study file (as `hetsim sweep`): models x clusters x plans x frameworks x what-ifs,
    each run stored in the SQLite `store` as it finishes (default: the study's name with .db);
    runs the store already has are not run again, so an interrupted sweep resumes. jobs: threads
    (default: the machine's cores). Returns a Sweep."""
    import os
    if store is None:
        store = os.path.splitext(study)[0] + ".db"
    text = _hetsim.sweep_json(study=str(study), store=str(store),
                              jobs=int(jobs or os.cpu_count() or 1))
    return Sweep(_json.loads(text))
