"""Prefill/decode disaggregation (issue 41): what long prompts arriving at a
cluster do to the inter-token latency (ITL) of the streams already running
there, with two 1-thread workers used colocated (both `--role both`) or
disaggregated (one `--role prefill`, one `--role decode`), and what the
prefill -> decode KV handoff costs.

    /usr/bin/python3 bench/pd_disaggregation.py [--cairn PATH] [--model FILE]
        [--setups idle,colocated,disaggregated] [--streams 4] [--interval 1.0]
        [--duration 20] [--prompt-tokens 1024] [--rounds 1] [--quick]
        [--worker-arg=--max-batch-tokens=256] [--controller-arg=--route=round-robin]

(about a minute per setup and round; --quick: 6-s windows, a smoke run.)

Each setup starts `cairn controller --http-port 0 --grpc-port 0` and two
`cairn worker -m MODEL --controller ADDR --threads 1`, waits for /health and
`cairn_workers 2`, then:

  1. warms both workers up and times two long prompts on the idle cluster
     (the second one's TTFT is the "idle TTFT": one thread prefilling
     --prompt-tokens tokens, plus the handoff when disaggregated);
  2. starts --streams running streams (greedy, short distinct prompts,
     `ignore_eos`, --stream-tokens per request; a stream whose request ends
     starts another; the first requests' lengths are staggered so that they
     do not all restart at once), lets them settle for --warmup s;
  3. for --duration s (the window) sends a long prompt of exactly
     --prompt-tokens tokens (checked with POST /tokenize; every prompt
     distinct from its first words, so no prefix cache helps) every
     --interval s, each with max_tokens --long-tokens, streamed;
  4. records every gap between successive SSE chunks that carry text of the
     running streams inside the window (from the first long prompt sent to
     the end of --duration or the last long reply, whichever is later). The
     first gap of each stream request (first -> second token; in the
     disaggregated setup it holds the handoff) is left out of the ITL and
     shown apart as the "2nd-token gap"; for the long prompts, TTFT and
     the same first gap.

Setups: `idle` is the running streams alone on the colocated pair (no long
prompts): the baseline; `colocated` adds the long prompts; `disaggregated`
is the same load on a prefill and a decode worker (skipped, with the reason,
when `cairn worker --help` has no --role; before the load starts, the
controller's cairn_worker_role series must show one prefill and one decode
worker); `idle-disaggregated` (not in the default list) is the streams
alone on the disaggregated pair, all on the one decode worker;
`colocated-stallfree` and `colocated-chunked` (not in the default list
either) are `colocated` with the engine's stall-free batching forced on,
`cairn worker --max-step-ms MS` (this script's --max-step-ms, default 0:
automatic), or off (`--max-step-ms -1`: prompt chunks of --max-batch-tokens,
512), the alternative to disaggregation on the same two workers and the
plain baseline (both skipped when the binary has no such flag; plain
`colocated` runs the binary's default, which the header prints). --rounds N
runs the setups N times in turn and pools each setup's gaps, printing the
p99 of every round too: on a shared 2-vCPU host one round's p99 moves by
tens of percent.

The claim checked (issue 41): the disaggregated p99 ITL stays within 1.5x of
the idle baseline's, the colocated one does not. In the disaggregated setup
the controller's /metrics is read before and after the window for the
handoff series (cairn_worker_kv_handoff_bytes_sent_total,
cairn_worker_kv_handoff_seconds_sum/_count, cairn_pd_handoffs_total,
cairn_pd_requests_total, cairn_pd_fallbacks_total,
cairn_worker_kv_handoff_expired_total; any missing is "not reported"),
summed over their labels; bytes and seconds are divided by the prompt
tokens of the requests started in between (long prompts and stream
restarts): bytes and milliseconds per 1,000 prompt tokens, next to what the
model's K/V rows weigh as f16 (n_layer x 2 x kv_heads x head_dim x 2 bytes
a token). That histogram runs from a transfer's first row to the decode
worker's reply, so it overlaps the prefill that streams the rows; the cost
a client sees is printed apart: on the idle cluster, the gap from a long
prompt's first token (prefill worker) to its second (decode worker) less
the same gap on the colocated pair, per 1,000 prompt tokens, and the same
for the running streams' short prompts. Fallbacks (prompts recomputed on
the decode worker) are flagged: they make the disaggregated numbers mean
something else. Each setup also prints the CPU share every child and this
client used in the window, and how busy the host was: on 2 vCPUs, two busy
workers, the controller and the client already fill the machine.

Without --model the script makes (once, under --dir) a random-weight llama
with the demo vocabulary (1,284 tokens), 640 wide, 8 layers, 10 heads, FFN
1728, Q8_0 (42 MiB). One thread of the 2-vCPU dev host prefills 1,024 of
its tokens in 0.6-1.0 s (idle TTFT through the cluster 0.63 s, `cairn
bench-model -p 1024 -t 1` 0.97 s, both with the host's load average at 7
from other builds; about 0.55 s quiet, scaled from the 768-wide shape's
0.73 s). 768 wide left a prefill worker too little headroom for a prompt
a second once the host was busy: prompts queued, and TTFT grew all run. The cairn
binary is copied to a temporary file first, so a rebuild under the run does
not change it. Every child is stopped at the end (SIGTERM, then SIGKILL),
on errors and Ctrl-C too. The summary is a Markdown table for
docs/performance.md. A benchmark, not a test: it exits non-zero only when
something failed to run.

On a 2-vCPU host the two workers, the controller and this client share two
cores: the client only reads lines and timestamps them (one thread per
stream), and parses JSON only for chunks that might carry text.
"""

import argparse
import atexit
import http.client
import json
import math
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from child_process import Proc, loadavg

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CAIRN_BIN = os.environ.get("CAIRN_BIN", os.path.join(REPO, "build", "cairn"))

# dim, layers, heads, kv heads, ffn, type
DEFAULT_SHAPE = (640, 8, 10, 10, 1728, "q8_0")

WORDS = ("the a of and to in is was for on that with as by at from it this which be are were an or "
         "his her their its one two first new time year people world city river school music church "
         "house water small large early later during after before between under over through many "
         "most some other several state family court party film book game team season station line "
         "road island village county market company system service power light field history war "
         "army king queen garden summer winter north south east west old young long short "
         "built named known found began became remained served moved opened played wrote won lost "
         "held called made used given taken based located published released recorded elected").split()

HANDOFF_SERIES = ("cairn_worker_kv_handoff_bytes_sent_total", "cairn_worker_kv_handoff_seconds_sum",
                  "cairn_worker_kv_handoff_seconds_count", "cairn_pd_handoffs_total", "cairn_pd_requests_total",
                  "cairn_pd_fallbacks_total", "cairn_worker_kv_handoff_expired_total")

ALL_SETUPS = ("idle", "colocated", "disaggregated", "idle-disaggregated", "colocated-stallfree", "colocated-chunked")


# ---------------------------------------------------------------- helpers

def pct(values, p):
    """Nearest-rank percentile of `values` (p in 0..100); None when empty."""
    if not values:
        return None
    s = sorted(values)
    k = max(0, min(len(s) - 1, math.ceil(p / 100.0 * len(s)) - 1))
    return s[k]


def ms(v, digits=1):
    return "-" if v is None else ("%.*f" % (digits, v * 1e3))


def proc_cpu(pid):
    """CPU seconds (user + system) of a process so far, or None."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def host_cpu():
    """(busy, total) jiffies of all CPUs from /proc/stat, or None."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        idle = v[3] + (v[4] if len(v) > 4 else 0)
        return sum(v) - idle, sum(v)
    except (OSError, ValueError):
        return None


def http_json(addr, method, path, body=None, timeout=60):
    conn = http.client.HTTPConnection(addr, timeout=timeout)
    try:
        data = None if body is None else json.dumps(body)
        conn.request(method, path, data, {"Content-Type": "application/json"} if data else {})
        r = conn.getresponse()
        raw = r.read()
        if r.status != 200:
            raise RuntimeError("%s %s: HTTP %d: %s" % (method, path, r.status, raw[:300]))
        return raw
    finally:
        conn.close()


def scrape(addr):
    """The controller's /metrics as {series name: sum over its label sets}."""
    out = {}
    for line in http_json(addr, "GET", "/metrics").decode("utf-8", "replace").splitlines():
        if not line or line[0] == "#":
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)", line)
        if not m:
            continue
        try:
            v = float(m.group(3))
        except ValueError:
            continue
        out[m.group(1)] = out.get(m.group(1), 0.0) + v
    return out


def count_tokens(addr, text):
    return int(json.loads(http_json(addr, "POST", "/tokenize", {"content": text}))["count"])


def long_prompt(addr, k, target, words_per_token):
    """A prompt of exactly `target` tokens (BOS included) when the tokenizer
    lets us: distinct words from a seeded generator, starting with the
    request number, trimmed or padded with " a" until /tokenize agrees."""
    rng = random.Random(1000003 * k + 17)
    words = ["Request", "%d:" % k] + [rng.choice(WORDS) for _ in range(int(target * words_per_token * 1.3) + 64)]
    lo, hi = 2, len(words)  # largest prefix of words with count <= target
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count_tokens(addr, " ".join(words[:mid])) <= target:
            lo = mid
        else:
            hi = mid - 1
    text = " ".join(words[:lo])
    n = count_tokens(addr, text)
    for _ in range(64):
        if n >= target:
            break
        cand = text + " a"
        c = count_tokens(addr, cand)
        if c > target:
            break
        text, n = cand, c
    return text, n


# ---------------------------------------------------------------- processes

class Cluster:
    """A controller and two workers; `roles` is a pair of --role values or
    None (no flag)."""

    def __init__(self, cairn, model, roles, threads, extra_controller, extra_worker, all_procs):
        self.procs = []
        self.all_procs = all_procs
        try:
            self._up(cairn, model, roles, threads, extra_controller, extra_worker)
        except BaseException:
            self.stop()
            raise

    def _up(self, cairn, model, roles, threads, extra_controller, extra_worker):
        ctl = self._start([cairn, "controller", "--host", "127.0.0.1", "--http-port", "0", "--grpc-port", "0",
                           "--heartbeat-ms", "500", "--drain-seconds", "1", *extra_controller], "controller")
        self.http = ctl.wait_for(r"listening on http://(\S+)", 60).group(1)
        self.grpc = ctl.wait_for(r"grpc listening on (\S+)", 60).group(1)
        for i, role in enumerate(roles or (None, None)):
            cmd = [cairn, "worker", "-m", model, "--controller", self.grpc, "--name", "pd-%d-%s" % (i, role or "both"),
                   "--threads", str(threads), "--heartbeat-ms", "500", "--drain-seconds", "1"]
            if role:
                cmd += ["--role", role]
            self._start(cmd + list(extra_worker), "worker %d (%s)" % (i, role or "no --role"))
        end = time.time() + 300
        last = ""
        while time.time() < end:
            for p in self.procs:
                if p.proc.poll() is not None:
                    raise RuntimeError("%s exited (%s):\n%s" % (p.name, p.proc.returncode, "".join(p.lines[-30:])))
            try:
                if scrape(self.http).get("cairn_workers") == 2:
                    conn = http.client.HTTPConnection(self.http, timeout=5)
                    conn.request("GET", "/health")
                    if conn.getresponse().status == 200:
                        self.roles_seen = self._roles()
                        want = sorted(r for r in (roles or ()) if r != "both")
                        if not want or self.roles_seen is None or sorted(self.roles_seen) == want:
                            return
                        last = "roles on the controller: %s" % self.roles_seen
                    else:
                        last = "health not 200"
                else:
                    last = "cairn_workers != 2"
            except (OSError, RuntimeError) as e:
                last = repr(e)
            time.sleep(0.3)
        raise RuntimeError("cluster never ready (%s):\n%s" % (last, "".join(l for p in self.procs for l in p.lines[-10:])))

    def _roles(self):
        """The roles in the controller's cairn_worker_role series (not "both"),
        or None when it has no such series."""
        text = http_json(self.http, "GET", "/metrics").decode("utf-8", "replace")
        found = re.findall(r'^cairn_worker_role\{[^}]*role="(\w+)"[^}]*\}\s+1', text, re.M)
        if not found and "cairn_worker_role" not in text:
            return None
        return [r for r in found if r != "both"]

    def _start(self, cmd, name):
        p = Proc(cmd, name=name)
        self.procs.append(p)
        self.all_procs.append(p)
        return p

    def stop(self):
        stop_all(self.procs)


def stop_all(procs):
    """SIGTERM to every child still running, then SIGKILL after 15 s."""
    live = [p for p in procs if p.proc.poll() is None]
    for p in live:
        try:
            p.proc.terminate()
        except OSError:
            pass
    end = time.time() + 15
    for p in live:
        try:
            p.proc.wait(timeout=max(0.1, end - time.time()))
        except subprocess.TimeoutExpired:
            p.proc.kill()
            p.proc.wait()


# ---------------------------------------------------------------- requests

def stream_completion(addr, body, on_text, stop=None, timeout=600):
    """POSTs a streamed /v1/completions; calls on_text(t) with the
    perf_counter time of every SSE chunk whose text is not empty. Returns
    (usage or None, error or None). Stops reading when `stop` is set."""
    body = dict(body, stream=True, stream_options={"include_usage": True})
    conn = http.client.HTTPConnection(addr, timeout=timeout)
    usage, err = None, None
    try:
        conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status != 200:
            return None, "HTTP %d: %s" % (r.status, r.read()[:300])
        while True:
            line = r.readline()
            if not line:
                break
            now = time.perf_counter()
            if stop is not None and stop.is_set():
                break
            if not line.startswith(b"data: "):
                continue
            data = line[6:].strip()
            if data == b"[DONE]":
                break
            # Cheap test first: only chunks whose text is not "" need parsing.
            if b'"text":""' in data and b'"usage"' not in data and b'"error"' not in data:
                continue
            j = json.loads(data)
            if "error" in j:
                err = json.dumps(j["error"])[:300]
                break
            if j.get("usage"):
                usage = j["usage"]
            for c in j.get("choices") or ():
                if c.get("text"):
                    on_text(now)
    except (OSError, http.client.HTTPException, ValueError) as e:
        err = repr(e)
    finally:
        conn.close()
    return usage, err


class RunningStream(threading.Thread):
    """One running stream: requests of --stream-tokens tokens back to back.
    Keeps (t_prev, t_next) of every gap after a request's second token, the
    first gap of each request apart, and each request's start time and
    prompt tokens (for the handoff accounting)."""

    def __init__(self, addr, idx, prompt, prompt_tokens, first_tokens, tokens, stop):
        super().__init__(daemon=True)
        self.addr, self.idx, self.prompt, self.prompt_tokens = addr, idx, prompt, prompt_tokens
        self.first_tokens, self.tokens, self.stop = first_tokens, tokens, stop
        self.gaps, self.first_gaps, self.starts, self.times = [], [], [], []
        self.errors, self.chunks_done, self.tokens_done = [], 0, 0

    def run(self):
        n = self.first_tokens
        while not self.stop.is_set():
            times = []
            self.starts.append(time.perf_counter())
            body = {"prompt": self.prompt, "max_tokens": n, "temperature": 0, "ignore_eos": True}
            usage, err = stream_completion(self.addr, body, times.append, self.stop)
            self.times.extend(times)
            for i in range(1, len(times)):
                (self.first_gaps if i == 1 else self.gaps).append((times[i - 1], times[i]))
            if err and not self.stop.is_set():
                self.errors.append(err)
                time.sleep(0.2)
            if usage and not err:
                self.chunks_done += len(times)
                self.tokens_done += int(usage.get("completion_tokens", 0))
            n = self.tokens


def long_request(addr, text, max_tokens, out):
    t0 = time.perf_counter()
    times = []
    usage, err = stream_completion(addr, {"prompt": text, "max_tokens": max_tokens, "temperature": 0,
                                          "ignore_eos": True}, times.append)
    out.update(start=t0, end=time.perf_counter(), times=times, usage=usage, error=err)


# ---------------------------------------------------------------- one setup

def setup_step_ms(name, args):
    """The --max-step-ms a setup passes its workers, or None (the default)."""
    return {"colocated-stallfree": args.max_step_ms, "colocated-chunked": -1.0}.get(name)


def run_setup(name, args, cairn, model, prompts, all_procs):
    """Returns a dict of results (or {'skipped': reason})."""
    disagg = name.endswith("disaggregated")
    load = not name.startswith("idle")
    roles = ("prefill", "decode") if disagg else (("both", "both") if args.role_flag else None)
    step = setup_step_ms(name, args)
    print("\n== %s: workers %s%s, %d running streams%s" % (
        name, "/".join(roles) if roles else "both/both (no --role flag)",
        " with --max-step-ms %g" % step if step is not None else "", args.streams,
        ", a %d-token prompt every %.2g s for %.0f s" % (args.prompt_tokens, args.interval, args.duration)
        if load else ", no long prompts"), flush=True)
    extra = list(args.worker_arg)
    if step is not None:
        extra += ["--max-step-ms", "%g" % step]
    cl = Cluster(cairn, model, roles, args.threads, args.controller_arg, extra, all_procs)
    res = {"name": name, "roles": roles, "load_before": loadavg().split()[0]}
    stop = threading.Event()
    try:
        addr = cl.http
        # Prompts: built once (on the first cluster up), the same for every setup.
        if not prompts:
            t = time.perf_counter()
            probe = " ".join(random.Random(5).choice(WORDS) for _ in range(400))
            wpt = 400.0 / max(1, count_tokens(addr, probe) - 1)
            n_long = int(round(args.duration / args.interval)) + 2
            built = [long_prompt(addr, k, args.prompt_tokens, wpt) for k in range(n_long)]
            prompts["long"] = built
            prompts["stream"] = []
            for i in range(args.streams):
                s = "Stream %d: once upon a time in the %s %s, there was a" % (
                    i, WORDS[(7 * i) % len(WORDS)], WORDS[(13 * i + 5) % len(WORDS)])
                prompts["stream"].append((s, count_tokens(addr, s)))
            args.stream_prompt_tokens = round(sum(n for _, n in prompts["stream"]) / len(prompts["stream"]))
            counts = [n for _, n in built]
            print("long prompts: %d built in %.1f s, %d..%d tokens (BOS included)"
                  % (len(built), time.perf_counter() - t, min(counts), max(counts)), flush=True)

        # Warm-up: a short request per worker, then two long prompts on the idle cluster.
        ws = [threading.Thread(target=stream_completion, args=(addr, {"prompt": "Hello %d" % i, "max_tokens": 4,
                                                                       "temperature": 0}, lambda t: None))
              for i in range(2)]
        for w in ws:
            w.start()
        for w in ws:
            w.join()
        idle_ttft, idle_gap2 = [], []
        for k in range(2):
            out = {}
            long_request(addr, prompts["long"][-1 - k][0], 4, out)
            if out["error"] or len(out["times"]) < 2:
                raise RuntimeError("warm-up long prompt failed: %s" % (out["error"] or "%d tokens" % len(out["times"])))
            idle_ttft.append(out["times"][0] - out["start"])
            idle_gap2.append(out["times"][1] - out["times"][0])
        res["idle_ttft"], res["idle_gap2"] = idle_ttft[-1], idle_gap2[-1]
        print("idle TTFT of a %d-token prompt: %s ms, then %s ms to its 2nd token (first prompt: %s, %s ms)"
              % (prompts["long"][-2][1], ms(idle_ttft[-1]), ms(idle_gap2[-1]), ms(idle_ttft[0]), ms(idle_gap2[0])),
              flush=True)

        # Running streams, staggered.
        streams = []
        for i, (s, n) in enumerate(prompts["stream"]):
            first = max(16, args.stream_tokens * (i + 1) // args.streams)
            streams.append(RunningStream(addr, i, s, n, first, args.stream_tokens, stop))
        for st in streams:
            st.start()
        time.sleep(args.warmup)

        before = scrape(addr) if disagg else {}
        pcpu0 = [(p.name, proc_cpu(p.proc.pid)) for p in cl.procs]
        host0 = host_cpu()
        cpu0 = os.times()
        t0 = time.perf_counter()
        longs = []
        if load:
            n_long = int(round(args.duration / args.interval))
            for k in range(n_long):
                at = t0 + k * args.interval
                delay = at - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                out = {"prompt_tokens": prompts["long"][k][1]}
                th = threading.Thread(target=long_request, args=(addr, prompts["long"][k][0], args.long_tokens, out),
                                      daemon=True)
                th.start()
                longs.append((th, out))
        rest = t0 + args.duration - time.perf_counter()
        if rest > 0:
            time.sleep(rest)
        for th, _ in longs:
            th.join(timeout=max(1.0, args.long_timeout - (time.perf_counter() - t0)))
        t1 = max([t0 + args.duration] + [o.get("end", 0) for _, o in longs])
        if disagg:
            time.sleep(1.2)  # the workers' handoff counters reach the controller with their heartbeats (500 ms)
        after = scrape(addr) if disagg else {}
        t_scrape = time.perf_counter()
        cpu1 = os.times()
        span = max(1e-9, t_scrape - t0)
        res["client_cpu"] = (cpu1.user + cpu1.system - cpu0.user - cpu0.system) / span
        res["proc_cpu"] = []
        for (pname, c0), p in zip(pcpu0, cl.procs):
            c1 = proc_cpu(p.proc.pid)
            if c0 is not None and c1 is not None:
                res["proc_cpu"].append((pname, (c1 - c0) / span))
        host1 = host_cpu()
        res["host_busy"] = ((host1[0] - host0[0]) / max(1, host1[1] - host0[1])) if host0 and host1 else None
        stop.set()
        for st in streams:
            st.join(timeout=30)

        # ITL of the running streams inside the window.
        gaps = [b - a for st in streams for a, b in st.gaps if a >= t0 and b <= t1]
        first_gaps = [b - a for st in streams for a, b in st.first_gaps if a >= t0 and b <= t1]
        chunks = sum(1 for st in streams for t in st.times if t0 <= t <= t1)
        chunks_done = sum(st.chunks_done for st in streams)
        tokens_done = sum(st.tokens_done for st in streams)
        errors = [e for st in streams for e in st.errors]
        restarts = sum(1 for st in streams for s in st.starts if t0 <= s <= t1)
        window = t1 - t0
        res.update(window=window, itl=gaps, first_gaps=first_gaps, stream_tok_s=chunks / window if window else 0,
                   stream_errors=errors, restarts=restarts,
                   tokens_per_chunk=(tokens_done / chunks_done) if chunks_done else None)
        long_done = [o for _, o in longs if o.get("times") and not o.get("error")]
        long_err = [o.get("error") or "no reply" for _, o in longs if not (o.get("times") and not o.get("error"))]
        ttft = [o["times"][0] - o["start"] for o in long_done]
        long_first_gap = [o["times"][1] - o["times"][0] for o in long_done if len(o["times"]) > 1]
        long_tokens = sum(len(o["times"]) for o in long_done)
        res["long_usage"] = sorted({int(o["usage"].get("prompt_tokens", -1)) for o in long_done if o.get("usage")})
        res.update(long_sent=len(longs), long_done=len(long_done), long_errors=long_err, ttft=ttft,
                   long_first_gap=long_first_gap, total_tok_s=(chunks + long_tokens) / window if window else 0)

        if disagg:
            # Prompt tokens of every request started between the two scrapes.
            started_tokens = sum(o["prompt_tokens"] for _, o in longs)
            started = len(longs)
            for st in streams:
                k = sum(1 for s in st.starts if t0 <= s <= t_scrape)
                started += k
                started_tokens += k * st.prompt_tokens
            h = {}
            for key in HANDOFF_SERIES:
                h[key] = (after[key] - before.get(key, 0.0)) if key in after else None
            res["handoff"] = dict(series=h, requests=started, prompt_tokens=started_tokens)
        print_setup(res, args)
    finally:
        stop.set()
        cl.stop()
    return res


def print_setup(r, args):
    itl = r["itl"]
    print("window %.1f s: %d gaps; ITL p50 %s  p90 %s  p99 %s  p99.9 %s  max %s ms; 2nd-token gap p50 %s  max %s ms "
          "(%d stream requests started in the window)"
          % (r["window"], len(itl), ms(pct(itl, 50), 2), ms(pct(itl, 90), 2), ms(pct(itl, 99), 2),
             ms(pct(itl, 99.9), 1),
             ms(max(itl) if itl else None, 1), ms(pct(r["first_gaps"], 50), 1),
             ms(max(r["first_gaps"]) if r["first_gaps"] else None, 1), r["restarts"]))
    tpc = r["tokens_per_chunk"]
    print("running streams: %.0f tok/s (chunks), all output %.0f tok/s; tokens per text chunk %s%s"
          % (r["stream_tok_s"], r["total_tok_s"], "%.3f" % tpc if tpc else "?",
             "; %d stream errors, first: %s" % (len(r["stream_errors"]), r["stream_errors"][0])
             if r["stream_errors"] else ""))
    if r["long_sent"]:
        u = r["long_usage"]
        print("long prompts: %d sent, %d answered (usage.prompt_tokens %s); TTFT p50 %s  p99 %s  max %s ms; "
              "their 2nd-token gap p50 %s ms%s"
              % (r["long_sent"], r["long_done"], "..".join(str(x) for x in (u[0], u[-1])) if u else "?",
                 ms(pct(r["ttft"], 50)), ms(pct(r["ttft"], 99)),
                 ms(max(r["ttft"]) if r["ttft"] else None), ms(pct(r["long_first_gap"], 50)),
                 "; errors: %s" % r["long_errors"][0] if r["long_errors"] else ""))
    if "handoff" in r:
        print("handoff: " + handoff_text(r["handoff"]))
    r["load_after"] = loadavg().split()[0]
    print("load average: %s before, %s after (1 min); CPU in the window, %% of one CPU: %s, this client %.0f%%; "
          "host busy %s"
          % (r["load_before"], r["load_after"], ", ".join("%s %.0f%%" % (n, 100 * c) for n, c in r["proc_cpu"]),
             100 * r["client_cpu"], "%.0f%% of all CPUs" % (100 * r["host_busy"]) if r["host_busy"] is not None
             else "?"), flush=True)


def handoff_text(h):
    s = h["series"]
    toks = h["prompt_tokens"]
    head = "%d requests, %d prompt tokens started between the scrapes" % (h["requests"], toks)
    if all(v is None for v in s.values()):
        return head + "; no handoff series on the controller's /metrics (not reported)"
    parts = ["%s %s" % (k, "not reported" if v is None else "%.6g" % v) for k, v in s.items()]
    per = []
    b = s["cairn_worker_kv_handoff_bytes_sent_total"]
    if b is not None and toks:
        per.append("%.3f MB per 1,000 prompt tokens" % (b / toks / 1000.0))
    sec, cnt = s["cairn_worker_kv_handoff_seconds_sum"], s["cairn_worker_kv_handoff_seconds_count"]
    if sec is not None and toks:
        per.append("%.2f ms per 1,000 prompt tokens (cairn_worker_kv_handoff_seconds: first row to the decode "
                   "worker's reply, so it overlaps the prefill that streams the rows)" % (sec / toks * 1e6))
        if cnt:
            per.append("%.2f ms per handoff (mean of %d)" % (sec / cnt * 1e3, cnt))
    if s["cairn_pd_fallbacks_total"]:
        per.append("WARNING: %.0f fallbacks (prompts recomputed on the decode worker)" % s["cairn_pd_fallbacks_total"])
    if s["cairn_pd_handoffs_total"] is not None and s["cairn_pd_handoffs_total"] != h["requests"]:
        per.append("note: %d requests started, %.0f handoffs counted" % (h["requests"], s["cairn_pd_handoffs_total"]))
    return "%s; %s: %s" % (head, ", ".join(parts), "; ".join(per) if per else "per-token cost not reported")


# ---------------------------------------------------------------- main

def make_model(cairn, path, shape):
    dim, layers, heads, kv_heads, ffn, typ = shape
    print("making %s ..." % path, flush=True)
    subprocess.run([cairn, "make-model", path + ".tmp", "--arch", "llama", "--dim", str(dim), "--layers", str(layers),
                    "--heads", str(heads), "--kv-heads", str(kv_heads), "--ffn", str(ffn), "--ctx", "4096",
                    "--type", typ, "--seed", "1"], check=True, capture_output=True)
    os.replace(path + ".tmp", path)


def model_shape(cairn, path):
    """(description, K/V bytes per token as f16 rows, or None)."""
    out = subprocess.run([cairn, "gguf", path], capture_output=True, text=True).stdout
    keys = {}
    for line in out.splitlines():
        m = re.match(r"\s+(\S+)\s+(?:uint32|float32|string|array\S*)\s+(.*)$", line)
        if m:
            keys[m.group(1)] = m.group(2)
    arch = keys.get("general.architecture", "?").strip('"')
    g = lambda k: keys.get("%s.%s" % (arch, k), "?")
    vocab = re.search(r"\((\d+) elements\)", keys.get("tokenizer.ggml.tokens", ""))
    ftype = {"0": "f32", "1": "f16", "2": "q4_0", "7": "q8_0", "15": "q4_k_m"}.get(
        keys.get("general.file_type"), "file type " + keys.get("general.file_type", "?"))
    desc = "%s, n_embd %s, %s layers, %s heads (%s kv), ffn %s, %s, vocab %s, %.1f MiB" % (
        arch, g("embedding_length"), g("block_count"), g("attention.head_count"), g("attention.head_count_kv"),
        g("feed_forward_length"), ftype, vocab.group(1) if vocab else "?", os.path.getsize(path) / 2 ** 20)
    try:
        head_dim = int(g("attention.key_length")) if g("attention.key_length") != "?" else \
            int(g("embedding_length")) // int(g("attention.head_count"))
        kv_bytes = int(g("block_count")) * 2 * int(g("attention.head_count_kv")) * head_dim * 2
    except ValueError:
        kv_bytes = None
    return desc, kv_bytes


def merge(results):
    """One result per setup: its rounds' gaps and TTFTs pooled, the handoff
    counts summed, each round's p99 ITL kept (p99_rounds)."""
    names = []
    for r in results:
        if r["name"] not in names:
            names.append(r["name"])
    out = []
    for name in names:
        ok = [r for r in results if r["name"] == name and "itl" in r]
        bad = [r for r in results if r["name"] == name and "itl" not in r]
        if not ok:
            out.append(bad[0])
            continue
        m = dict(ok[0])
        m["failed_rounds"] = len(bad)
        m["itl"] = [g for r in ok for g in r["itl"]]
        m["ttft"] = [t for r in ok for t in r["ttft"]]
        m["first_gaps"] = [g for r in ok for g in r["first_gaps"]]
        m["p99_rounds"] = [pct(r["itl"], 99) for r in ok]
        m["idle_ttft"] = pct([r["idle_ttft"] for r in ok], 50)
        m["idle_gap2"] = pct([r["idle_gap2"] for r in ok], 50)
        m["stream_tok_s"] = sum(r["stream_tok_s"] for r in ok) / len(ok)
        loads = sorted(float(x) for r in ok for x in (r["load_before"], r["load_after"]))
        m["load_before"], m["load_after"] = "%.1f" % loads[0], "%.1f" % loads[-1]
        hs = [r["handoff"] for r in ok if "handoff" in r]
        if hs:
            series = {}
            for k in hs[0]["series"]:
                vals = [h["series"][k] for h in hs if h["series"][k] is not None]
                series[k] = sum(vals) if vals else None
            m["handoff"] = dict(series=series, requests=sum(h["requests"] for h in hs),
                                prompt_tokens=sum(h["prompt_tokens"] for h in hs))
        out.append(m)
    return out


def prompts_short_tokens(args):
    """The running streams' mean prompt tokens (set once the prompts are built)."""
    return getattr(args, "stream_prompt_tokens", 0)


def summary(results, args, model_desc):
    results = merge(results)
    idle = next((r for r in results if r.get("name") == "idle" and "itl" in r), None)
    idle_p99 = pct(idle["itl"], 99) if idle else None
    lines = ["", "Summary (%s; %d running streams; %d-token prompts every %.2g s for %.0f s%s; workers --threads %d%s; "
             "host: %d CPUs):" % (model_desc, args.streams, args.prompt_tokens, args.interval, args.duration,
                                  ", %d rounds pooled" % args.rounds if args.rounds > 1 else "", args.threads,
                                  ", default --max-step-ms %s" % args.max_step_default
                                  if getattr(args, "max_step_default", None) else "",
                                  os.cpu_count() or 0), "",
             "| setup | workers | ITL p50 ms | p90 | p99 | p99.9 | max | p99 / idle p99 | TTFT p50 ms | TTFT p99 | "
             "idle TTFT | idle 2nd tok | stream tok/s | load |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        if "skipped" in r:
            lines.append("| %s | %s | skipped: %s |||||||||||||" % (r["name"], r.get("workers", ""), r["skipped"]))
            continue
        itl = r["itl"]
        p99 = pct(itl, 99)
        ratio = "%.2fx" % (p99 / idle_p99) if p99 and idle_p99 else "-"
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %.0f | %s-%s |" % (
            r["name"], (" + ".join(r["roles"]) if r["roles"] else "both + both")
            + (" (--max-step-ms %g)" % setup_step_ms(r["name"], args) if setup_step_ms(r["name"], args) is not None
               else ""),
            ms(pct(itl, 50), 2), ms(pct(itl, 90), 2), ms(p99, 2), ms(pct(itl, 99.9), 1),
            ms(max(itl) if itl else None, 1), ratio,
            ms(pct(r["ttft"], 50), 0) if r["ttft"] else "-", ms(pct(r["ttft"], 99), 0) if r["ttft"] else "-",
            ms(r["idle_ttft"], 0), ms(r["idle_gap2"], 1), r["stream_tok_s"], r["load_before"], r["load_after"]))
    lines.append("")
    lines.append("ITL: gaps between text chunks of the running streams in the window (a request's first gap "
                 "left out); TTFT: the long prompts'; idle TTFT / idle 2nd tok: one long prompt on the idle "
                 "cluster, its first token and the gap to its second (disaggregated: the handoff as the client "
                 "sees it); stream tok/s: the running streams' tokens in the window; load: 1-min load average.")
    if args.rounds > 1:
        for r in results:
            if "p99_rounds" in r:
                lines.append("%s: p99 ITL per round %s ms%s" % (
                    r["name"], ", ".join(ms(v, 2) for v in r["p99_rounds"]),
                    " (%d rounds failed)" % r["failed_rounds"] if r.get("failed_rounds") else ""))
    for r in results:
        if "handoff" in r:
            lines.append("Handoff (%s): %s" % (r["name"], handoff_text(r["handoff"])))
    if idle_p99:
        lines.append("Bound: 1.5 x idle p99 = %s ms." % ms(1.5 * idle_p99, 2))
        for r in results:
            if r.get("name") in ("colocated", "disaggregated", "colocated-stallfree", "colocated-chunked") \
                    and r.get("itl"):
                ratio = pct(r["itl"], 99) / idle_p99
                want = "beyond" if r["name"] == "colocated" else "within"
                ok = (ratio <= 1.5) == (want == "within")
                over = sum(1 for g in r["itl"] if g > 1.5 * idle_p99) / len(r["itl"])
                verdict = ("issue 41 wants %s 1.5x): %s" % (want, "as claimed" if ok else "NOT as claimed")
                           if r["name"] in ("colocated", "disaggregated")
                           else "%s 1.5x)" % ("within" if ratio <= 1.5 else "beyond"))
                lines.append("%s: p99 ITL %.2fx idle (%s; %.2f%% of its gaps over the bound"
                             % (r["name"], ratio, verdict, 100 * over))
    idle_d = next((r for r in results if r.get("name") == "idle-disaggregated" and r.get("itl")), None)
    dis = next((r for r in results if r.get("name") == "disaggregated" and r.get("itl")), None)
    if idle_d and dis:
        lines.append("disaggregated against the streams alone on the same prefill/decode pair: p99 ITL %.2fx"
                     % (pct(dis["itl"], 99) / pct(idle_d["itl"], 99)))
    worst = max((float(r["load_after"]) for r in results if "load_after" in r), default=0.0)
    if worst > (os.cpu_count() or 1) * 0.75:
        lines.append("Note: 1-min load average up to %.1f on %d CPUs during the run (other processes): noisy tails."
                     % (worst, os.cpu_count() or 0))
    # The handoff as the client sees it: the gap between the first token (from
    # the prefill worker) and the second (from the decode worker), less the
    # same gap without a handoff.
    by = {r["name"]: r for r in results if r.get("itl") is not None and "skipped" not in r}
    for d_name, c_name in (("disaggregated", "colocated"), ("idle-disaggregated", "idle")):
        d, c = by.get(d_name), by.get(c_name)
        if not d or not c:
            continue
        extra = d["idle_gap2"] - c["idle_gap2"]
        msg = ("Handoff as the client sees it (%s vs %s, idle cluster): the 2nd token of a %d-token prompt "
               "comes %s ms later (%s vs %s ms), %.1f ms per 1,000 prompt tokens"
               % (d_name, c_name, args.prompt_tokens, ms(extra), ms(d["idle_gap2"]), ms(c["idle_gap2"]),
                  extra * 1e3 * 1000.0 / args.prompt_tokens))
        if d.get("first_gaps") and c.get("first_gaps") and prompts_short_tokens(args):
            msg += "; the running streams' %d-token prompts: %s ms later (p50 %s vs %s ms)" % (
                prompts_short_tokens(args), ms(pct(d["first_gaps"], 50) - pct(c["first_gaps"], 50)),
                ms(pct(d["first_gaps"], 50)), ms(pct(c["first_gaps"], 50)))
        lines.append(msg + ".")
    if getattr(args, "kv_bytes", None):
        lines.append("K/V rows as f16 would be %.3f MB per 1,000 prompt tokens." % (args.kv_bytes / 1000.0))
    print("\n".join(lines), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cairn", default=CAIRN_BIN, help="cairn binary (copied to a temporary file first)")
    ap.add_argument("--model", help="a GGUF model instead of the made one")
    ap.add_argument("--dir", default="/tmp/cairn-bench", help="where the made model is kept")
    ap.add_argument("--setups", default="idle,colocated,disaggregated", help="of %s" % ",".join(ALL_SETUPS))
    ap.add_argument("--streams", type=int, default=4, help="running streams")
    ap.add_argument("--stream-tokens", type=int, default=1024,
                    help="max_tokens of each running-stream request (a stream then starts another)")
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between long prompts")
    ap.add_argument("--duration", type=float, help="seconds of long prompts (the window; default 20, 6 with --quick)")
    ap.add_argument("--prompt-tokens", type=int, default=1024, help="tokens of each long prompt (BOS included)")
    ap.add_argument("--long-tokens", type=int, default=16, help="max_tokens of each long prompt")
    ap.add_argument("--long-timeout", type=float, default=300.0, help="seconds to wait for the long prompts")
    ap.add_argument("--warmup", type=float, help="seconds the streams run before the window (default 3, 2 with --quick)")
    ap.add_argument("--threads", type=int, default=1, help="cairn worker --threads")
    ap.add_argument("--max-step-ms", type=float, default=0.0,
                    help="cairn worker --max-step-ms of the colocated-stallfree setup (0: automatic)")
    ap.add_argument("--controller-arg", action="append", default=[], help="extra controller flag (repeatable)")
    ap.add_argument("--worker-arg", action="append", default=[], help="extra worker flag (repeatable)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="run the setups this many times, in turn; the summary pools the rounds")
    ap.add_argument("--quick", action="store_true", help="a smoke run: default --duration 6, --warmup 2")
    args = ap.parse_args()
    sys.setswitchinterval(0.0005)  # chunk timestamps: a reading thread waits less for the GIL
    if args.duration is None:
        args.duration = 6.0 if args.quick else 20.0
    if args.warmup is None:
        args.warmup = 2.0 if args.quick else 3.0
    setups = [s for s in args.setups.split(",") if s]
    for s in setups:
        if s not in ALL_SETUPS:
            ap.error("unknown setup %r" % s)

    if not os.path.isfile(args.cairn):
        ap.error("no cairn binary at %s (build it, or pass --cairn)" % args.cairn)
    tmpdir = tempfile.mkdtemp(prefix="cairn-pd-")
    atexit.register(shutil.rmtree, tmpdir, True)
    cairn = os.path.join(tmpdir, "cairn")
    shutil.copy2(args.cairn, cairn)

    model = args.model
    if not model:
        os.makedirs(args.dir, exist_ok=True)
        dim, layers, heads, kvh, ffn, typ = DEFAULT_SHAPE
        model = os.path.join(args.dir, "pd-llama-%dx%d-ffn%d-%s.gguf" % (dim, layers, ffn, typ))
        if not os.path.exists(model):
            make_model(cairn, model, DEFAULT_SHAPE)
    desc, kv_bytes = model_shape(cairn, model)
    args.kv_bytes = kv_bytes
    print("model %s: %s" % (model, desc))
    if kv_bytes:
        print("K/V rows as f16: %d bytes per token, %.3f MB per 1,000 tokens (what a handoff should send)"
              % (kv_bytes, kv_bytes / 1000.0))
    print("cairn %s (copied from %s); host %d CPUs, load %s" % (cairn, args.cairn, os.cpu_count() or 0, loadavg()))

    busy = float(loadavg().split()[0]) if loadavg() != "?" else 0.0
    if busy > (os.cpu_count() or 1) * 0.75:
        print("note: the host is busy (1-min load average %.1f on %d CPUs): ITL tails and TTFT will be noisy; "
              "compare setups within one run, and use --rounds" % (busy, os.cpu_count() or 0), flush=True)
    help_text = subprocess.run([cairn, "worker", "--help"], capture_output=True, text=True).stdout
    args.role_flag = "--role" in help_text
    args.max_step_flag = "--max-step-ms" in help_text
    m = re.search(r"--max-step-ms[^\n]*?\]=(-?[0-9.]+)", help_text)
    args.max_step_default = m.group(1) if m else None
    print("cairn worker: --role %s; --max-step-ms %s" % (
        "accepted" if args.role_flag else "NOT accepted",
        "default %s (%s)" % (args.max_step_default, "stall-free batching off" if args.max_step_default and
                             float(args.max_step_default) < 0 else "stall-free batching on")
        if args.max_step_default else "not accepted (prompt chunks of --max-batch-tokens)"), flush=True)
    all_procs = []

    def on_term(signum, frame):
        raise KeyboardInterrupt("signal %d" % signum)

    signal.signal(signal.SIGTERM, on_term)
    atexit.register(stop_all, all_procs)

    results, prompts, failed = [], {}, False
    try:
        for rnd, name in [(k, n) for k in range(args.rounds) for n in setups]:
            if args.rounds > 1 and name == setups[0]:
                print("\n#### round %d of %d" % (rnd + 1, args.rounds), flush=True)
            if name.endswith("disaggregated") and not args.role_flag:
                why = "`cairn worker --help` has no --role (this binary predates issue 41)"
                if rnd == 0:
                    print("\n== %s: skipped: %s" % (name, why), flush=True)
                results.append({"name": name, "workers": "prefill + decode", "skipped": why})
                continue
            if name in ("colocated-stallfree", "colocated-chunked") and not args.max_step_flag:
                why = "`cairn worker --help` has no --max-step-ms"
                if rnd == 0:
                    print("\n== %s: skipped: %s" % (name, why), flush=True)
                results.append({"name": name, "workers": "both + both", "skipped": why})
                continue
            try:
                results.append(run_setup(name, args, cairn, model, prompts, all_procs))
            except KeyboardInterrupt:
                raise
            except Exception as e:  # noqa: BLE001 — reported, the other setups still run
                print("%s failed: %s" % (name, e), file=sys.stderr, flush=True)
                results.append({"name": name, "workers": "", "skipped": "failed: %s" % str(e).splitlines()[0][:120]})
                failed = True
    except KeyboardInterrupt:
        print("\ninterrupted; stopping the children", file=sys.stderr)
        failed = True
    finally:
        stop_all(all_procs)
    summary(results, args, desc)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
