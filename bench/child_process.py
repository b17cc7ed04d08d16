"""A child process for the benchmarks whose output lines are read on a thread,
so a benchmark can wait for a line ("listening on ...") without blocking on
the pipe, and stop the child cleanly at the end."""
import http.client
import queue
import re
import socket
import subprocess
import threading
import time


class Proc:
    def __init__(self, cmd, name=None, stdout=False):
        """Reads the child's stderr (and its stdout too when `stdout`)."""
        self.name = name or cmd[0]
        self.lines, self.events = [], queue.Queue()
        out = subprocess.STDOUT if stdout else subprocess.DEVNULL
        if stdout:
            self.proc = subprocess.Popen(cmd, stderr=subprocess.STDOUT, stdout=subprocess.PIPE, text=True,
                                         errors="replace")
            stream = self.proc.stdout
        else:
            self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=out, text=True, errors="replace")
            stream = self.proc.stderr
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream):
        for line in stream:
            self.lines.append(line)
            self.events.put(line)
        self.events.put(None)

    def wait_for(self, pattern, timeout=600):
        """The match of the first line matching `pattern`; raises with the
        last lines when the child ends or `timeout` passes first."""
        end = time.time() + timeout
        while time.time() < end:
            try:
                line = self.events.get(timeout=max(0.1, end - time.time()))
            except queue.Empty:
                break
            if line is None:
                break
            m = re.search(pattern, line)
            if m:
                return m
        raise RuntimeError("%s: no line matching %r:\n%s" % (self.name, pattern, "".join(self.lines[-40:])))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def loadavg():
    """The 1-, 5- and 15-minute load averages as text ("?" when unknown)."""
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(addr, proc, timeout=300):
    """Waits for GET http://ADDR/health to answer 200; raises with the
    child's last lines when it exits or `timeout` passes first."""
    end = time.time() + timeout
    while time.time() < end:
        if proc.proc.poll() is not None:
            break
        try:
            c = http.client.HTTPConnection(addr, timeout=5)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError("%s at %s never became healthy:\n%s" % (proc.name, addr, "".join(proc.lines[-30:])))
