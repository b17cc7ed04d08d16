"""A GGUF LLM cut over agents end to end: `cairn serve --servable-dir` with
`distributed.declare_servable(rank_size=4, stage_size=2, model_file=...)`
(tensor parallel 2 x pipeline parallel 2) and four `cairn agent` processes
mapping the same file, on loopback. Sixteen concurrent streams through the
OpenAI route get the text a single-process server gives for the same
prompts (stories260K from ../shared; a generated model otherwise, whose text
is then only checked for being there); an agent killed with SIGKILL in the
middle of streams ends every request within 10 s, /health says why, and a
restarted agent brings the model back without restarting the worker. Under
a controller, `cairn worker --rank-size 2` is reported not ready while an
agent is missing, and traffic goes to the other worker meanwhile.

Run by ctest with /usr/bin/python3; exit code 77 (skipped) when something it
needs is absent.
"""

import json
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from servables_test import CAIRN_BIN, SHARED, Server, skip  # noqa: E402
from distributed_test import Worker, health, start_agent, stop_all  # noqa: E402

CONFIG = textwrap.dedent("""\
    from mindspore_serving.server import distributed
    from mindspore_serving.server import register

    model = distributed.declare_servable(rank_size=4, stage_size=2, model_file="model.gguf",
                                         options={"temperature": 0.0})


    @register.register_method(output_names=["text"])
    def generate(prompt):
        return register.add_stage(model, prompt, outputs_count=1)
    """)

PROMPTS = ["Once upon a time", "Lily and Tom", "The dog", "One day, a little", "She was happy",
           "The sun was", "Ben had a", "In the park", "Mom said", "The cat and the bird",
           "A big red", "They played", "Sue liked", "The tree", "He ran to", "It was a sunny day"]


class Reference(Server):
    """`cairn serve --model FILE`: the single-process server."""

    def __init__(self, model):  # pylint: disable=super-init-not-called
        self.proc = subprocess.Popen([CAIRN_BIN, "serve", "--model", model, "--model-name", "llm", "--port", "0",
                                      "--threads", "1"],
                                     stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        self.lines = []
        self.events = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.http = self.wait_for(r"listening on http://([\d.]+:\d+)").group(1)
        self.wait_for(r"cairn: ready")


def make_model(path):
    """stories260K when ../shared has it (returns True: its text is meaningful)."""
    stories = os.path.join(SHARED, "models", "stories260K.gguf")
    if os.path.isfile(stories):
        shutil.copy(stories, path)
        return True
    subprocess.run([CAIRN_BIN, "make-model", path, "--dim", "64", "--layers", "4", "--heads", "4",
                    "--kv-heads", "2", "--ffn", "128"], check=True, capture_output=True)
    return False


def complete(http, prompt, max_tokens, timeout=60, model="llm"):
    """(HTTP status, text or error) of a non-streaming completion."""
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}).encode()
    req = urllib.request.Request("http://%s/v1/completions" % http, data=body,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())["choices"][0]["text"]
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def stream(http, prompt, max_tokens, first_chunk=None, timeout=60):
    """Streams a completion; returns ("done", text) at [DONE], else ("error", what)."""
    body = json.dumps({"model": "llm", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                       "stream": True}).encode()
    req = urllib.request.Request("http://%s/v1/completions" % http, data=body,
                                 headers={"Content-Type": "application/json"})
    text = ""
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            for raw in r:
                line = raw.decode().strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    return "done", text
                event = json.loads(data)
                if "error" in event:
                    return "error", json.dumps(event["error"])
                text += event["choices"][0].get("text", "")
                if first_chunk is not None:
                    first_chunk.set()
        return "error", "the stream ended without [DONE]"
    except urllib.error.HTTPError as e:
        return "error", "HTTP %d" % e.code
    except OSError as e:
        return "error", str(e)


def run_concurrently(fn, args_list):
    results = [None] * len(args_list)

    def one(i):
        results[i] = fn(*args_list[i])
    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(args_list))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


class DistributedLlm(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp(prefix="cairn-dllm-")
        servables = os.path.join(cls.root, "servables")
        os.makedirs(os.path.join(servables, "llm", "1"))
        cls.model = os.path.join(servables, "llm", "1", "model.gguf")
        cls.meaningful = make_model(cls.model)
        with open(os.path.join(servables, "llm", "servable_config.py"), "w") as f:
            f.write(CONFIG)
        # The single-process server whose greedy text the agents must give.
        cls.reference = Reference(cls.model)
        cls.worker = Worker(servables)
        cls.agents = [start_agent(cls.worker.dist, r, cls.model) for r in range(4)]
        cls.worker.wait_for(r"cairn: ready")

    @classmethod
    def tearDownClass(cls):
        cls.worker.stop()
        cls.reference.stop()
        stop_all(cls.agents)
        shutil.rmtree(cls.root, ignore_errors=True)

    def expected(self, prompts, max_tokens):
        out = []
        for p in prompts:
            code, text = complete(self.reference.http, p, max_tokens)
            self.assertEqual(code, 200, text)
            out.append(text)
        return out

    def test_1_sixteen_streams_match_one_process(self):
        want = self.expected(PROMPTS, 24)
        got = run_concurrently(stream, [(self.worker.http, p, 24) for p in PROMPTS])
        for prompt, (state, text), ref in zip(PROMPTS, got, want):
            self.assertEqual(state, "done", (prompt, text))
            self.assertTrue(text, prompt)
            if self.meaningful:
                self.assertEqual(text, ref, prompt)
        log = self.worker.log()
        self.assertRegex(log, r"agent rank 3 loaded layers \[\d+, \d+\) of \d+, tensor-parallel rank 1 of 2")
        self.assertRegex(log, r"MiB resident")

    def test_2_killed_agent_mid_stream(self):
        first = threading.Event()
        results = [None] * 8

        def one(i):
            results[i] = stream(self.worker.http, PROMPTS[i], 100, first)
        threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        self.assertTrue(first.wait(60), "no stream started")
        killed_at = time.time()
        self.agents[3].kill()
        self.agents[3].wait()
        for t in threads:
            t.join(timeout=max(0.1, killed_at + 10 - time.time()))
        self.assertFalse(any(t.is_alive() for t in threads), "a request was still open 10 s after the kill")
        self.assertTrue(all(r is not None for r in results))
        self.assertTrue(any(state == "error" for state, _ in results), results)
        # New requests fail at once while the rank is missing; /health says why.
        start = time.time()
        code, text = complete(self.worker.http, "Once upon a time", 8)
        self.assertEqual(code, 503, text)
        self.assertLess(time.time() - start, 10)
        code, body = health(self.worker)
        self.assertEqual(code, 503, body)
        self.assertIn("waiting for agent ranks 3", body["reason"])
        # The same rank restarted: the group re-forms and the model serves again.
        self.agents[3] = start_agent(self.worker.dist, 3, self.model)
        want = self.expected(PROMPTS[:4], 16)
        deadline = time.time() + 60
        while time.time() < deadline and health(self.worker)[0] != 200:
            time.sleep(0.2)
        self.assertEqual(health(self.worker)[0], 200, self.worker.log()[-3000:])
        got = run_concurrently(complete, [(self.worker.http, p, 16) for p in PROMPTS[:4]])
        for prompt, (code, text), ref in zip(PROMPTS, got, want):
            self.assertEqual(code, 200, text)
            if self.meaningful:
                self.assertEqual(text, ref, prompt)
        self.assertRegex(self.worker.log(), r"agent rank 3 left")


class Proc:
    """A cairn process whose stderr lines are kept and can be waited on."""

    def __init__(self, *args):
        self.proc = subprocess.Popen([CAIRN_BIN, *args], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                     text=True)
        self.lines = []
        self.events = queue.Queue()
        threading.Thread(target=Server._read, args=(self,), daemon=True).start()

    wait_for = Server.wait_for
    stop = Server.stop


def worker_up(controller_http):
    """{worker name: 1 or 0} from the controller's cairn_worker_up gauge."""
    with urllib.request.urlopen("http://%s/metrics" % controller_http, timeout=10) as r:
        text = r.read().decode()
    return {m.group(1): int(float(m.group(2)))
            for m in re.finditer(r'^cairn_worker_up\{[^}]*name="([^"]+)"[^}]*\} (\S+)$', text, re.M)}


def routed(controller_http, name):
    with urllib.request.urlopen("http://%s/metrics" % controller_http, timeout=10) as r:
        text = r.read().decode()
    m = re.search(r'^cairn_worker_routed_total\{[^}]*name="%s"[^}]*\} (\S+)$' % name, text, re.M)
    return float(m.group(1)) if m else 0.0


class UnderAController(unittest.TestCase):
    """`cairn worker --rank-size 2` beside a plain worker: while an agent is
    missing the controller sees the distributed worker as not ready and
    sends everything to the other one."""

    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="cairn-dllm-ctl-")
        self.model = os.path.join(self.root, "model.gguf")
        make_model(self.model)
        self.procs = []
        self.controller = Proc("controller", "--host", "127.0.0.1", "--http-port", "0", "--grpc-port", "0",
                               "--heartbeat-ms", "300", "--worker-timeout-ms", "1500", "--route", "round-robin")
        self.procs.append(self.controller)
        self.http = self.controller.wait_for(r"listening on http://(\S+)").group(1)
        grpc = self.controller.wait_for(r"grpc listening on (\S+)").group(1)
        plain = Proc("worker", "-m", self.model, "--controller", grpc, "--name", "plain", "--heartbeat-ms", "300",
                     "-t", "1")
        self.dist = Proc("worker", "-m", self.model, "--controller", grpc, "--name", "dist", "--heartbeat-ms", "300",
                         "-t", "1", "--rank-size", "2", "--distributed-address", "127.0.0.1:0")
        self.procs += [plain, self.dist]
        self.address = "127.0.0.1:" + self.dist.wait_for(r"distributed worker listening on \S+ \(port (\d+)\)").group(1)
        self.agents = [start_agent(self.address, r, self.model) for r in range(2)]
        self.wait_up({"plain": 1, "dist": 1})

    def tearDown(self):
        for p in self.procs:
            p.stop()
        stop_all(self.agents)
        shutil.rmtree(self.root, ignore_errors=True)

    def wait_up(self, want, seconds=30):
        deadline = time.time() + seconds
        up = {}
        while time.time() < deadline:
            up = worker_up(self.http)
            if all(up.get(k) == v for k, v in want.items()):
                return
            time.sleep(0.1)
        self.fail("workers up %s, wanted %s" % (up, want))

    def all_succeed(self, n):
        for code, text in run_concurrently(complete, [(self.http, p, 8, 60, "model") for p in PROMPTS[:n]]):
            self.assertEqual(code, 200, text)

    def test_traffic_goes_elsewhere_while_an_agent_is_missing(self):
        self.all_succeed(8)
        self.assertGreater(routed(self.http, "dist"), 0)
        self.agents[1].kill()
        self.agents[1].wait()
        start = time.time()
        self.wait_up({"plain": 1, "dist": 0}, seconds=10)
        self.assertLess(time.time() - start, 5)
        before = routed(self.http, "dist")
        self.all_succeed(8)
        self.assertEqual(routed(self.http, "dist"), before)
        self.agents[1] = start_agent(self.address, 1, self.model)
        self.wait_up({"plain": 1, "dist": 1})
        self.all_succeed(8)
        self.assertGreater(routed(self.http, "dist"), before)


if __name__ == "__main__":
    if not os.path.isfile(CAIRN_BIN):
        skip(CAIRN_BIN + " is not built")
    unittest.main(verbosity=2)
