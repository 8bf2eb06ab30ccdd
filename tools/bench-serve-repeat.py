#!/usr/bin/env python3
"""Repeated agent-style requests against `specula serve`, one server per speculation mode.

Each rep, C clients (default 4) each send 4 /v1/completions requests one after another: two of the
embedded prompts (models/default/prompts.jsonl), each twice (client c: prompts c, c+1, c, c+1), so
every prompt recurs within and across clients, as an agent's repeated calls do. Prints each rep's
aggregate tok/s (completion tokens / wall time) per server and the ratio to the plain server, then
medians [min-max] over the reps. The servers stay up across reps (a suffix store keeps what earlier
reps added) and are used in turn, so they see the same load.

Environment: BIN (build/specula), C (clients, 4), N (max_tokens, 96), REPS (3), TEMP (0),
NOSEED=1 (send no seed; otherwise request k of client c has seed 1 + 10c + k), SERVERS (a subset of
"plain suffix dspark dspark+suffix", which must include plain). Used for docs/SUFFIX.md §5 and
docs/server-batching.md ("sampled requests").
"""
import json, os, re, statistics as st, subprocess, threading, time, urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("BIN", os.path.join(ROOT, "build", "specula"))
N, REPS, C = int(os.environ.get("N", "96")), int(os.environ.get("REPS", "3")), int(os.environ.get("C", "4"))
TEMP = float(os.environ.get("TEMP", "0"))
PROMPTS = [json.loads(l)["prompt"] for l in open(os.path.join(ROOT, "models", "default", "prompts.jsonl"))]
MODES = {"plain": ["--spec", "none"], "suffix": ["--spec", "suffix"], "dspark": [], "dspark+suffix": ["--spec", "dspark+suffix"]}


def start(args):
    p = subprocess.Popen([BIN, "serve", "--port", "0", "-np", str(C), "-t", "2"] + args, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True, cwd=ROOT)
    for line in p.stderr:
        m = re.search(r"ready:.*port (\d+)", line)
        if m:
            return p, int(m.group(1))
    raise SystemExit("bench-serve-repeat: a server did not start: %s" % " ".join(args))


def request(port, prompt, seed):
    body = {"prompt": prompt, "max_tokens": N, "temperature": TEMP, "return_tokens": True}
    if os.environ.get("NOSEED") != "1":
        body["seed"] = seed
    r = urllib.request.Request("http://127.0.0.1:%d/v1/completions" % port, data=json.dumps(body).encode(),
                               headers={"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(r))


def workload(port):
    out, lock = [], threading.Lock()

    def client(c):
        for k in range(4):
            i = (c + k % 2) % len(PROMPTS)
            o = request(port, PROMPTS[i], 1 + 10 * c + k)
            with lock:
                out.append((i, o["usage"]["completion_tokens"], o.get("tokens"), o.get("timings", {})))

    t = time.time()
    threads = [threading.Thread(target=client, args=(c,)) for c in range(C)]
    for x in threads:
        x.start()
    for x in threads:
        x.join()
    return sum(x[1] for x in out) / (time.time() - t), out


def main():
    names = os.environ.get("SERVERS", "plain suffix dspark dspark+suffix").split()
    servers = {n: start(MODES[n]) for n in names}
    tps, texts = {n: [] for n in names}, {}
    try:
        for rep in range(REPS):
            for n in names:
                v, out = workload(servers[n][1])
                tps[n].append(v)
                for i, _, toks, _ in out:
                    texts.setdefault(i, set()).add(json.dumps(toks))
                dr = sum(x[3].get("draft_n", 0) for x in out)
                acc = sum(x[3].get("draft_n_accepted", 0) for x in out)
                print("rep %d %-14s %7.1f tok/s  drafts %d accepted %d" % (rep, n, v, dr, acc), flush=True)
        for n in names:
            r = [a / b for a, b in zip(tps[n], tps["plain"])]
            print("%-14s median %7.1f tok/s  vs plain %.2fx [%.2f-%.2f]  per rep %s" % (
                n, st.median(tps[n]), st.median(r), min(r), max(r), " ".join("%.2f" % x for x in r)))
        if TEMP == 0:
            print("identical outputs across servers and repeats:", all(len(s) == 1 for s in texts.values()))
    finally:
        for p, _ in servers.values():
            p.terminate()
            p.wait()


if __name__ == "__main__":
    main()
